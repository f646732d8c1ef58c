// Command demo runs the whole hotfix flow locally on real processes and
// explains what happened: `make demo`.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/test/harness"
)

const (
	bakedVersion  = "202604.01.0"
	hotfixVersion = "202604.01.1"
	// brokenVersion verifies and stages, then crashes in provision.
	brokenVersion = "202604.01.2"
	// refusedVersion is signed for bytes other than those its URL serves:
	// every node refuses it as signed and provisions with the baked agent.
	refusedVersion = "202604.01.3"
	vmID           = "6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
	subscription   = "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	keep := fs.Bool("keep", false, "keep lpsd and its dashboard running until interrupted, and the work directory (logs, node roots) after")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	work, err := os.MkdirTemp("", "nodehotfix-demo-")
	if err != nil {
		fmt.Fprintln(out, "demo:", err)
		return 1
	}
	d := &demo{out: out, work: work, start: time.Now()}
	err = d.run(ctx)
	if err == nil && *keep {
		fmt.Fprintf(out, "\n==> lpsd keeps running: the dashboard is %s\n    sign in with the admin token %s (certificate: the demo's own CA, %s)\n", d.dashboard, d.token, d.ca)
		fmt.Fprintf(out, "    to run lpsctl against it (lpsctl status, lpsctl audit), paste into a shell:\n\n%s\n    press Ctrl-C to stop\n", d.lpsctlEnv)
		<-ctx.Done()
	}
	d.cleanup()
	if *keep || err != nil {
		fmt.Fprintf(out, "\nwork directory kept: %s\n", work)
	} else {
		os.RemoveAll(work)
	}
	if err != nil {
		fmt.Fprintln(out, "\nDEMO FAILED:", err)
		return 1
	}
	fmt.Fprintf(out, "\ndemo finished in %s; every process it started has been stopped\n", time.Since(d.start).Round(100*time.Millisecond))
	return 0
}

type demo struct {
	out   io.Writer
	work  string
	start time.Time
	stops []func()
	// The dashboard's address, the admin token and the CA that signed its
	// certificate.
	dashboard, token, ca string
	// lpsctlEnv is the shell lines that point lpsctl at this lpsd.
	lpsctlEnv string
}

// exports returns ready-to-paste shell lines that put the demo's lpsctl
// on PATH and point it at lpsd through its environment variables.
func exports(binDir, server, ca, tokenFile string) string {
	return fmt.Sprintf("export PATH=%s:\"$PATH\"\nexport LPSCTL_SERVER=%s LPSCTL_CA=%s LPSCTL_TOKEN_FILE=%s\n",
		shellQuote(binDir), shellQuote(server), shellQuote(ca), shellQuote(tokenFile))
}

// shellQuote quotes s as one shell word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (d *demo) cleanup() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
}

func (d *demo) step(format string, a ...any) func() {
	t := time.Now()
	fmt.Fprintf(d.out, "==> "+format+"\n", a...)
	return func() { fmt.Fprintf(d.out, "    done in %s\n", time.Since(t).Round(time.Millisecond)) }
}

func (d *demo) run(ctx context.Context) error {
	binDir := filepath.Join(d.work, "bin")
	os.MkdirAll(binDir, 0o755)
	done := d.step("build lpsd, lpsctl, imds-emulator, a baked agent %s, a hotfix agent %s and a broken one %s", bakedVersion, hotfixVersion, brokenVersion)
	baked, hotfix := filepath.Join(binDir, "agent-baked"), filepath.Join(d.work, "artifacts", "aks-node-controller-"+hotfixVersion)
	broken := filepath.Join(d.work, "artifacts", "aks-node-controller-"+brokenVersion)
	os.MkdirAll(filepath.Dir(hotfix), 0o755)
	// The agents and the services share most dependencies; building them
	// concurrently lets the go command share and parallelise that work.
	agentErr := make(chan error, 1)
	go func() {
		err := harness.BuildAgent(ctx, baked, bakedVersion)
		if err == nil {
			err = harness.BuildAgent(ctx, hotfix, hotfixVersion)
		}
		if err == nil {
			err = harness.GoBuild(ctx, "./test/e2e/testdata/crashagent", broken, "-X main.version="+brokenVersion)
		}
		agentErr <- err
	}()
	bins, err := harness.Build(ctx, binDir)
	if aerr := <-agentErr; err == nil {
		err = aerr
	}
	if err != nil {
		return err
	}
	done()

	done = d.step("start imds-emulator (vmId %s), a witness (lpsctl witness serve) and lpsd (bbolt store, minted TLS, admin token; release keys: any 2 of 3 holders; a log key, checkpoints cosigned by the witness)", vmID)
	svc := filepath.Join(d.work, "services")
	os.MkdirAll(svc, 0o755)
	imds, err := harness.StartIMDS(ctx, bins, svc, vmID, subscription)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, func() { imds.Stop(5 * time.Second) })
	trust, err := harness.StartTrust(ctx, bins, svc)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, trust.Stop)
	// The autopilot looks often so the demo need not wait (production: 10 s).
	lpsd, err := harness.StartLPSD(ctx, bins, svc, harness.LPSDOptions{IMDSRoots: imds.RootsFile, Region: "eastus", Extra: append([]string{"--autopilot-interval=200ms"}, trust.LPSDFlags()...)})
	if err != nil {
		return err
	}
	d.stops = append(d.stops, func() { lpsd.Stop(10 * time.Second) })
	artifacts, err := harness.StartArtifactServer(filepath.Dir(hotfix), lpsd.TLS)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, artifacts.Close)
	d.dashboard, d.ca = "https://"+lpsd.AdminAddr+"/", lpsd.TLS.CAFile
	d.lpsctlEnv = exports(filepath.Dir(bins.LPSCtl), lpsd.AdminAddr, lpsd.TLS.CAFile, lpsd.TokenFile)
	if tok, err := os.ReadFile(lpsd.TokenFile); err == nil {
		_, d.token, _ = strings.Cut(strings.TrimSpace(string(tok)), ":")
	}
	fmt.Fprintf(d.out, "    imds-emulator %s, lpsd node %s admin %s (dashboard %s), artifacts %s\n", imds.URL, lpsd.GRPCAddr, lpsd.AdminAddr, d.dashboard, artifacts.URL)
	done()

	// The demo's nodes share one vmId, so its canary is the first
	// percentage that includes that VM's bucket (a canary of nodes would
	// wait for a control cohort this small fleet does not have).
	canary := rollout.Bucket(vmID, hotfixVersion)/100 + 1
	done = d.step("holder a signs %s offline; publish is refused (1 of the 2 signatures needed); holder b co-signs; publish; plan it: a canary at %d%% (1 report), then 100%% (2 reports)", hotfixVersion, canary)
	env, err := d.sign(ctx, lpsd, trust, harness.Release{Version: hotfixVersion, Binary: hotfix, URL: artifacts.URL + "/" + filepath.Base(hotfix)}, "a")
	if err != nil {
		return err
	}
	if _, err := lpsd.Ctl(ctx, "release", "publish", "--envelope", env, "--reason", "demo"); err == nil {
		return fmt.Errorf("lpsd published a release signed by one of the 2 keys its key set needs")
	} else {
		fmt.Fprintf(d.out, "    refused: %s\n", lineWith(err.Error(), "signed by"))
	}
	if err := trust.CoSign(ctx, env, "b"); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"release", "publish", "--envelope", env, "--reason", "demo"},
		{"rollout", "plan", hotfixVersion, "--steps", fmt.Sprintf("%d:0s:1,100:0s:2", canary), "--reason", "demo: canary, then everyone"},
	} {
		if _, err := lpsd.Ctl(ctx, args...); err != nil {
			return err
		}
	}
	// Nodes require the release in the log: wait for the witnessed
	// checkpoint that holds it.
	if err := lpsd.WaitLogged(ctx, 1); err != nil {
		return err
	}
	status, err := lpsd.Ctl(ctx, "status")
	if err != nil {
		return err
	}
	fmt.Fprint(d.out, indent(status))
	done()

	pubKeys, err := os.ReadFile(trust.Root)
	if err != nil {
		return err
	}
	// The node trusts the artifact server's CA through SSL_CERT_FILE, which
	// Go reads for the system roots; production nodes use the real roots.
	sslEnv := "SSL_CERT_FILE=" + lpsd.TLS.CAFile

	done = d.step("node 1: flag ENABLE_PROVISIONING_HOTFIX=true; run the real launcher")
	n1, err := harness.NewNode(filepath.Join(d.work, "node-on"), harness.NodeOptions{
		BakedAgent: baked, ClusterCA: lpsd.TLS.CAPEM, ReleaseKeys: pubKeys,
		Features: map[string]string{"ENABLE_PROVISIONING_HOTFIX": "true"},
	})
	if err != nil {
		return err
	}
	res, err := n1.RunLauncher(ctx, bins.Launcher, imds.URL, lpsd.GRPCAddr, sslEnv)
	if err != nil {
		return err
	}
	done()
	if err := d.report(n1, res); err != nil {
		return err
	}
	if !strings.Contains(res.Output, "Using hotfix binary") {
		return fmt.Errorf("node 1 did not run the hotfix binary:\n%s", res.Output)
	}
	prov, err := n1.Provisioned()
	if err != nil || !strings.Contains(prov["Output"], "provisioned by aks-node-controller "+hotfixVersion) {
		return fmt.Errorf("node 1 provision.json does not show the hotfix agent: %v %v", prov, err)
	}
	fmt.Fprintf(d.out, "    RESULT: provision ran from the hotfix agent %s (provision.json: %q)\n", hotfixVersion, strings.TrimSpace(prov["Output"]))
	if err := d.showTrust(ctx, n1, lpsd, trust); err != nil {
		return err
	}

	before := lpsdRequests(ctx, lpsd)
	imdsBefore := strings.Count(imds.Log(), "attested document")
	done = d.step("node 2: flag absent (default-off); run the launcher again")
	n2, err := harness.NewNode(filepath.Join(d.work, "node-off"), harness.NodeOptions{BakedAgent: baked, ClusterCA: lpsd.TLS.CAPEM, ReleaseKeys: pubKeys})
	if err != nil {
		return err
	}
	res2, err := n2.RunLauncher(ctx, bins.Launcher, imds.URL, lpsd.GRPCAddr, sslEnv)
	if err != nil {
		return err
	}
	done()
	if err := d.report(n2, res2); err != nil {
		return err
	}
	prov2, err := n2.Provisioned()
	if err != nil || !strings.Contains(prov2["Output"], "provisioned by aks-node-controller "+bakedVersion) {
		return fmt.Errorf("node 2 provision.json does not show the baked agent: %v %v", prov2, err)
	}
	after := lpsdRequests(ctx, lpsd)
	imdsAfter := strings.Count(imds.Log(), "attested document")
	if after != before || imdsAfter != imdsBefore {
		return fmt.Errorf("flag off made network calls: lpsd requests %d -> %d, imds %d -> %d", before, after, imdsBefore, imdsAfter)
	}
	fmt.Fprintf(d.out, "    RESULT: provision ran from the baked agent %s; lpsd requests %d -> %d and imds documents %d -> %d (no network calls)\n",
		bakedVersion, before, after, imdsBefore, imdsAfter)

	return d.closedLoop(ctx, loop{bins: bins, lpsd: lpsd, imds: imds, artifacts: artifacts, baked: baked, broken: broken, trust: trust, pubKeys: pubKeys, sslEnv: sslEnv, nodes: 2})
}

// loop is what the closed-loop part of the demo runs with.
type loop struct {
	bins      harness.Binaries
	lpsd      *harness.LPSD
	imds      *harness.IMDS
	artifacts *harness.ArtifactServer
	baked     string
	broken    string
	trust     *harness.Trust
	pubKeys   []byte
	sslEnv    string
	nodes     int
}

// node provisions one more node with the hotfix flag on and returns its
// launcher output.
func (d *demo) node(ctx context.Context, l *loop) (harness.LaunchResult, error) {
	l.nodes++
	n, err := harness.NewNode(filepath.Join(d.work, fmt.Sprintf("node-loop-%d", l.nodes)), harness.NodeOptions{
		BakedAgent: l.baked, ClusterCA: l.lpsd.TLS.CAPEM, ReleaseKeys: l.pubKeys,
		Features: map[string]string{"ENABLE_PROVISIONING_HOTFIX": "true"},
	})
	if err != nil {
		return harness.LaunchResult{}, err
	}
	// Each node is its own VM: the emulator attests the vmId in its path.
	res, err := n.RunLauncher(ctx, l.bins.Launcher, l.imds.URL+"/vm/"+newVMID(), l.lpsd.GRPCAddr, l.sslEnv)
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("node exited %d:\n%s", res.ExitCode, res.Output)
	}
	prov, _ := n.Provisioned()
	agent := prov["AgentVersion"]
	if prov["Fallback"] != "" {
		agent += " after a fallback (" + prov["Fallback"] + ")"
	}
	fmt.Fprintf(d.out, "    node %d provisioned by %s\n", l.nodes, agent)
	return res, nil
}

// newVMID returns a random vmId.
func newVMID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// waitState waits for the autopilot to move version to state.
func (d *demo) waitState(ctx context.Context, l *loop, version, state string) error {
	return d.waitRelease(ctx, l, version, state, func(s string, _ int) bool { return s == state })
}

// waitRelease polls status until version's state and percentage satisfy
// ok, for at most 20 s; what names the wait in the error.
func (d *demo) waitRelease(ctx context.Context, l *loop, version, what string, ok func(state string, percent int) bool) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := l.lpsd.Ctl(ctx, "status", "--json")
		if err != nil {
			return err
		}
		var st struct {
			Releases []struct {
				Version, State string
				Percent        int
			} `json:"releases"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return err
		}
		for _, r := range st.Releases {
			if r.Version == version && ok(r.State, r.Percent) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never became %s", version, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// closedLoop shows lpsd stepping a healthy plan and halting a broken hotfix
// on its canary, from the nodes' own reports.
func (d *demo) closedLoop(ctx context.Context, l loop) error {
	done := d.step("the closed loop, healthy: node 1 reported its hotfix run, the autopilot left the canary; one more node, and it completes %s", hotfixVersion)
	// The autopilot leaves the canary on node 1's report; the next node
	// asks once it has.
	if err := d.waitRelease(ctx, &l, hotfixVersion, "rolling at 100%", func(_ string, percent int) bool { return percent == 100 }); err != nil {
		return err
	}
	if _, err := d.node(ctx, &l); err != nil {
		return err
	}
	if err := d.waitState(ctx, &l, hotfixVersion, "complete"); err != nil {
		return err
	}
	done()

	done = d.step("the closed loop, broken: %s verifies and stages, then crashes in provision; plan: a canary of 3 nodes, then 100%%", brokenVersion)
	env, err := d.sign(ctx, l.lpsd, l.trust, harness.Release{Version: brokenVersion, Binary: l.broken, URL: l.artifacts.URL + "/" + filepath.Base(l.broken)}, "a", "c")
	if err != nil {
		return err
	}
	if err := d.publish(ctx, &l, env, brokenVersion, "3n:1h:3,100:1h:10"); err != nil {
		return err
	}
	for range 3 {
		if _, err := d.node(ctx, &l); err != nil {
			return err
		}
	}
	if err := d.waitState(ctx, &l, brokenVersion, "halted"); err != nil {
		return err
	}
	status, err := l.lpsd.Ctl(ctx, "status")
	if err != nil {
		return err
	}
	fmt.Fprint(d.out, indent(status))
	audit, err := l.lpsd.Ctl(ctx, "audit")
	if err != nil {
		return err
	}
	fmt.Fprint(d.out, indent(audit))
	done()

	done = d.step("after the halt, a new node gets the last good hotfix %s again", hotfixVersion)
	res, err := d.node(ctx, &l)
	if err != nil {
		return err
	}
	if !strings.Contains(res.Output, "Using hotfix binary") {
		return fmt.Errorf("the node after the halt did not run %s:\n%s", hotfixVersion, res.Output)
	}
	done()
	fmt.Fprintf(d.out, "    RESULT: the broken hotfix reached 3 canary nodes, each fell back to the baked agent in the same boot and provisioned; lpsd halted it on their reports with no operator\n")
	return d.refusedLoop(ctx, l)
}

// refusedLoop shows a release that nodes refuse, which a loop judging
// only the nodes that ran it would never see, halted on its canary.
func (d *demo) refusedLoop(ctx context.Context, l loop) error {
	done := d.step("the closed loop, refused: %s is signed for other bytes than its URL serves; plan: a canary of 3 nodes, then 100%%", refusedVersion)
	env, err := d.sign(ctx, l.lpsd, l.trust, harness.Release{
		Version: refusedVersion, Binary: l.broken, URL: l.artifacts.URL + "/aks-node-controller-" + hotfixVersion, SkipVersionCheck: true,
	}, "b", "c")
	if err != nil {
		return err
	}
	if err := d.publish(ctx, &l, env, refusedVersion, "3n:1h:3,100:1h:10"); err != nil {
		return err
	}
	for range 3 {
		res, err := d.node(ctx, &l)
		if err != nil {
			return err
		}
		if !strings.Contains(res.Output, "Using VHD-baked binary") {
			return fmt.Errorf("a node ran the refused release:\n%s", res.Output)
		}
	}
	if err := d.waitState(ctx, &l, refusedVersion, "halted"); err != nil {
		return err
	}
	status, err := l.lpsd.Ctl(ctx, "status")
	if err != nil {
		return err
	}
	fmt.Fprint(d.out, indent(status))
	done()
	fmt.Fprintf(d.out, "    RESULT: every canary node refused %s (sha256 not the signed one) and provisioned with the baked agent; they counted against it, not as its baseline, and lpsd halted it (reason refusedIntegrity)\n", refusedVersion)
	return nil
}

// sign has the holders named sign r offline, the first signing and the
// others co-signing, and returns the envelope's path.
func (d *demo) sign(ctx context.Context, l *harness.LPSD, trust *harness.Trust, r harness.Release, holders ...string) (string, error) {
	r.KeyFile = trust.Keys[holders[0]]
	env, err := l.SignRelease(ctx, filepath.Join(d.work, "services"), r)
	if err != nil {
		return "", err
	}
	return env, trust.CoSign(ctx, env, holders[1:]...)
}

// publish publishes env, plans version on steps and waits until nodes are
// served the checkpoint that logs it.
func (d *demo) publish(ctx context.Context, l *loop, env, version, steps string) error {
	out, err := l.lpsd.Ctl(ctx, "log", "--url", "http://"+l.lpsd.HTTPAddr+"/log/", "--log-key", l.trust.LogVKey, "-o", "json")
	if err != nil {
		return err
	}
	var before struct {
		Size int `json:"size"`
	}
	if err := json.Unmarshal([]byte(out), &before); err != nil {
		return fmt.Errorf("lpsctl log -o json: %w", err)
	}
	for _, args := range [][]string{
		{"release", "publish", "--envelope", env, "--reason", "demo"},
		{"rollout", "plan", version, "--steps", steps, "--reason", "demo"},
	} {
		if _, err := l.lpsd.Ctl(ctx, args...); err != nil {
			return err
		}
	}
	// The release is the log's next record.
	return l.lpsd.WaitLogged(ctx, before.Size+1)
}

// showTrust shows what node n verified before it ran the hotfix, and the
// log as anyone can monitor it.
func (d *demo) showTrust(ctx context.Context, n *harness.Node, l *harness.LPSD, trust *harness.Trust) error {
	kept, err := os.ReadFile(n.Path("opt/azure/containers/aks-node-controller-trust.json"))
	if err != nil {
		return fmt.Errorf("node kept no trust state: %w", err)
	}
	var st struct {
		Checkpoint string `json:"checkpoint"`
	}
	if err := json.Unmarshal(kept, &st); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "    TRUST: the node verified 2 of its 3 baked keys' signatures, the release's inclusion proof and the log checkpoint it kept:\n%s", indent(st.Checkpoint))
	out, err := l.Ctl(ctx, "log", "--url", "http://"+l.HTTPAddr+"/log/", "--log-key", trust.LogVKey, "--witness", trust.WitnessVKey, "--root", trust.Root)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "    the transparency log, as a monitor reads it (lpsctl log --root: signers verified, witness checked):\n%s", indent(out))
	return nil
}

// lineWith returns the first line of s that contains sub, else s.
func lineWith(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return strings.TrimSpace(line)
		}
	}
	return s
}

var durationRe = regexp.MustCompile(`durationMs=(\d+)`)
var outcomeRe = regexp.MustCompile(`outcome=(\S+)`)
var choiceRe = regexp.MustCompile(`choice=(\S+)`)

// report prints the launcher's decisions and the node's event timeline.
func (d *demo) report(n *harness.Node, res harness.LaunchResult) error {
	fmt.Fprintf(d.out, "    launcher exit %d after %s; its decisions:\n", res.ExitCode, res.Duration.Round(time.Millisecond))
	for _, line := range strings.Split(res.Output, "\n") {
		if strings.HasPrefix(line, "{") {
			continue // the agent's own JSON log lines
		}
		for _, key := range []string{"running check-hotfix", "check-hotfix completed", "download-hotfix", "Using ", "not newer", "exited with"} {
			if strings.Contains(line, key) {
				fmt.Fprintf(d.out, "      | %s\n", strings.TrimSpace(line))
				break
			}
		}
	}
	evs, err := n.Events()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "    timeline (guest-agent events):\n")
	fmt.Fprintf(d.out, "      %-23s  %-14s  %-13s  %-8s  %s\n", "start", "task", "agent version", "duration", "outcome")
	for _, e := range evs {
		task := strings.TrimPrefix(e.Task, "AKS.AKSNodeController.")
		dur := ""
		if m := durationRe.FindStringSubmatch(e.Message); m != nil {
			dur = m[1] + "ms"
		}
		outcome := strings.SplitN(e.Message, " | ", 2)[0]
		if m := choiceRe.FindStringSubmatch(e.Message); m != nil {
			outcome = "chose " + m[1]
		} else if m := outcomeRe.FindStringSubmatch(e.Message); m != nil {
			outcome = m[1]
			if i := strings.Index(e.Message, "route="); i >= 0 {
				outcome += " " + strings.Fields(e.Message[i:])[0]
			}
		}
		fmt.Fprintf(d.out, "      %-23s  %-14s  %-13s  %-8s  %s\n", e.Start, task, e.Version, dur, outcome)
	}
	return nil
}

// lpsdRequests returns the total node requests lpsd has answered.
func lpsdRequests(ctx context.Context, l *harness.LPSD) int {
	out, err := l.Ctl(ctx, "status", "--json")
	if err != nil {
		return -1
	}
	var st struct {
		Requests []struct {
			Count int `json:"count"`
		} `json:"requests"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return -1
	}
	n := 0
	for _, r := range st.Requests {
		n += r.Count
	}
	return n
}

func indent(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("      | " + line + "\n")
	}
	return b.String()
}
