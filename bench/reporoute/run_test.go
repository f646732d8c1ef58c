package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestSandboxArgv(t *testing.T) {
	s := &sandbox{root: "/sb", ca: "/ca.pem"}
	got := s.argv("env", []string{"DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "aks-node-controller=1"})
	if got[0] != "env" || got[2] != "apt-get" || got[3] != "-o" || got[4] != "Dir=/sb" || !slices.Equal(got[len(got)-3:], []string{"install", "-y", "aks-node-controller=1"}) {
		t.Errorf("argv = %q", got)
	}
	if got := s.argv("env", []string{"X=1", "dpkg", "--configure", "-a"}); !slices.Equal(got, []string{"env", "X=1", "dpkg", "--root=/sb", "--force-not-root", "--configure", "-a"}) {
		t.Errorf("dpkg argv = %q", got)
	}
}

// TestIntegrationRepoRoute runs the benchmark once: both installs must
// stage the same agent, or it fails.
func TestIntegrationRepoRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two agents and runs apt")
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"-n", "1", "-warmup", "0", "-compression", "zstd"}, &out, &errOut); code != 0 {
		t.Fatalf("reporoute exit %d:\n%s\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "ratio apt / repository route") {
		t.Errorf("no ratio in:\n%s", out.String())
	}
	if code := run(t.Context(), []string{"-compression", "lzma"}, &out, &errOut); code != 2 {
		t.Errorf("a bad -compression exits %d, want 2", code)
	}
}
