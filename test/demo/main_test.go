package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExports: the printed lines, pasted into a shell, put the demo's
// lpsctl first on PATH and set lpsctl's environment to exactly the demo's
// values, even in a directory whose name a shell would split.
func TestExports(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "it's a demo $HOME")
	lines := exports(filepath.Join(dir, "bin"), "127.0.0.1:8444", filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tokens"))
	if !strings.Contains(lines, "export LPSCTL_SERVER=") {
		t.Errorf("exports = %q, want an export line", lines)
	}
	out, err := exec.Command("sh", "-c", lines+`printf '%s\n' "${PATH%%:*}" "$LPSCTL_SERVER" "$LPSCTL_CA" "$LPSCTL_TOKEN_FILE"`).CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	want := []string{filepath.Join(dir, "bin"), "127.0.0.1:8444", filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tokens")}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")); diff != "" {
		t.Errorf("the shell's variables after the exports (-want +got):\n%s", diff)
	}
}
