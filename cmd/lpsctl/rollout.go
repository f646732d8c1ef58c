package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
)

// change is the flags of a command that changes a release's rollout.
type change struct {
	service
	ifRevision int64
}

func (c *change) register(cmd *cobra.Command) {
	newInt(cmd.Flags(), &c.ifRevision, "if-revision", 0, 0, math.MaxInt64, "apply only if the release is still at this `revision` (from status; 0: whatever it is)")
	c.service.registerChange(cmd)
}

func newRolloutSetCmd(e *env) *cobra.Command {
	var c change
	var percent int64
	var subscriptions, regions, deployEnvs listFlag
	cmd := &cobra.Command{
		Use:   "set VERSION [--percent N] [--subscriptions ID,...] [--regions R,...] [--deploy-envs E,...]",
		Short: "grow a rollout's percentage and set its scope",
		Long: `set grows the percentage of in-scope nodes a release is served to (it can
never shrink: halt or revoke instead) and, when given, replaces its
subscription, region or deploy-environment scope; an empty list
(--subscriptions "") means all. A draft starts rolling. The scope of a
paused or complete release can change without stopping it. VERSION may name
a component configuration, <component>@<version> (localDNS@3), whose
rollout works the same way.`,
		Example: `  lpsctl rollout set 202604.01.3 --percent 10
  lpsctl rollout set 202604.01.3 --percent 25 --regions eastus,westeurope
  lpsctl rollout set 202604.01.3 --subscriptions ""
  lpsctl rollout set localDNS@3 --percent 10 --deploy-envs staging`,
		Args: positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("percent") && !subscriptions.set && !regions.set && !deployEnvs.set {
				return usagef("nothing to change: give --percent, --subscriptions, --regions or --deploy-envs")
			}
			req := &adminv1.SetRolloutRequest{
				Version:          args[0],
				Percent:          int32(percent),
				Subscriptions:    subscriptions.vals,
				SetSubscriptions: subscriptions.set,
				Regions:          regions.vals,
				SetRegions:       regions.set,
				IfRevision:       c.ifRevision,
				KeepPercent:      !cmd.Flags().Changed("percent"),
				Reason:           c.reason,
				DeployEnvs:       deployEnvs.vals,
				SetDeployEnvs:    deployEnvs.set,
			}
			var resp *adminv1.SetRolloutResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.SetRollout(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			if cc := resp.GetComponentConfig(); cc != nil {
				return printConfig(e.stdout, &c.out, cc, unchangedConfigAs(resp.GetUnchanged(), cc))
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), unchangedAs(resp.GetUnchanged(), resp.GetRelease()))
		},
	}
	fs := cmd.Flags()
	newInt(fs, &percent, "percent", 0, 0, 100, "percent `N` (0..100) of in-scope nodes to serve; it can only grow (unset: keep)")
	fs.Var(&subscriptions, "subscriptions", "comma-separated subscription `IDs` (GUIDs) in scope; \"\" for all (unset: keep)")
	fs.Var(&regions, "regions", "comma-separated lpsd region `labels` in scope; \"\" for all (unset: keep)")
	fs.Var(&deployEnvs, "deploy-envs", "comma-separated lpsd deploy-environment `labels` (lpsd --deploy-env) in scope; \"\" for all (unset: keep)")
	fs.SetNormalizeFunc(aliases(map[string]string{"subscription": "subscriptions", "region": "regions", "deploy-env": "deploy-envs"}))
	c.register(cmd)
	return cmd
}

// transitionNames are the rollout transition commands, in help order.
var transitionNames = []string{"pause", "resume", "halt", "complete"}

// transitions maps each rollout transition command to its action, the
// state it moves a release to, and its summary.
var transitions = map[string]struct {
	action adminv1.Action
	to     rollout.State
	short  string
}{
	"pause":    {adminv1.Action_ACTION_PAUSE, rollout.Paused, "stop growing a rollout; keep serving its nodes"},
	"resume":   {adminv1.Action_ACTION_RESUME, rollout.Rolling, "set a paused or halted rollout rolling again"},
	"halt":     {adminv1.Action_ACTION_HALT, rollout.Halted, "stop serving a release (nodes keep staged copies until revoked)"},
	"complete": {adminv1.Action_ACTION_COMPLETE, rollout.Complete, "serve a release to every node in scope"},
}

// newTransitionCmd returns the command "rollout <name>".
func newTransitionCmd(e *env, name string) *cobra.Command {
	var c change
	t := transitions[name]
	cmd := &cobra.Command{
		Use:     name + " VERSION",
		Short:   t.short,
		Example: fmt.Sprintf("  lpsctl rollout %s 202604.01.3", name),
		Args:    positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *adminv1.TransitionResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.Transition(ctx, &adminv1.TransitionRequest{Version: args[0], Action: t.action, IfRevision: c.ifRevision, Reason: c.reason})
				return err
			})
			if err != nil {
				return err
			}
			if cc := resp.GetComponentConfig(); cc != nil {
				return printConfig(e.stdout, &c.out, cc, unchangedConfigAs(resp.GetUnchanged(), cc))
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), unchangedAs(resp.GetUnchanged(), resp.GetRelease()))
		},
	}
	c.register(cmd)
	// Offer only the releases the state machine lets this command move.
	cmd.ValidArgsFunction = completeVersions(&c.conn, func(r *adminv1.Release) bool {
		return !r.GetRevoked() && slices.Contains(rollout.State(r.GetRollout().GetState()).Next(), t.to)
	})
	return cmd
}

func newRolloutPlanCmd(e *env) *cobra.Command {
	var c change
	var steps string
	var margin, ceiling float64
	var silentAfter time.Duration
	cmd := &cobra.Command{
		Use:   "plan VERSION --steps SIZE:BAKE:REPORTS,... [--margin M] [--max-failure F] [--silent-after D] | plan COMPONENT@VERSION --steps PERCENT:BAKE,...",
		Short: "put a release on steps lpsd advances while healthy and halts on a regression",
		Long: `plan puts a draft or rolling release on steps that lpsd advances by itself
once a step's bake time has passed and the release has the step's reports,
and halts by itself when the health rule finds a regression (see the
manual). A step's SIZE is a percentage of in-scope nodes (10) or a canary of
a number of nodes (20n): the first nodes in scope to ask, who stay served
through the later steps. Canary steps come first.

A component configuration (localDNS@3) takes a timed plan instead: steps of
PERCENT:BAKE that lpsd advances once each bake has passed, and completes
after the last. Nothing reports on a component, so nothing judges it:
pause, halt or revoke it yourself.`,
		Example: `  lpsctl rollout plan 202604.01.3 --steps 20n:30m:20,10:1h:100,100:2h:500
  lpsctl rollout plan 202604.01.3 --steps 5:1d:50,100:2d:500 --margin 0.02
  lpsctl rollout plan localDNS@3 --steps 10:1h,50:2h,100:0`,
		Args: positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := required(cmd, "steps"); err != nil {
				return err
			}
			_, _, isConfig := rollout.ParseConfigID(args[0])
			var plan *adminv1.Plan
			var err error
			if isConfig {
				for _, f := range []string{"margin", "max-failure", "silent-after"} {
					if cmd.Flags().Changed(f) {
						return usagef("--%s: %s is a component configuration, whose plan is timed: nothing judges it", f, args[0])
					}
				}
				plan, err = parseTimedSteps(steps)
			} else if plan, err = parseSteps(steps); err == nil {
				plan.Margin, plan.MaxFailureRate, plan.SilentAfterSeconds = margin, ceiling, int64(silentAfter/time.Second)
			}
			if err != nil {
				return usagef("--steps %q: %v", steps, err)
			}
			var resp *adminv1.SetPlanResponse
			err = c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.SetPlan(ctx, &adminv1.SetPlanRequest{Version: args[0], Plan: plan, IfRevision: c.ifRevision, Reason: c.reason})
				return err
			})
			if err != nil {
				return err
			}
			if cc := resp.GetComponentConfig(); cc != nil {
				return printConfig(e.stdout, &c.out, cc, "")
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), "")
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&steps, "steps", "", "the steps, `SIZE:BAKE:REPORTS,...`: a percentage (10) or a canary of nodes (20n), least time at the step (30m, 1d), reports needed by its end")
	fs.Float64Var(&margin, "margin", 0.05, "how much the failure rate may exceed the control cohort's, as a fraction (0.05: five points)")
	fs.Float64Var(&ceiling, "max-failure", 0.2, "absolute failure-rate ceiling, a fraction in (0, 1]")
	newDuration(fs, &silentAfter, "silent-after", rollout.DefaultSilentAfter, "how long a canary node has to report before it counts as failed (hung or dead), 1m to 24h")
	c.register(cmd)
	return cmd
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
		bake, err := duration.Parse(f[1])
		if err != nil {
			return nil, fmt.Errorf("step %d: bake %q: %v", i+1, f[1], err)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, fmt.Errorf("step %d: reports %q: want a number of reports, 1 to 1000000", i+1, f[2])
		}
		plan.Steps = append(plan.Steps, &adminv1.PlanStep{Percent: int32(pct), Nodes: int32(nodes), BakeSeconds: int64(bake / time.Second), MinReports: int32(n)})
	}
	return plan, nil
}
