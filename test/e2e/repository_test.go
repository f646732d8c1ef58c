package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/node/pkgrepo"
	"nodehotfix/test/harness"
)

// TestIntegrationRepositoryRoute: a node baked without release keys, whose
// apt source names a signed repository holding the hotfix agent's package,
// provisions with the hotfix the service points it to, staged straight
// from that repository; apt is never run. A re-run finds it staged.
func TestIntegrationRepositoryRoute(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := t.Context()
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)

	g, err := harness.NewGPG(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	agent, err := os.ReadFile(filepath.Join(env.artifact, "aks-node-controller-"+hotfix1))
	if err != nil {
		t.Fatal(err)
	}
	deb, err := harness.BuildDeb(ctx, t.TempDir(), harness.Deb{Name: "aks-node-controller", Version: hotfix1 + "-ubuntu24.04u1", Arch: pkgrepo.Arch(), Compression: "zstd", Files: map[string][]byte{pkgrepo.AgentMember: agent}})
	if err != nil {
		t.Fatal(err)
	}
	repo := harness.AptRepo{Dir: t.TempDir(), Suite: "noble", Component: "main", Arch: pkgrepo.Arch()}
	if err := harness.WriteAptRepo(ctx, repo, g, []string{deb}, time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	srv, err := harness.StartArtifactServer(repo.Dir, s.lpsd.TLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	key, err := g.PublicKey(ctx, false)
	if err != nil {
		t.Fatal(err)
	}

	n := s.node(nodeOpts{noKeys: true})
	for path, b := range map[string][]byte{
		"etc/os-release": []byte("ID=ubuntu\nVERSION_ID=\"24.04\"\n"),
		"etc/apt/sources.list.d/microsoft-prod.list": fmt.Appendf(nil, "deb [arch=%s signed-by=/usr/share/keyrings/microsoft-prod.gpg] %s noble main\n", pkgrepo.Arch(), srv.URL),
		"usr/share/keyrings/microsoft-prod.gpg":      key,
	} {
		os.MkdirAll(n.Path(filepath.Dir(path)), 0o755)
		if err := os.WriteFile(n.Path(path), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// apt and dpkg on PATH record a call and fail, so a fallback shows and
	// never touches this machine.
	bin, called := t.TempDir(), filepath.Join(t.TempDir(), "called")
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg"} {
		os.WriteFile(filepath.Join(bin, tool), fmt.Appendf(nil, "#!/bin/sh\necho %s >> %s\nexit 100\n", tool, called), 0o755)
	}
	launch := func() harness.LaunchResult {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := n.RunLauncher(lctx, env.bins.Launcher, s.imds.URL, s.lpsd.GRPCAddr, "SSL_CERT_FILE="+s.lpsd.TLS.CAFile, "PATH="+bin+":"+os.Getenv("PATH"))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := launch()
	expect(t, n, res, hotfix1, "lpsRead", "staged")
	if _, ok := n.EventWith("DownloadHotfix", "route=repository"); !ok {
		e, _ := n.EventWith("DownloadHotfix", "")
		t.Errorf("download-hotfix event %q, want route=repository", e.Message)
	}
	if b, err := os.ReadFile(called); err == nil {
		t.Errorf("the package manager ran: %s", b)
	}
	// The agent-log lines the reference's e2e greps for.
	agentLog, _ := os.ReadFile(n.Path("var/log/azure/aks-node-controller.log"))
	for _, want := range []string{"downloading ANC hotfix", "downloaded ANC hotfix through authenticated repository fast path"} {
		if !strings.Contains(string(agentLog), want) {
			t.Errorf("agent log lacks %q:\n%s", want, agentLog)
		}
	}
	if strings.Contains(string(agentLog), "falling back to package manager") {
		t.Errorf("agent log says it fell back though the fast path worked:\n%s", agentLog)
	}
	if s.art.Hits() != 0 {
		t.Errorf("a node without keys fetched %d times from the release's artifact server", s.art.Hits())
	}
	hits := srv.Hits()
	res = launch()
	if !strings.Contains(res.Output, "Using hotfix binary") || srv.Hits() != hits {
		t.Errorf("re-run fetched the repository again (%d -> %d) or lost the hotfix:\n%s", hits, srv.Hits(), res.Output)
	}
}
