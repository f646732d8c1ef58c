package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"nodehotfix/bench/internal/rig"
	"nodehotfix/bench/internal/stats"
	"nodehotfix/internal/hotfix"
	"nodehotfix/test/harness"
)

// durationRe finds the in-process duration check-hotfix logs on success
// (whole ms); eventDurationRe finds it in the telemetry event, always there.
var (
	durationRe      = regexp.MustCompile(`"durationMs":(\d+)`)
	eventDurationRe = regexp.MustCompile(`durationMs=(\d+)`)
)

// lpsDeadline is check-hotfix's deadline for connect, handshake and call
// (internal/node/checkhotfix lpsTimeout); its overall budget is 5 s.
const lpsDeadline = 3 * time.Second

type options struct {
	n, warmup, hungN int
	keep             bool
	// rtt, when set, puts the metadata service and the live-patching
	// service behind a loopback proxy with this round trip, for the
	// agent and the floor alike.
	rtt time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("checkhotfix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 30, "measured iterations of the happy path and no-LPS cases")
	fs.IntVar(&o.warmup, "warmup", 3, "unmeasured iterations first")
	fs.IntVar(&o.hungN, "hung-n", 3, "iterations of each hung-LPS case (each takes seconds)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	fs.DurationVar(&o.rtt, "rtt", 0, "round trip to add to the metadata and live-patching services (e.g. 2ms); 0 is bare loopback")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return rig.Session(ctx, "checkhotfix", o.keep, stdout, stderr, func(ctx context.Context, dir string) error {
		return bench(ctx, o, dir, stdout)
	})
}

func bench(ctx context.Context, o options, dir string, out io.Writer) error {
	docs := 7*(o.n+o.warmup) + 4*o.hungN + 16
	r, err := rig.New(ctx, dir, docs)
	if err != nil {
		return err
	}
	floor, err := r.Build("./bench/floor/checkfloor")
	if err != nil {
		return err
	}
	env, err := r.SignRelease(rig.HotfixVersion, "https://artifacts.invalid/aks-node-controller", fmt.Sprintf("%064x", 1), 1)
	if err != nil {
		return err
	}
	lps, err := r.StartLPS(env)
	if err != nil {
		return err
	}
	node, err := r.NewNode("node", nil)
	if err != nil {
		return err
	}
	// far is addr as the measured cases reach it: through the proxy
	// when -rtt is set. The hung cases are not delayed.
	far := func(addr string) (string, error) {
		if o.rtt <= 0 {
			return addr, nil
		}
		return rig.DelayProxy(ctx, "127.0.0.1:0", addr, o.rtt/2)
	}
	imdsURL := r.IMDS.URL
	if o.rtt > 0 {
		a, err := far(strings.TrimPrefix(imdsURL, "http://"))
		if err != nil {
			return err
		}
		imdsURL = "http://" + a
	}
	agentVia := func(imds, lpsAddr string, extra ...string) []string {
		return append([]string{r.Agent, "check-hotfix", "--root", node.Root, "--imds-url", imds, "--lps-addr", lpsAddr}, extra...)
	}
	agent := func(lpsAddr string, extra ...string) []string { return agentVia(r.IMDS.URL, lpsAddr, extra...) }
	floorArgv := func(lpsAddr string) []string {
		return []string{floor, "-imds-url", imdsURL, "-lps-addr", lpsAddr, "-ca", r.TLS.CAFile}
	}
	if lps, err = far(lps); err != nil {
		return err
	}
	pointer := node.Path("opt/azure/containers/aks-node-controller-hotfix.json")

	network := "loopback"
	if o.rtt > 0 {
		network = fmt.Sprintf("loopback plus a %s round trip to both services", o.rtt)
	}
	fmt.Fprintf(out, "check-hotfix wall time, whole process, %s; %d iterations after %d warm-up, agent and floor interleaved\n\n", network, o.n, o.warmup)

	version, _, err := timeN(ctx, o.n, o.warmup, []string{r.Agent, "version"}, nil, "", nil)
	if err != nil {
		return err
	}
	happy, err := paired(ctx, o, agentVia(imdsURL, lps), "lpsRead", floorArgv(lps), pointer)
	if err != nil {
		return err
	}
	emptyLPS, err := r.StartLPS()
	if err != nil {
		return err
	}
	if emptyLPS, err = far(emptyLPS); err != nil {
		return err
	}
	notFound, err := paired(ctx, o, agentVia(imdsURL, emptyLPS), "noHotfixAvailable", floorArgv(emptyLPS), pointer)
	if err != nil {
		return err
	}
	// Release trust v2: a fresh node baked with the 2-of-3 root that
	// requires the log is served 2 key-set links, a cosigned checkpoint
	// and the release's inclusion proof (check-hotfix declares the key
	// set and log size it holds, and stages what it is served; the node
	// verifies it in download-hotfix, bench/README's BenchmarkEvaluate).
	tr, err := r.NewTrust(0)
	if err != nil {
		return err
	}
	trustLPS, err := r.StartTrustLPS(tr)
	if err != nil {
		return err
	}
	if trustLPS, err = far(trustLPS); err != nil {
		return err
	}
	root, err := os.ReadFile(tr.Root)
	if err != nil {
		return err
	}
	trustNode, err := harness.NewNode(filepath.Join(r.Dir, "trust-node"), harness.NodeOptions{BakedAgent: r.Agent, ClusterCA: r.TLS.CAPEM, ReleaseKeys: root})
	if err != nil {
		return err
	}
	trustArgv := []string{r.Agent, "check-hotfix", "--root", trustNode.Root, "--imds-url", imdsURL, "--lps-addr", trustLPS}
	trusted, err := paired(ctx, o, trustArgv, "lpsRead", floorArgv(trustLPS),
		trustNode.Path("opt/azure/containers/aks-node-controller-hotfix.json"))
	if err != nil {
		return err
	}
	if err := expectEvidence(trustNode.Path("opt/azure/containers/aks-node-controller-hotfix.json"), len(tr.Links)); err != nil {
		return err
	}
	fmt.Fprintf(out, "%-34s %s\n", "agent `version` (process start)", version.String("ms"))
	for _, p := range []struct {
		name string
		p    pair
	}{
		{"happy path: served, pointer staged", happy},
		{"NotFound: nothing staged", notFound},
		{"release trust: served 2 links, checkpoint, proof (floor: same lpsd, no evidence)", trusted},
	} {
		fmt.Fprintf(out, "%s\n", p.name)
		fmt.Fprintf(out, "  %-32s %s\n", "floor (checkfloor)", p.p.floor.String("ms"))
		fmt.Fprintf(out, "  %-32s %s\n", "check-hotfix", p.p.agent.String("ms"))
		fmt.Fprintf(out, "  %-32s %s\n", "  of which checkhotfix.Run", p.p.inProcess.String("ms"))
		fmt.Fprintf(out, "  %-32s %.2fx (ratio of medians); paired ratios median %.2fx (min %.2f, max %.2f); target <= 1.15x\n",
			"ratio check-hotfix / floor", p.p.agent.Median/p.p.floor.Median, p.p.ratio.Median, p.p.ratio.Min, p.p.ratio.Max)
	}

	refused, err := harness.FreePort()
	if err != nil {
		return err
	}
	noLPS, _, err := timeN(ctx, o.n, o.warmup, agent(refused), nil, "noColdStartPointer", nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-34s %s\n", "no LPS (connection refused)", noLPS.String("ms"))

	hung, err := r.StartHungLPS()
	if err != nil {
		return err
	}
	hole, err := r.StartBlackhole()
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, c := range []struct {
		name, addr string
		budget     time.Duration // 0: the default (5 s), bounded by the 3 s LPS deadline
	}{
		{"hung LPS: RPC never answers", hung, 0},
		{"hung LPS: RPC never answers", hung, time.Second},
		{"hung LPS: TLS never completes", hole, 0},
		{"hung LPS: TLS never completes", hole, time.Second},
	} {
		argv, bound, label := agent(c.addr), lpsDeadline, "LPS deadline 3s, budget 5s"
		if c.budget > 0 {
			argv, bound, label = append(argv, "--budget", c.budget.String()), c.budget, "--budget "+c.budget.String()
		}
		s, in, err := timeN(ctx, o.hungN, 0, argv, nil, "noColdStartPointer", node)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s [%s]\n  process %s; over %s: median %+.1fms, max %+.1fms\n  checkhotfix.Run %s (whole ms, as logged)\n",
			c.name, label, s.String("ms"), bound, s.Median-ms(bound), s.Max-ms(bound), in.String("ms"))
	}
	if n := r.IMDS.OnDemand(); n > 0 {
		fmt.Fprintf(out, "\nnote: %d attested documents were signed during measurement (pool too small)\n", n)
	}
	return nil
}

// expectEvidence checks that the staged pointer at path carries links
// key-set links and a log bundle: the trust case measured what it says.
func expectEvidence(path string, links int) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	p, err := hotfix.ParsePointer(data)
	if err != nil {
		return err
	}
	if len(p.KeySets) != links || p.Log == nil {
		return fmt.Errorf("release trust: the staged pointer carries %d key-set links and %d log bytes, want %d and a bundle", len(p.KeySets), len(p.Log), links)
	}
	return nil
}

// pair is check-hotfix measured against the floor, interleaved.
type pair struct {
	agent, floor, ratio, inProcess stats.Summary
}

// paired runs the agent and the floor alternately (which goes first
// alternates too), checking the agent's outcome, and summarises the
// measured wall times in ms. The pointer file is removed before each agent
// run, so every run stages from scratch.
func paired(ctx context.Context, o options, agentArgv []string, outcome string, floorArgv []string, pointer string) (pair, error) {
	var agentTimes, floorTimes, ratios, inProcess []float64
	for i := -o.warmup; i < o.n; i++ {
		var a, f rig.Result
		runAgent := func() (err error) {
			os.Remove(pointer)
			if a, err = rig.Run(ctx, agentArgv); err == nil {
				err = expect(a, outcome)
			}
			return err
		}
		runFloor := func() (err error) {
			if f, err = rig.Run(ctx, floorArgv); err == nil && f.Exit != 0 {
				err = fmt.Errorf("floor exited %d: %s", f.Exit, f.Output)
			}
			return err
		}
		first, second := runAgent, runFloor
		if i%2 != 0 {
			first, second = runFloor, runAgent
		}
		if err := first(); err != nil {
			return pair{}, err
		}
		if err := second(); err != nil {
			return pair{}, err
		}
		if i < 0 {
			continue
		}
		agentTimes = append(agentTimes, ms(a.Wall))
		floorTimes = append(floorTimes, ms(f.Wall))
		ratios = append(ratios, float64(a.Wall)/float64(f.Wall))
		if m := durationRe.FindSubmatch(a.Output); m != nil {
			var d float64
			fmt.Sscan(string(m[1]), &d)
			inProcess = append(inProcess, d)
		}
	}
	return pair{agent: stats.Of(agentTimes), floor: stats.Of(floorTimes), ratio: stats.Of(ratios), inProcess: stats.Of(inProcess)}, nil
}

// timeN runs argv warmup+n times and summarises the measured wall times,
// and the in-process durations check-hotfix logs, in ms. If outcome is
// set, every run's log must report it.
func timeN(ctx context.Context, n, warmup int, argv, env []string, outcome string, node *harness.Node) (wall, inProcess stats.Summary, err error) {
	var xs, ys []float64
	for i := -warmup; i < n; i++ {
		res, err := rig.Run(ctx, argv, env...)
		if err != nil {
			return wall, inProcess, err
		}
		if outcome != "" {
			if err := expect(res, outcome); err != nil {
				return wall, inProcess, err
			}
		}
		if i < 0 {
			continue
		}
		xs = append(xs, ms(res.Wall))
		if node != nil {
			if d, ok := lastEventDuration(node); ok {
				ys = append(ys, d)
			}
		}
	}
	return stats.Of(xs), stats.Of(ys), nil
}

// lastEventDuration returns the duration in the node's newest check-hotfix
// event.
func lastEventDuration(n *harness.Node) (float64, bool) {
	evs, err := n.Events()
	if err != nil {
		return 0, false
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if !strings.HasSuffix(evs[i].Task, "CheckHotfix") {
			continue
		}
		if m := eventDurationRe.FindStringSubmatch(evs[i].Message); m != nil {
			var d float64
			fmt.Sscan(m[1], &d)
			return d, true
		}
	}
	return 0, false
}

// expect checks that check-hotfix logged outcome (and exited 0, as it
// always must).
func expect(res rig.Result, outcome string) error {
	if res.Exit != 0 || !bytes.Contains(res.Output, []byte("check-hotfix outcome="+outcome)) {
		return fmt.Errorf("check-hotfix did not end with outcome %s (exit %d):\n%s", outcome, res.Exit, res.Output)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
