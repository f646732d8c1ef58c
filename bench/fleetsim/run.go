package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"nodehotfix/bench/internal/fleet"
	"nodehotfix/bench/internal/mint"
)

// scenarios maps a name to the events of a run, at fractions of the bursts
// (so of the arrival window).
var scenarios = map[string]func(c *fleet.Config){
	"baseline": func(*fleet.Config) {},
	"failures": func(c *fleet.Config) {
		c.StopMemberAt, c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.2), frac(c, 0.3), frac(c, 0.6)
	},
	"change": func(c *fleet.Config) { c.ChangeAt = frac(c, 0.5) },
	"combined": func(c *fleet.Config) {
		c.StopMemberAt, c.KillReplicaAt, c.RestartReplicaAt, c.ChangeAt = frac(c, 0.2), frac(c, 0.3), frac(c, 0.5), frac(c, 0.7)
	},
	// The closed loop, with replica 0 killed and restarted while nodes
	// report: a regressing release and a healthy one.
	"loop-bad": func(c *fleet.Config) {
		c.Loop.FailRate = c.Loop.ControlFailRate + 0.28
		// Killed early, so that it is down while the canary's reports
		// come in and the halt is decided.
		c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.05), frac(c, 0.4)
	},
	// 30 % of the nodes served the release refuse it as signed (its key
	// is not in their image): an unusable release, halted on its canary.
	"loop-refuse": func(c *fleet.Config) {
		c.Loop.FailRate, c.Loop.RefuseRate = c.Loop.ControlFailRate, 0.3
		c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.05), frac(c, 0.4)
	},
	// The base already has a complete hotfix that every other node runs:
	// a healthy second one advances against it (no node runs the baked
	// agent by choice, so there is no control cohort), a bad one halts.
	"loop-second": func(c *fleet.Config) {
		c.Loop.FailRate, c.Loop.Second = c.Loop.ControlFailRate, true
		c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.3), frac(c, 0.6)
	},
	"loop-second-bad": func(c *fleet.Config) {
		c.Loop.FailRate, c.Loop.Second = c.Loop.ControlFailRate+0.28, true
		c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.05), frac(c, 0.4)
	},
	// 30 % of the nodes served the release hang in it: a started report,
	// then nothing. Its canary holds while they are pending and halts for
	// silent once the plan's silent-after (1 minute, the least a plan
	// takes) has passed; the run waits for that.
	"loop-hang": func(c *fleet.Config) {
		c.Loop.FailRate, c.Loop.HangRate = c.Loop.ControlFailRate, 0.3
		c.Loop.Plan.SilentAfter = time.Minute
		c.Loop.Linger = 2*time.Minute + c.Arrival
		c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.05), frac(c, 0.4)
	},
	"loop-healthy": func(c *fleet.Config) {
		c.Loop.FailRate = c.Loop.ControlFailRate
		c.KillReplicaAt, c.RestartReplicaAt = frac(c, 0.3), frac(c, 0.6)
	},
}

// frac returns the burst at fraction f of the run, at least 1 (burst 0
// means no event).
func frac(c *fleet.Config, f float64) int { return max(1, int(f*float64(c.Bursts))) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c fleet.Config
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Nodes, "nodes", 20000, "simulated nodes, one attested document (vmId) each")
	fs.IntVar(&c.Bursts, "bursts", 10, "bursts the nodes arrive in, evenly spread over -arrival (events happen at bursts, so use at least 10)")
	fs.BoolVar(&c.Paced, "paced", false, "hold each burst until the previous one has finished (bounds calls in flight; for slow machines)")
	fs.DurationVar(&c.Arrival, "arrival", 10*time.Second, "window the bursts are spread over")
	fs.IntVar(&c.Replicas, "replicas", 3, "lpsd replicas")
	fs.IntVar(&c.Members, "members", 3, "etcd members")
	fs.IntVar(&c.MaxConnections, "max-connections", 0, "each replica's cap on open node connections, as lpsd --max-connections (0: lpsd's default, 4096)")
	fs.IntVar(&c.MaxHandshakes, "max-handshakes", 0, "each replica's cap on concurrent TLS handshakes, as lpsd --max-handshakes (0: lpsd's 128 per CPU times a replica's share of this machine, see fleet.ReplicaHandshakes)")
	leaf := fs.String("leaf", "ecdsa", "document signing key: rsa (as Azure; slower to mint) or ecdsa")
	fs.IntVar(&c.Percent, "percent", 30, "starting rollout percentage of "+fleet.RollingVer)
	fs.IntVar(&c.ChangeTo, "change-to", 60, "percentage the change scenario raises it to")
	fs.DurationVar(&c.NodeTimeout, "node-timeout", 3*time.Second, "each node's deadline for its call (check-hotfix: 3s)")
	fs.StringVar(&c.Seed, "seed", "fleetsim", "seed of the vmIds")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole simulation (all scenarios) to this `file`")
	loop := fleet.Loop{}
	fs.Float64Var(&loop.ControlFailRate, "control-fail-rate", 0.02, "closed loop: the share of control nodes (baked agent) that fail; loop-bad's release fails 28 points more, loop-healthy's as often")
	fs.DurationVar(&loop.AutopilotInterval, "autopilot-interval", time.Second, "closed loop: each replica's autopilot interval")
	fs.DurationVar(&loop.ReportDelay, "report-delay", time.Second, "closed loop: how long after its answer a node reports (its provisioning)")
	fs.IntVar(&loop.ResendEvery, "resend-every", 10, "closed loop: every n-th node reports twice through another replica, alternately the same boot and a reboot (0: never)")
	scenario := fs.String("scenario", "all", "baseline, failures, change, combined, loop-bad, loop-refuse, loop-hang, loop-second, loop-second-bad, loop-healthy, loop (the six loops), or all (the first three), each on a fresh cluster")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.Leaf = mint.Leaf(*leaf)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "fleetsim:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "fleetsim:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	names := []string{*scenario}
	switch *scenario {
	case "all":
		names = []string{"baseline", "failures", "change"}
	case "loop":
		names = []string{"loop-bad", "loop-refuse", "loop-hang", "loop-second", "loop-second-bad", "loop-healthy"}
	}
	code := 0
	for _, name := range names {
		set, ok := scenarios[name]
		if !ok {
			fmt.Fprintf(stderr, "fleetsim: unknown scenario %q\n", name)
			return 2
		}
		cfg := c
		if strings.HasPrefix(name, "loop-") {
			l := loop
			l.Plan = fleet.LoopPlan(cfg.Arrival, cfg.Nodes)
			cfg.Loop = &l
		}
		set(&cfg)
		cfg.Progress = stdout
		fmt.Fprintf(stdout, "\n=== scenario %s\n", name)
		dir, err := os.MkdirTemp("", "fleetsim-")
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		rep, err := fleet.Run(ctx, dir, cfg)
		os.RemoveAll(dir)
		if err != nil {
			fmt.Fprintln(stderr, "fleetsim:", err)
			return 1
		}
		rep.Print(stdout)
		if v := verdict(rep, name); len(v) > 0 {
			fmt.Fprintf(stdout, "INVARIANTS VIOLATED: %s\n", strings.Join(v, "; "))
			code = 1
		} else {
			held := "no wrong answers; replica-down failures only on the killed replica"
			if rep.Sampled() {
				held += "; rollout fractions within tolerance"
			}
			if rep.Convergence != nil {
				held += "; the change reached every replica within 1s"
			}
			if rep.Loop != nil {
				held += "; report counts exact"
				if rep.Loop.Halt != nil {
					held += "; halted on the canary, every replica up had the halt within 1s"
				} else {
					held += "; never halted"
				}
			}
			fmt.Fprintf(stdout, "invariants hold: %s\n", held)
		}
	}
	return code
}

// verdict lists the violated invariants. Failures with the node's replica
// up (overload past the node deadline) are reported by Print, not here:
// they measure the machine, not correctness; and with many of them the
// answered nodes are no fair sample, so fractions are not checked.
func verdict(r *fleet.Report, scenario string) []string {
	var v []string
	if n := r.Counts()[fleet.Wrong]; n > 0 {
		v = append(v, fmt.Sprintf("%d wrong answers", n))
	}
	for _, n := range r.Nodes {
		if n.Outcome == fleet.FailedReplicaDown && n.Replica != 0 {
			v = append(v, fmt.Sprintf("replica %d reported down", n.Replica))
			break
		}
	}
	for _, f := range r.Fractions() {
		if r.Sampled() && !f.Within() {
			v = append(v, fmt.Sprintf("%s at %d%% served %.2f%% (±%.2f%%)", f.Version, f.Configured, f.Observed(), f.Tolerance()))
		}
	}
	if cv := r.Convergence; cv != nil && (!cv.Converged || cv.Max > time.Second) {
		v = append(v, fmt.Sprintf("change took %s to reach every replica", cv.Max))
	}
	if l := r.Loop; l != nil {
		if !l.CountsExact() {
			v = append(v, fmt.Sprintf("report counts not exact (%d acked but lost, %d unknown, release %+v want %+v, control %+v want %+v)",
				l.Lost, l.Unknown, l.Tally.Release, l.Want.Release, l.Tally.Control, l.Want.Control))
		}
		if l.Unseated > 0 {
			v = append(v, fmt.Sprintf("%d nodes served %s as canary seat holders hold no seat", l.Unseated, fleet.LoopVer))
		}
		if l.Refused > 0 {
			v = append(v, fmt.Sprintf("%d reports refused", l.Refused))
		}
		switch err := l.HaltedOnCanary(r.Config.Loop.Plan); {
		case (scenario == "loop-bad" || scenario == "loop-second-bad") && err != nil:
			v = append(v, "the regressing release: "+err.Error())
		case (scenario == "loop-bad" || scenario == "loop-second-bad") && l.Halt.Reason != "regression":
			v = append(v, "the regressing release was halted for "+l.Halt.Reason)
		case scenario == "loop-refuse" && err != nil:
			v = append(v, "the refused release: "+err.Error())
		case scenario == "loop-refuse" && l.Halt.Reason != "refusedIntegrity":
			v = append(v, "the refused release was halted for "+l.Halt.Reason)
		case scenario == "loop-hang" && err != nil:
			v = append(v, "the hanging release: "+err.Error())
		case scenario == "loop-hang" && l.Halt.Reason != "silent":
			v = append(v, "the hanging release was halted for "+l.Halt.Reason)
		case (scenario == "loop-healthy" || scenario == "loop-second") && l.Halt != nil:
			v = append(v, fmt.Sprintf("the healthy release was halted at %d%%", l.Halt.Percent))
		case (scenario == "loop-healthy" || scenario == "loop-second") && len(l.Advances) == 0:
			v = append(v, "the healthy release never advanced")
		}
		if m, ok := l.HaltReached(); l.Halt != nil && (m > time.Second || !ok) {
			v = append(v, fmt.Sprintf("the halt took %s to reach the replicas that were up, %d never had it (%v)", m, l.HaltMissed, l.HaltReach))
		}
		if l.Acked < r.Config.Nodes/2 {
			v = append(v, fmt.Sprintf("only %d of %d nodes' reports acked", l.Acked, r.Config.Nodes))
		}
	}
	return v
}
