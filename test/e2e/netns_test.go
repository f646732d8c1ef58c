package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"nodehotfix/test/harness"
)

// TestIntegrationNetnsDefaults runs the node side with no overrides inside a
// network namespace where 169.254.169.254 and the API server name are local
// addresses, so the agent's real defaults (IMDS URL, <api_server_name>:443
// resolved through /etc/hosts) are what gets exercised.
func TestIntegrationNetnsDefaults(t *testing.T) {
	integration(t)
	if ok, why := harness.NetnsUsable(); !ok {
		t.Skipf("network namespace scenario not run: %s", why)
	}
	const apiIP = "10.203.0.1"
	ns, err := harness.NewNetns(fmt.Sprintf("nhe2e%d", os.Getpid()), []string{"169.254.169.254/32", apiIP + "/32"},
		map[string]string{harness.APIServerName: apiIP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	ctx := t.Context()
	s := &stack{t: t, dir: t.TempDir()}
	if s.imds, err = harness.StartIMDSWith(ctx, env.bins, s.dir, harness.IMDSOptions{
		VMID: vmID, Sub: subscription, Listen: "169.254.169.254:80", Prefix: ns.Prefix(),
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.imds.Stop(5 * time.Second) })
	if s.lpsd, err = harness.StartLPSD(ctx, env.bins, s.dir, harness.LPSDOptions{
		IMDSRoots: s.imds.RootsFile, Listen: apiIP + ":443", Prefix: ns.Prefix(), Region: "eastus",
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.lpsd.Stop(10 * time.Second) })
	ln, err := ns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if s.art, err = harness.ServeArtifacts(ln, env.artifact, s.lpsd.TLS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.art.Close)
	s.generateKeys(ctx)
	s.publish(hotfix1, "", 100)

	n := s.node(nodeOpts{})
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := n.RunLauncherWith(runCtx, harness.LaunchOptions{
		Launcher: env.bins.Launcher,
		Env:      []string{"SSL_CERT_FILE=" + s.lpsd.TLS.CAFile},
		Prefix:   ns.Prefix(),
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, n, res, hotfix1, "lpsRead", "staged")
}
