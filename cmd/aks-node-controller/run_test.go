package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, &out, &errOut); code != exitOK {
			t.Errorf("run(%v) = %d, want 0", args, code)
		}
		if out.String() != version+"\n" {
			t.Errorf("run(%v) printed %q, want %q", args, out.String(), version+"\n")
		}
	}
}

func TestRunUnknownCommand(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"frobnicate"}, &out, &errOut); code != exitUsage {
		t.Errorf("run(frobnicate) = %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errOut.String(), "unknown command: frobnicate") {
		t.Errorf("stderr = %q", errOut.String())
	}
}

// TestCheckHotfixAlwaysExitsZero covers the CLI wiring: failures, bad flags
// and stray arguments all exit 0, and a run that cannot reach the service
// (and has no cold-start map) still writes its event and log under --root.
func TestCheckHotfixAlwaysExitsZero(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"fetch failure": {"--imds-url", "http://127.0.0.1:1"},
		"stray args":    {"--imds-url", "http://127.0.0.1:1", "extra", "args"},
		"bad flag":      {"--no-such-flag"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			var out, errOut bytes.Buffer
			code := run(t.Context(), append([]string{"check-hotfix", "--root", root}, args...), &out, &errOut)
			if code != exitOK {
				t.Fatalf("check-hotfix exit = %d, want 0; stderr:\n%s", code, errOut.String())
			}
			if name == "bad flag" {
				return
			}
			events, _ := filepath.Glob(filepath.Join(root, "var/log/azure/Microsoft.Azure.Extensions.CustomScript/events/*.json"))
			if len(events) != 1 {
				t.Errorf("got %d events, want 1", len(events))
			}
			logData, err := os.ReadFile(filepath.Join(root, "var/log/azure/aks-node-controller.log"))
			if err != nil || !strings.Contains(string(logData), "check-hotfix outcome=noColdStartPointer") {
				t.Errorf("agent log = %q, %v", logData, err)
			}
		})
	}
}
