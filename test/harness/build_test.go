package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildFlagsAreTheMakefiles: what tests and benchmarks run is built as
// the Makefile builds what ships (deploy/lpsd's image test pins the
// Dockerfile's build to it too).
func TestBuildFlagsAreTheMakefiles(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	want := "CGO_ENABLED=0 go build " + strings.Join(BuildFlags, " ") + " -ldflags "
	for line := range strings.SplitSeq(string(mk), "\n") {
		if strings.Contains(line, "go build") && strings.Contains(line, "./cmd/$$b") {
			if !strings.Contains(line, want) {
				t.Errorf("the Makefile builds with %q; BuildFlags give %q", strings.TrimSpace(line), want)
			}
			return
		}
	}
	t.Fatal("no go build line for ./cmd/$$b in the Makefile")
}
