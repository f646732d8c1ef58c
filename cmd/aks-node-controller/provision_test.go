package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProvisionThenWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   string
		wantCode int
	}{
		{"success", "echo provisioned", 0},
		{"failure", "echo broken >&2; exit 9", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			nbc := filepath.Join(root, "opt/azure/containers/aks-node-controller-nbc-cmd.sh")
			if err := os.MkdirAll(filepath.Dir(nbc), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(nbc, []byte(tt.script), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if code := run(t.Context(), []string{"provision", "--root", root, "--nbc-cmd=" + nbc}, &out, &errOut); code != tt.wantCode {
				t.Fatalf("provision exit = %d, want %d; stderr:\n%s", code, tt.wantCode, errOut.String())
			}
			out.Reset()
			if code := run(t.Context(), []string{"provision-wait", "--root", root, "--timeout", "1m"}, &out, &errOut); code != tt.wantCode {
				t.Fatalf("provision-wait exit = %d, want %d", code, tt.wantCode)
			}
			if !strings.Contains(out.String(), `"ExitCode":"`) {
				t.Errorf("provision-wait printed %q, want provision.json", out.String())
			}
		})
	}
}

func TestProvisionWaitTimeout(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"provision-wait", "--root", t.TempDir(), "--timeout", "50ms"}, &out, &errOut); code != exitError {
		t.Errorf("provision-wait exit = %d, want %d", code, exitError)
	}
	if !strings.Contains(errOut.String(), "deadline exceeded") {
		t.Errorf("stderr = %q", errOut.String())
	}
}
