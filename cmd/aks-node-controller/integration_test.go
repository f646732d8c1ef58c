package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
)

// buildAgent compiles this command stamped with ver into a temp dir.
func buildAgent(t *testing.T, ver string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "aks-node-controller")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-ldflags", "-X main.version="+ver, "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestIntegrationCheckHotfixProcess runs the real binary against a real TLS
// gRPC server and a metadata stand-in on loopback.
func TestIntegrationCheckHotfixProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	t.Parallel()
	bin := buildAgent(t, "202604.01.0")

	ca := lpstest.NewCA(t)
	cert := ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName)
	served := `{"hotfixes":{"202604.01":"202604.01.1"}}`
	good := lpstest.Start(t, cert, lpstest.Config(served), lpstest.Options{})
	hung := lpstest.Start(t, cert, lpstest.Hang(), lpstest.Options{})
	imdsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"encoding":"pkcs7","signature":"tok"}`))
	}))
	t.Cleanup(imdsSrv.Close)

	newRoot := func(t *testing.T) string {
		root := t.TempDir()
		dir := filepath.Join(root, "opt/azure/containers")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := `{"version":"v1","api_server_config":{"api_server_name":"myapi.test.local"},"kubernetes_ca_cert":"` + base64.StdEncoding.EncodeToString(ca.PEM) + `"}`
		if err := os.WriteFile(filepath.Join(dir, "aks-node-controller-config.json"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return root
	}
	runAgent := func(t *testing.T, root, lpsAddr string) {
		// The generous context is a hang detector, not a performance bound.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "check-hotfix", "--root", root, "--imds-url", imdsSrv.URL, "--lps-addr", lpsAddr, "--budget", "1s")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("check-hotfix: %v\n%s", err, out)
		}
	}
	event := func(t *testing.T, root string) map[string]string {
		files, _ := filepath.Glob(filepath.Join(root, "var/log/azure/Microsoft.Azure.Extensions.CustomScript/events/*.json"))
		if len(files) != 1 {
			t.Fatalf("got %d event files, want 1", len(files))
		}
		data, _ := os.ReadFile(files[0])
		var ev map[string]string
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}

	t.Run("stages the pointer", func(t *testing.T) {
		root := newRoot(t)
		runAgent(t, root, good.Addr)
		data, err := os.ReadFile(filepath.Join(root, "opt/azure/containers/aks-node-controller-hotfix.json"))
		if err != nil || string(data) != served {
			t.Errorf("pointer = %q, %v; want %q", data, err, served)
		}
		ev := event(t, root)
		if ev["Version"] != "202604.01.0" || !strings.HasPrefix(ev["Message"], "check-hotfix outcome=lpsRead") {
			t.Errorf("event = %v", ev)
		}
	})
	t.Run("hung server ends at the budget", func(t *testing.T) {
		root := newRoot(t)
		runAgent(t, root, hung.Addr)
		ev := event(t, root)
		// Unreachable and no cold-start map: the reference's outcome, at
		// Informational level.
		if ev["EventLevel"] != "Informational" || !strings.HasPrefix(ev["Message"], "check-hotfix outcome=noColdStartPointer") || !strings.Contains(ev["Message"], "DeadlineExceeded") {
			t.Errorf("event = %v", ev)
		}
	})
}

// TestIntegrationApplyEmbeddedHotfixAsTheReferenceCallsIt: a reference
// launcher runs `<hotfix agent> apply-embedded-hotfix` with no arguments;
// the agent as built carries no payload, so it exits 0 and changes no file
// but its log and its event.
func TestIntegrationApplyEmbeddedHotfixAsTheReferenceCallsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	t.Parallel()
	bin := buildAgent(t, "202604.01.1")
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=ubuntu\n"), 0o644)
	cmd := exec.CommandContext(t.Context(), bin, "apply-embedded-hotfix", "--root", root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("apply-embedded-hotfix: %v\n%s", err, out)
	}
	var changed []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(p, filepath.Join(root, "var/log")) && p != filepath.Join(root, "etc/os-release") {
			changed = append(changed, p)
		}
		return nil
	})
	if len(changed) != 0 {
		t.Errorf("apply-embedded-hotfix without a payload wrote %v", changed)
	}
	events, _ := filepath.Glob(filepath.Join(root, "var/log/azure/Microsoft.Azure.Extensions.CustomScript/events/*"))
	found := false
	for _, e := range events {
		data, _ := os.ReadFile(e)
		found = found || strings.Contains(string(data), "apply-embedded-hotfix outcome=inactive")
	}
	if !found {
		t.Errorf("no event says outcome=inactive among %v\n%s", events, out)
	}
}
