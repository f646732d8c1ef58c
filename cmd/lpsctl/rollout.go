package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/rollout"
)

type rolloutOpts struct {
	percent       int
	percentSet    bool
	subscriptions listFlag
	regions       listFlag
	ifRevision    int64
}

func runRolloutSet(ctx context.Context, args []string, e *env) error {
	var c connFlags
	var o rolloutOpts
	fs := newFlagSet("rollout set", "VERSION --percent N [--subscriptions a,b] [--regions r] [connection flags]", e)
	fs.Func("percent", "percent `N` (0..100) of in-scope nodes to serve; it can only grow", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 100 {
			return errors.New("want an integer from 0 to 100")
		}
		o.percent, o.percentSet = n, true
		return nil
	})
	fs.Var(&o.subscriptions, "subscriptions", "comma-separated subscription `IDs` in scope (\"\" for all; default: keep)")
	fs.Var(&o.regions, "regions", "comma-separated lpsd region `labels` in scope (\"\" for all; default: keep)")
	fs.Int64Var(&o.ifRevision, "if-revision", 0, "apply only if the release is at this `revision` (from status; 0: current)")
	c.register(fs)
	pos, err := parse(fs, args, "VERSION")
	if err != nil {
		return err
	}
	if !o.percentSet {
		return usagef("--percent is required")
	}
	req := &adminv1.SetRolloutRequest{
		Version:          pos[0],
		Percent:          int32(o.percent),
		Subscriptions:    o.subscriptions.vals,
		SetSubscriptions: o.subscriptions.set,
		Regions:          o.regions.vals,
		SetRegions:       o.regions.set,
		IfRevision:       o.ifRevision,
	}
	var resp *adminv1.SetRolloutResponse
	err = c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		resp, err = cl.SetRollout(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	return printRelease(e.stdout, c.json, resp.GetRelease())
}

// transitions maps each rollout transition command to its action.
var transitions = map[string]adminv1.Action{
	"pause":    adminv1.Action_ACTION_PAUSE,
	"resume":   adminv1.Action_ACTION_RESUME,
	"halt":     adminv1.Action_ACTION_HALT,
	"complete": adminv1.Action_ACTION_COMPLETE,
}

// transitionCmd returns the command for "rollout <name>".
func transitionCmd(name string) func(context.Context, []string, *env) error {
	return func(ctx context.Context, args []string, e *env) error {
		var c connFlags
		var ifRevision int64
		fs := newFlagSet("rollout "+name, "VERSION [connection flags]", e)
		fs.Int64Var(&ifRevision, "if-revision", 0, "apply only if the release is at this `revision` (from status; 0: current)")
		c.register(fs)
		pos, err := parse(fs, args, "VERSION")
		if err != nil {
			return err
		}
		var resp *adminv1.TransitionResponse
		err = c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
			resp, err = cl.Transition(ctx, &adminv1.TransitionRequest{Version: pos[0], Action: transitions[name], IfRevision: ifRevision})
			return err
		})
		if err != nil {
			return err
		}
		if resp.GetUnchanged() && !c.json {
			fmt.Fprintf(e.stdout, "%s is already %s; nothing changed\n", quote.Text(resp.GetRelease().GetVersion()), quote.Text(resp.GetRelease().GetRollout().GetState()))
		}
		return printRelease(e.stdout, c.json, resp.GetRelease())
	}
}

func runRolloutPlan(ctx context.Context, args []string, e *env) error {
	var c connFlags
	var steps string
	var margin, ceiling float64
	var silentAfter time.Duration
	var ifRevision int64
	fs := newFlagSet("rollout plan", "VERSION --steps SIZE:BAKE:REPORTS,... [--margin M] [--max-failure F] [connection flags]", e)
	fs.StringVar(&steps, "steps", "", "the steps, `SIZE:BAKE:REPORTS,...`: a percentage (10) or a canary of a number of nodes (20n), least time at the step, reports the release needs by its end (e.g. 20n:30m:20,10:1h:100,100:2h:500); canary steps come first")
	fs.Float64Var(&margin, "margin", 0.05, "how much higher than the control cohort's the failure rate may be, as a fraction (0.05: five points)")
	fs.Float64Var(&ceiling, "max-failure", 0.2, "absolute failure-rate ceiling, a fraction in (0, 1]")
	fs.DurationVar(&silentAfter, "silent-after", rollout.DefaultSilentAfter, "how long a canary node has to report before it counts as failed (hung or dead), 1m to 24h")
	fs.Int64Var(&ifRevision, "if-revision", 0, "apply only if the release is at this `revision` (from status; 0: current)")
	c.register(fs)
	pos, err := parse(fs, args, "VERSION")
	if err != nil {
		return err
	}
	plan, err := parseSteps(steps)
	if err != nil {
		return usagef("--steps: %v", err)
	}
	plan.Margin, plan.MaxFailureRate, plan.SilentAfterSeconds = margin, ceiling, int64(silentAfter/time.Second)
	var resp *adminv1.SetPlanResponse
	err = c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		resp, err = cl.SetPlan(ctx, &adminv1.SetPlanRequest{Version: pos[0], Plan: plan, IfRevision: ifRevision})
		return err
	})
	if err != nil {
		return err
	}
	return printRelease(e.stdout, c.json, resp.GetRelease())
}

// parseSteps reads "SIZE:BAKE:REPORTS,...", where SIZE is a percentage or
// a number of nodes with an "n".
func parseSteps(s string) (*adminv1.Plan, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required, e.g. 20n:30m:20,10:1h:100,100:2h:500")
	}
	plan := &adminv1.Plan{}
	for i, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("step %d %q: want SIZE:BAKE:REPORTS, SIZE a percentage (10) or a number of nodes (20n)", i+1, part)
		}
		var pct, nodes int
		var err error
		if n, ok := strings.CutSuffix(f[0], "n"); ok {
			nodes, err = strconv.Atoi(n)
		} else {
			pct, err = strconv.Atoi(strings.TrimSuffix(f[0], "%"))
		}
		if err != nil || pct < 0 || pct > 100 || nodes < 0 || nodes > rollout.MaxCanaryNodes {
			return nil, fmt.Errorf("step %d: size %q: want a percentage (10) or a number of nodes (20n, at most %d)", i+1, f[0], rollout.MaxCanaryNodes)
		}
		bake, err := time.ParseDuration(f[1])
		if err != nil {
			return nil, fmt.Errorf("step %d: bake %q: %v", i+1, f[1], err)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n > 1_000_000 {
			return nil, fmt.Errorf("step %d: reports %q: want a number of reports, 1 to 1000000", i+1, f[2])
		}
		plan.Steps = append(plan.Steps, &adminv1.PlanStep{Percent: int32(pct), Nodes: int32(nodes), BakeSeconds: int64(bake / time.Second), MinReports: int32(n)})
	}
	return plan, nil
}
