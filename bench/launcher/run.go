package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"nodehotfix/bench/internal/rig"
	"nodehotfix/bench/internal/stats"
	"nodehotfix/test/harness"
)

// nodePATH is a node's PATH; the launcher runs with it rather than the
// benchmark's, whose extra directories cost each exec a few failed lookups.
const nodePATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

type options struct {
	n, warmup int
	keep      bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("launcher", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 30, "measured iterations per case")
	fs.IntVar(&o.warmup, "warmup", 3, "unmeasured iterations first")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return rig.Session(ctx, "launcher", o.keep, stdout, stderr, func(ctx context.Context, dir string) error {
		return bench(ctx, o, dir, stdout)
	})
}

// otherFlags is how many features besides the hotfix flag the realistic
// "flag false" node's file carries.
const otherFlags = 20

var manyName = fmt.Sprintf("launcher, flag false, %d other flags", otherFlags)

// a case is one way of provisioning a node root, timed as a process.
type tcase struct {
	name  string
	argv  []string
	env   []string
	check func(rig.Result) error
	times []float64
}

func bench(ctx context.Context, o options, dir string, out io.Writer) error {
	r, err := rig.New(ctx, dir, 3*(o.n+o.warmup)+8)
	if err != nil {
		return err
	}
	floor, err := r.Build("./bench/floor/checkfloor")
	if err != nil {
		return err
	}
	repo, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	launcher := filepath.Join(repo, "deploy/node/aks-node-controller-launcher.sh")
	// The service knows no release, so a node with the flag on has nothing
	// to do: check-hotfix writes no pointer and download-hotfix is skipped.
	empty, err := r.StartLPS()
	if err != nil {
		return err
	}
	// A fleet's file carries other features too; each costs the launcher
	// a parsed, checked and exported line.
	many := map[string]string{"ENABLE_PROVISIONING_HOTFIX": "false"}
	for i := range otherFlags {
		many[fmt.Sprintf("FEATURE_%02d", i)] = "true"
	}
	nodes := map[string]*harness.Node{}
	for name, feats := range map[string]map[string]string{
		"absent": nil,
		"off":    {"ENABLE_PROVISIONING_HOTFIX": "false"},
		"on":     {"ENABLE_PROVISIONING_HOTFIX": "true"},
		"many":   many,
	} {
		if nodes[name], err = r.NewNode("node-"+name, feats); err != nil {
			return err
		}
	}
	direct := func(n *harness.Node) []string {
		c := n.Path("opt/azure/containers")
		return []string{n.Path("opt/azure/containers/aks-node-controller"), "provision",
			"--provision-config=" + filepath.Join(c, "aks-node-controller-config.json"),
			"--nbc-cmd=" + filepath.Join(c, "aks-node-controller-nbc-cmd.sh"),
			"--root", n.Root}
	}
	launch := func(n *harness.Node, extra ...string) ([]string, []string) {
		env := []string{"PATH=" + nodePATH, "NODE_ROOT=" + n.Root, "HOSTNAME_WAIT_SECONDS=5", "IMDS_URL=" + r.IMDS.URL, "LPS_ADDR=" + empty}
		return []string{"/bin/bash", launcher}, append(env, extra...)
	}
	provisioned := func(res rig.Result) error {
		if res.Exit != 0 || !bytes.Contains(res.Output, []byte("provisioned by aks-node-controller "+rig.BakedVersion)) {
			return fmt.Errorf("exit %d, baked agent did not provision:\n%s", res.Exit, res.Output)
		}
		return nil
	}
	baked := func(extra ...string) func(rig.Result) error {
		return func(res rig.Result) error {
			if err := provisioned(res); err != nil {
				return err
			}
			for _, s := range append([]string{"Using VHD-baked binary"}, extra...) {
				if !bytes.Contains(res.Output, []byte(s)) {
					return fmt.Errorf("launcher output lacks %q:\n%s", s, res.Output)
				}
			}
			return nil
		}
	}
	onArgv, onEnv := launch(nodes["on"])
	absArgv, absEnv := launch(nodes["absent"])
	offArgv, offEnv := launch(nodes["off"])
	manyArgv, manyEnv := launch(nodes["many"])
	cases := []*tcase{
		{name: "provision directly", argv: direct(nodes["absent"]), env: []string{"PATH=" + nodePATH}, check: provisioned},
		{name: "launcher, flag absent", argv: absArgv, env: absEnv, check: baked()},
		{name: "launcher, flag false", argv: offArgv, env: offEnv, check: baked()},
		{name: manyName, argv: manyArgv, env: manyEnv, check: baked(fmt.Sprintf("Accepted %d feature flag(s)", otherFlags+1))},
		{name: "launcher, flag on, nothing to do", argv: onArgv, env: onEnv, check: baked("check-hotfix outcome=noHotfixAvailable")},
		{name: "check-hotfix alone (NotFound)", argv: []string{r.Agent, "check-hotfix", "--root", nodes["on"].Root, "--imds-url", r.IMDS.URL, "--lps-addr", empty},
			check: func(res rig.Result) error {
				if !bytes.Contains(res.Output, []byte("check-hotfix outcome=noHotfixAvailable")) {
					return fmt.Errorf("check-hotfix: %s", res.Output)
				}
				return nil
			}},
		{name: "floor (checkfloor, NotFound)", argv: []string{floor, "-imds-url", r.IMDS.URL, "-lps-addr", empty, "-ca", r.TLS.CAFile},
			check: func(res rig.Result) error {
				if res.Exit != 0 {
					return fmt.Errorf("floor exited %d: %s", res.Exit, res.Output)
				}
				return nil
			}},
		{name: "bare bash start (bash -c :)", argv: []string{"/bin/bash", "-c", ":"}, env: []string{"PATH=" + nodePATH},
			check: func(res rig.Result) error {
				if res.Exit != 0 {
					return fmt.Errorf("bash -c : exited %d", res.Exit)
				}
				return nil
			}},
	}
	// Round-robin over the cases, so drift in the machine's load hits all
	// of them alike.
	for i := -o.warmup; i < o.n; i++ {
		for _, c := range cases {
			res, err := rig.Run(ctx, c.argv, c.env...)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if err := c.check(res); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if i >= 0 {
				c.times = append(c.times, float64(res.Wall)/float64(time.Millisecond))
			}
		}
	}
	sum := map[string]stats.Summary{}
	fmt.Fprintf(out, "launcher added time over `provision` directly, whole processes; %d round-robin iterations after %d warm-up\n\n", o.n, o.warmup)
	for _, c := range cases {
		sum[c.name] = stats.Of(c.times)
		fmt.Fprintf(out, "%-40s %s\n", c.name, sum[c.name].String("ms"))
	}
	base := sum["provision directly"].Median
	floorMed := sum["floor (checkfloor, NotFound)"].Median
	bash := sum["bare bash start (bash -c :)"].Median
	verdict := func(added, limit float64) string {
		if added <= limit {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintln(out)
	for _, c := range []string{"launcher, flag absent", "launcher, flag false"} {
		added := sum[c].Median - base
		fmt.Fprintf(out, "added, %-24s %+.1fms (target <= bash start %.1fms + 1ms = %.1fms: %s)\n", strings.TrimPrefix(c, "launcher, ")+":", added, bash, bash+1, verdict(added, bash+1))
	}
	fmt.Fprintf(out, "  with %d other flags:         %+.1fms\n", otherFlags, sum[manyName].Median-base)
	on := sum["launcher, flag on, nothing to do"].Median - base
	fmt.Fprintf(out, "added, flag on, nothing to do: %+.1fms (target <= floor %.1fms + 5ms = %.1fms: %s)\n", on, floorMed, floorMed+5, verdict(on, floorMed+5))
	return nil
}
