package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/test/harness"
)

// expect asserts what a launcher run did: exit 0, which agent provisioned,
// and the check-hotfix / download-hotfix outcomes (empty: no such event).
func expect(t *testing.T, n *harness.Node, res harness.LaunchResult, agent, check, download string) {
	t.Helper()
	if res.ExitCode != 0 {
		t.Fatalf("launcher exit %d:\n%s", res.ExitCode, res.Output)
	}
	prov, err := n.Provisioned()
	if err != nil || prov["ExitCode"] != "0" || !strings.Contains(prov["Output"], "provisioned by aks-node-controller "+agent) {
		t.Errorf("provision.json = %v, %v; want success by agent %s\nlauncher output:\n%s", prov, err, agent, res.Output)
	}
	for task, outcome := range map[string]string{"CheckHotfix": check, "DownloadHotfix": download} {
		_, found := n.EventWith(task, "")
		switch {
		case outcome == "" && found:
			e, _ := n.EventWith(task, "")
			t.Errorf("unexpected %s event: %s", task, e.Message)
		case outcome != "":
			if _, ok := n.EventWith(task, "outcome="+outcome); !ok {
				evs, _ := n.Events()
				t.Errorf("no %s event with outcome=%s; events: %+v\nlauncher output:\n%s", task, outcome, evs, res.Output)
			}
		}
	}
}

// TestIntegrationCrashingHotfixFallsBack: a signed hotfix that verifies and
// stages but panics in provision before the bootstrap starts. The baked
// agent provisions in the same boot, once; provision.json and the launcher
// event say so, and provision-wait reports success.
func TestIntegrationCrashingHotfixFallsBack(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.publish(crashingHotfix, "", 100)
	n := s.node(nodeOpts{})
	res := s.launch(n, "", "")
	expect(t, n, res, bakedVersion, "lpsRead", "staged")
	for _, want := range []string{"Using hotfix binary", "panic: injected", "falling back to VHD-baked binary"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("launcher output lacks %q:\n%s", want, res.Output)
		}
	}
	prov, _ := n.Provisioned()
	if prov["Agent"] != "baked" || prov["AgentVersion"] != bakedVersion || !strings.Contains(prov["Fallback"], "exited with code 2") {
		t.Errorf("provision.json = %v, want the baked agent after a fallback", prov)
	}
	if e, ok := n.EventWith("Launcher", "fallback=true"); !ok || e.Level != "Error" || !strings.Contains(e.Message, "version="+crashingHotfix) {
		t.Errorf("launcher fallback event = %+v, %v", e, ok)
	}
	if got := strings.Count(res.Output, "provisioned by aks-node-controller"); got != 1 {
		t.Errorf("the bootstrap ran %d times, want once:\n%s", got, res.Output)
	}
	out, err := exec.CommandContext(t.Context(), n.Path("opt/azure/containers/aks-node-controller"), "provision-wait", "--root", n.Root, "--timeout", "30s").Output()
	if err != nil || !strings.Contains(string(out), `"ExitCode":"0"`) {
		t.Errorf("provision-wait = %q, %v", out, err)
	}
	// The node reported the fallback, attested, before the launcher exited.
	if got := s.releaseCounts(crashingHotfix); got != (counts{Reported: 1, Fallback: 1}) {
		t.Errorf("counts of %s = %+v, want one fallback reported\n%s", crashingHotfix, got, res.Output)
	}
}

func TestIntegrationHotfixProvisioned(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)
	n := s.node(nodeOpts{})
	res := s.launch(n, "", "")
	expect(t, n, res, hotfix1, "lpsRead", "staged")
	if !strings.Contains(res.Output, "Using hotfix binary") {
		t.Errorf("launcher did not choose the hotfix:\n%s", res.Output)
	}
	if e, ok := n.EventWith("Provision", "Completed"); !ok || e.Version != hotfix1 {
		t.Errorf("Provision event = %+v, want one from agent %s", e, hotfix1)
	}
	if got := s.releaseCounts(hotfix1); got != (counts{Reported: 1, OK: 1}) {
		t.Errorf("counts of %s = %+v, want one ok report", hotfix1, got)
	}
	// Launch sent its started report before the hotfix ran (on
	// check-hotfix's connection), and the outcome then replaced it.
	if m := metrics(t, s.lpsd); !strings.Contains(m, `lpsd_reports_total{result="started"} 1`) {
		t.Errorf("lpsd counted no started report:\n%s", grepLines(m, "lpsd_reports_total"))
	}

	// provision-wait, as the CSE runs it from the baked binary, reports
	// provisioning's status.
	out, err := exec.CommandContext(t.Context(), n.Path("opt/azure/containers/aks-node-controller"), "provision-wait", "--root", n.Root, "--timeout", "30s").Output()
	if err != nil || !strings.Contains(string(out), `"ExitCode":"0"`) {
		t.Errorf("provision-wait = %q, %v", out, err)
	}

	// A re-run finds the verified hotfix in place and does not download.
	hits := s.art.Hits()
	res = s.launch(n, "", "")
	if !strings.Contains(res.Output, "Using hotfix binary") || s.art.Hits() != hits {
		t.Errorf("re-run downloaded again (%d -> %d) or lost the hotfix:\n%s", hits, s.art.Hits(), res.Output)
	}
	if _, ok := n.EventWith("DownloadHotfix", "outcome=alreadyStaged"); !ok {
		t.Error("re-run did not report alreadyStaged")
	}
}

func TestIntegrationFlagOffMakesNoNetworkCalls(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)
	before, imdsBefore := s.requests(s.lpsd), strings.Count(s.imds.Log(), "attested document")
	n := s.node(nodeOpts{flagOff: true})
	res := s.launch(n, "", "")
	expect(t, n, res, bakedVersion, "", "")
	if after, imdsAfter := s.requests(s.lpsd), strings.Count(s.imds.Log(), "attested document"); after != before || imdsAfter != imdsBefore {
		t.Errorf("flag off made network calls: lpsd %d -> %d, imds %d -> %d", before, after, imdsBefore, imdsAfter)
	}
}

// TestIntegrationRolloutByBucket sets the percentage just below this VM's
// bucket (excluded), then just above it (included).
func TestIntegrationRolloutByBucket(t *testing.T) {
	integration(t)
	t.Parallel()
	b := rollout.Bucket(vmID, hotfix1)
	below, above := b*100/rollout.Buckets, b*100/rollout.Buckets+1
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", below)

	n := s.node(nodeOpts{})
	expect(t, n, s.launch(n, "", ""), bakedVersion, "noHotfixAvailable", "")
	explain := s.ctl("explain", "--vm-id", vmID, "--subscription", subscription)
	if !strings.Contains(explain, "bucket="+strconv.Itoa(b)) {
		t.Errorf("explain does not show the bucket rule:\n%s", explain)
	}

	s.ctl("rollout", "set", hotfix1, "--percent", strconv.Itoa(above), "--reason", "e2e")
	s.waitSynced(s.lpsd)
	n2 := s.node(nodeOpts{})
	expect(t, n2, s.launch(n2, "", ""), hotfix1, "lpsRead", "staged")
}

func TestIntegrationRevokedAfterStaging(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)
	n := s.node(nodeOpts{})
	expect(t, n, s.launch(n, "", ""), hotfix1, "lpsRead", "staged")

	s.ctl("revoke", hotfix1, "--reason", "e2e")
	s.waitSynced(s.lpsd)
	res := s.launch(n, "", "")
	if _, ok := n.EventWith("DownloadHotfix", "outcome=revoked"); !ok {
		evs, _ := n.Events()
		t.Fatalf("no revoked outcome; events %+v\n%s", evs, res.Output)
	}
	if _, err := os.Stat(n.Path("opt/azure/containers/aks-node-controller-hotfix")); err == nil {
		t.Error("revoked hotfix binary still staged")
	}
	if !strings.Contains(res.Output, "Using VHD-baked binary") {
		t.Errorf("launcher did not fall back to the baked agent:\n%s", res.Output)
	}
	prov, _ := n.Provisioned()
	if !strings.Contains(prov["Output"], bakedVersion) {
		t.Errorf("provision.json = %v, want the baked agent", prov)
	}
}

// TestIntegrationServiceFaults: whatever the live-patching service does,
// the node provisions with the baked agent.
func TestIntegrationServiceFaults(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)
	cert, err := tls.LoadX509KeyPair(s.lpsd.TLS.CertFile, s.lpsd.TLS.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	down, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Close() })
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	garbage := lpstest.Start(t, cert, lpstest.Config("<html>502 Bad Gateway</html>"), lpstest.Options{})
	internal := lpstest.Start(t, cert, lpstest.Error(status.Error(codes.Internal, "boom")), lpstest.Options{})
	tests := []struct {
		name, addr, imds, want string
	}{
		// Unreachable with no cold-start map is the reference's
		// noColdStartPointer; a garbage answer is a failure.
		{"lpsd down", down, "", "noColdStartPointer"},
		{"lpsd hung", hung.Addr().String(), "", "noColdStartPointer"},
		{"lpsd returns garbage", garbage.Addr, "", "failed"},
		{"lpsd internal error", internal.Addr, "", "noColdStartPointer"},
		{"imds down", "", "http://" + down, "noColdStartPointer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := s.node(nodeOpts{})
			expect(t, n, s.launch(n, tt.imds, tt.addr), bakedVersion, tt.want, "")
		})
	}
}

func TestIntegrationUntrustedReleases(t *testing.T) {
	integration(t)
	t.Parallel()
	t.Run("signed by another key", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOpts{})
		other, _, err := s.lpsd.GenerateKeys(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s.publish(hotfix1, other, 100)
		n := s.node(nodeOpts{})
		expect(t, n, s.launch(n, "", ""), bakedVersion, "lpsRead", "untrusted")
		if s.art.Hits() != 0 {
			t.Error("the node downloaded an untrusted artifact")
		}
	})
	t.Run("tampered envelope", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOpts{})
		bin := filepath.Join(env.artifact, "aks-node-controller-"+hotfix1)
		envPath, err := s.lpsd.SignRelease(t.Context(), t.TempDir(), harness.Release{Version: hotfix1, Binary: bin, URL: s.art.URL + "/x", KeyFile: s.priv})
		if err != nil {
			t.Fatal(err)
		}
		envelope, _ := os.ReadFile(envPath)
		var m map[string]any
		json.Unmarshal(envelope, &m)
		payload := m["payload"].(string)
		m["payload"] = payload[:10] + strings.Map(func(r rune) rune {
			if r == 'A' {
				return 'B'
			}
			return r
		}, payload[10:])
		tampered, _ := json.Marshal(m)
		body, _ := json.Marshal(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": hotfix1}, Releases: []json.RawMessage{tampered}})
		cert, _ := tls.LoadX509KeyPair(s.lpsd.TLS.CertFile, s.lpsd.TLS.KeyFile)
		fake := lpstest.Start(t, cert, lpstest.Config(string(body)), lpstest.Options{})
		n := s.node(nodeOpts{})
		expect(t, n, s.launch(n, "", fake.Addr), bakedVersion, "lpsRead", "untrusted")
	})
	t.Run("artifact server serves other bytes", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOpts{})
		s.publish(hotfix1, "", 100)
		evil, _ := os.ReadFile(filepath.Join(env.artifact, "aks-node-controller-"+hotfix2))
		s.art.Tamper.Store(&evil)
		n := s.node(nodeOpts{})
		// The release's bytes are not the signed ones: the node says so
		// (artifactIntegrity), which lpsd counts against the release.
		expect(t, n, s.launch(n, "", ""), bakedVersion, "lpsRead", "artifactIntegrity")
		if _, err := os.Stat(n.Path("opt/azure/containers/aks-node-controller-hotfix")); err == nil {
			t.Error("wrong bytes were staged")
		}
	})
}

// TestIntegrationTwoReplicasOnEtcd publishes through one lpsd and serves a
// node through another, both on one etcd.
func TestIntegrationTwoReplicasOnEtcd(t *testing.T) {
	integration(t)
	t.Parallel()
	endpoints := etcdtest.Start(t)
	spec := "etcd:" + strings.Join(endpoints, ",")
	s := newStack(t, stackOpts{store: spec})
	other, err := harness.StartLPSD(t.Context(), env.bins, s.dir, harness.LPSDOptions{
		Name: "lpsd-b", IMDSRoots: s.imds.RootsFile, Store: spec, TLS: s.lpsd.TLS, Region: "eastus",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Stop(10 * time.Second) })

	s.publish(hotfix1, "", 100)
	converged := s.waitSynced(other)
	t.Logf("replica b converged %s after the publish through replica a", converged)
	if converged > time.Second {
		t.Errorf("replica b took %s to see the publish, want within a second", converged)
	}
	n := s.node(nodeOpts{})
	expect(t, n, s.launch(n, "", other.GRPCAddr), hotfix1, "lpsRead", "staged")
	if s.requests(other) == 0 {
		t.Error("replica b served no request")
	}
}

func TestIntegrationCustomDataBoothook(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)
	n := s.node(nodeOpts{})
	// Render the node's custom data from its config with lpsctl and check it
	// would lay down the same feature flag file the launcher reads.
	out, err := s.lpsd.Ctl(t.Context(), "customdata", "--config", n.Path("opt/azure/containers/aks-node-controller-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "#cloud-boothook\n") || !strings.Contains(out, "enabled_features.sh") {
		t.Errorf("custom data:\n%s", out)
	}
}

// releaseState returns version's rollout state and percent from status.
func (s *stack) releaseState(version string) (string, int) {
	s.t.Helper()
	out := s.ctl("status", "--json")
	var st struct {
		Releases []struct {
			Version string `json:"version"`
			State   string `json:"state"`
			Percent int    `json:"percent"`
		} `json:"releases"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		s.t.Fatal(err)
	}
	for _, r := range st.Releases {
		if r.Version == version {
			return r.State, r.Percent
		}
	}
	s.t.Fatalf("no release %s in status", version)
	return "", 0
}

// waitState waits, bounded, for the autopilot to move version to state.
func (s *stack) waitState(version, state string) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, pct := s.releaseState(version)
		if got == state {
			s.waitSynced(s.lpsd)
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s is %s at %d%%, want %s (audit:\n%s\nlpsd log:\n%s)", version, got, pct, state, s.ctl("audit"), s.lpsd.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIntegrationClosedLoop: a hotfix that crashes in provision on its
// canary nodes is halted by lpsd itself on their reports, and later nodes
// are served nothing; a healthy hotfix advances through its steps to
// complete. Both with audit entries by lpsd.
func TestIntegrationClosedLoop(t *testing.T) {
	integration(t)
	t.Parallel()
	t.Run("bad hotfix halted on its canary", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOpts{lpsdFlags: []string{"--autopilot-interval=100ms"}})
		s.publishDraft(crashingHotfix, "")
		// A canary of exactly 3 nodes.
		s.ctl("rollout", "plan", crashingHotfix, "--steps", "3n:1h:3,100:1h:10", "--max-failure", "0.2", "--reason", "e2e")
		s.waitSynced(s.lpsd)
		// Three VMs take the seats: each is one vote, whatever it reports.
		for range 3 {
			n := s.node(nodeOpts{})
			res := s.launch(n, s.imds.URL+"/vm/"+vmIn(t, crashingHotfix, 100), "")
			expect(t, n, res, bakedVersion, "lpsRead", "staged")
		}
		s.waitState(crashingHotfix, "halted")
		if st := s.ctl("status"); !strings.Contains(st, "1/2 canary 3/3 nodes") {
			t.Errorf("status does not show the halted canary's 3 seats taken:\n%s", st)
		}
		audit := s.ctl("audit")
		if !strings.Contains(audit, "auto-halt") || !strings.Contains(audit, "lpsd") || !strings.Contains(audit, "regressing (ceiling): failure rate") {
			t.Errorf("audit has no automatic halt by lpsd with its verdict:\n%s", audit)
		}
		// A node provisioning after the halt is offered nothing.
		n := s.node(nodeOpts{})
		res := s.launch(n, s.imds.URL+"/vm/"+vmIn(t, crashingHotfix, 100), "")
		expect(t, n, res, bakedVersion, "noHotfixAvailable", "")
		if got := s.releaseCounts(crashingHotfix); got != (counts{Reported: 3, Fallback: 3}) {
			t.Errorf("counts = %+v, want 3 fallbacks", got)
		}
	})
	t.Run("healthy hotfix advances", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOpts{lpsdFlags: []string{"--autopilot-interval=100ms"}})
		s.publishDraft(hotfix1, "")
		s.ctl("rollout", "plan", hotfix1, "--steps", "50:0s:2,100:0s:3", "--reason", "e2e")
		s.waitSynced(s.lpsd)
		// Two VMs in the canary's half of the buckets.
		for range 2 {
			n := s.node(nodeOpts{})
			expect(t, n, s.launch(n, s.imds.URL+"/vm/"+vmIn(t, hotfix1, 50), ""), hotfix1, "lpsRead", "staged")
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, pct := s.releaseState(hotfix1); pct == 100 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("never advanced to 100%%; audit:\n%s", s.ctl("audit"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		n := s.node(nodeOpts{})
		expect(t, n, s.launch(n, s.imds.URL+"/vm/"+vmIn(t, hotfix1, 100), ""), hotfix1, "lpsRead", "staged")
		s.waitState(hotfix1, "complete")
		if audit := s.ctl("audit"); strings.Count(audit, "auto-advance") != 2 {
			t.Errorf("audit, want two automatic advances:\n%s", audit)
		}
	})
}

// vmIn returns a random vmId whose rollout bucket for version is under
// percent: a VM a rollout at that percentage includes.
func vmIn(t *testing.T, version string, percent int) string {
	t.Helper()
	for range 10000 {
		b := make([]byte, 16)
		rand.Read(b)
		id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		if rollout.Bucket(id, version) < percent*rollout.Buckets/100 {
			return id
		}
	}
	t.Fatalf("no vmId under %d%% for %s", percent, version)
	return ""
}

// TestIntegrationReferenceLaunchers: every generation of the reference
// launcher (test/launcher/reference/launcher.sh, reconstructed from its
// contract) drives our agent: the August one runs its subcommands inline,
// the later two through the hotfix flow helper the image installs. The
// hotfix lpsd serves provisions, chosen by Select, with the reference's log
// lines. Without the helper the skipping generation provisions with the
// baked agent and the strict one exits 1, which is why packaging always
// installs it.
func TestIntegrationReferenceLaunchers(t *testing.T) {
	integration(t)
	t.Parallel()
	repo, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	launcher := filepath.Join(repo, "test/launcher/reference/launcher.sh")
	s := newStack(t, stackOpts{})
	s.publish(hotfix1, "", 100)
	run := func(n *harness.Node, generation string) harness.LaunchResult {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		res, err := n.RunLauncherWith(ctx, harness.LaunchOptions{
			Launcher: launcher, IMDSURL: s.imds.URL, LPSAddr: s.lpsd.GRPCAddr,
			Env: []string{"SSL_CERT_FILE=" + s.lpsd.TLS.CAFile, "REFERENCE_GENERATION=" + generation},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, generation := range []string{"inline", "skipping", "strict"} {
		t.Run(generation, func(t *testing.T) {
			n := s.node(nodeOpts{})
			res := run(n, generation)
			expect(t, n, res, hotfix1, "lpsRead", "staged")
			lines := []string{
				"ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer",
				"ANC check-hotfix completed",
				"Found ANC hotfix config at " + n.Path("opt/azure/containers/aks-node-controller-hotfix.json") + "; running download-hotfix",
				"ANC download-hotfix completed",
				"Using hotfix binary: " + n.Path("opt/azure/containers/aks-node-controller-hotfix"),
				"aks-node-controller completed successfully",
			}
			if generation != "inline" {
				// apply-embedded-hotfix came with the helper (#9465, #9532).
				lines = append(lines, "ANC apply-embedded-hotfix completed")
			}
			for _, want := range lines {
				if !strings.Contains(res.Output, want) {
					t.Errorf("launcher output lacks %q:\n%s", want, res.Output)
				}
			}
			if e, ok := n.EventWith("Provision", "Completed"); !ok || e.Version != hotfix1 {
				t.Errorf("Provision event = %+v, want one from agent %s", e, hotfix1)
			}
			if generation == "inline" {
				return
			}

			bare := s.node(nodeOpts{})
			if err := os.Remove(bare.Path("opt/azure/containers/aks-node-controller-hotfix.sh")); err != nil {
				t.Fatal(err)
			}
			res = run(bare, generation)
			if generation == "strict" {
				if res.ExitCode != 1 || !strings.Contains(res.Output, "Missing ANC hotfix flow script: ") {
					t.Errorf("strict launcher without the helper: exit %d, want 1 with its message\n%s", res.ExitCode, res.Output)
				}
				return
			}
			expect(t, bare, res, bakedVersion, "", "")
		})
	}
}

// TestIntegrationReportResent: a node whose lpsd is unreachable when it
// reports (here the whole flow finds nothing listening) keeps its outcome
// in the outbox; `aks-node-controller report-resend`, which the node's
// timer runs, delivers it once lpsd answers, and removes the outbox.
func TestIntegrationReportResent(t *testing.T) {
	integration(t)
	t.Parallel()
	s := newStack(t, stackOpts{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	n := s.node(nodeOpts{})
	expect(t, n, s.launch(n, "", down), bakedVersion, "noColdStartPointer", "")
	outbox := n.Path("var/log/azure/aks/report-outbox.json")
	if _, err := os.Stat(outbox); err != nil {
		t.Fatalf("no outbox after a report lpsd never acknowledged: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, env.baked, "report-resend", "--root", n.Root, "--imds-url", s.imds.URL, "--lps-addr", s.lpsd.GRPCAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "delivered 1, dropped 0, kept 0") {
		t.Fatalf("report-resend = %v:\n%s", err, out)
	}
	st, err := lpsdStatus(t.Context(), s.lpsd)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Control) != 1 || st.Control[0].Counts.OK != 1 {
		t.Errorf("control = %+v, want the resent report counted: 1 ok", st.Control)
	}
	if _, err := os.Stat(outbox); !os.IsNotExist(err) {
		t.Errorf("outbox left after its report was delivered: %v", err)
	}
}

// metrics returns lpsd's /metrics text.
func metrics(t *testing.T, l *harness.LPSD) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+l.HTTPAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
