package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
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
	var allowUnseen bool
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
		Example: `  lpsctl rollout set 202604.01.3 --percent 10 --reason "ICM 1234: kubelet flag"
  lpsctl rollout set 202604.01.3 --percent 25 --regions eastus,westeurope --reason "ICM 1234: two regions"
  lpsctl rollout set 202604.01.3 --subscriptions "" --reason "every subscription"
  LPSCTL_REASON="CHG 42" lpsctl rollout set localDNS@3 --percent 10 --deploy-envs staging`,
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
				AllowUnseen:      allowUnseen,
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
				return printConfig(e.stdout, &c.out, cc, unchangedAs(resp.GetUnchanged(), cc))
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), unchangedAs(resp.GetUnchanged(), resp.GetRelease()))
		},
	}
	fs := cmd.Flags()
	newInt(fs, &percent, "percent", 0, 0, 100, "percent `N` (0..100) of in-scope nodes to serve; it can only grow (unset: keep)")
	fs.Var(&subscriptions, "subscriptions", "comma-separated subscription `IDs` (GUIDs) in scope; \"\" for all (unset: keep)")
	fs.Var(&regions, "regions", "comma-separated lpsd region `labels` in scope; \"\" for all (unset: keep)")
	fs.Var(&deployEnvs, "deploy-envs", "comma-separated lpsd deploy-environment `labels` (lpsd --deploy-env) in scope; \"\" for all (unset: keep)")
	fs.BoolVar(&allowUnseen, "allow-unseen", false, "set the scope even with a subscription no node of was seen in the last 24 h, or a region no replica serves (refused otherwise, naming the nearest seen one)")
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
	"resume":   {adminv1.Action_ACTION_RESUME, rollout.Rolling, "set a paused or halted rollout going again (after a halt, on fresh evidence)"},
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
		Example: fmt.Sprintf("  lpsctl rollout %s 202604.01.3 --reason \"ICM 1234\"", name),
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
				return printConfig(e.stdout, &c.out, cc, unchangedAs(resp.GetUnchanged(), cc))
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
	var margin, ceiling, maxSilent, maxDelivery float64
	var silentAfter, deadline time.Duration
	var fromStep int64
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "plan VERSION --steps SIZE:BAKE:REPORTS,... [--from-step N] [--dry-run] [--margin M] [--max-failure F] [--max-silent F] [--max-delivery F] [--silent-after D] [--deadline D] | plan COMPONENT@VERSION --steps PERCENT:BAKE,...",
		Short: "put a release on steps lpsd advances while healthy and halts on a regression",
		Long: `plan puts a draft or rolling release on steps that lpsd advances by itself
once a step's bake time has passed and the release has the step's reports,
and halts by itself when the health rule finds a regression (see the
manual). A step's SIZE is a percentage of in-scope nodes (10) or a canary of
a number of nodes (20n): the first nodes in scope to ask, who stay served
through the later steps. Canary steps come first.

No step is skipped unless you say so. A plan whose first step the release
is already past (a canary once any percentage is served, a percentage
below the release's) is refused, naming the step: --from-step N starts the
plan at step N (counted from 1, as status counts), skipping the steps
before it. A step at the release's own percentage is not past: it bakes
there. --dry-run prints the steps with when each can run at the soonest,
the baseline the release is judged against and its deadlines, as lpsd
would apply the plan, and changes nothing.

A component configuration (localDNS@3) takes a timed plan instead: steps of
PERCENT:BAKE that lpsd advances once each bake has passed, and completes
after the last. Nothing reports on a component, so nothing judges it:
pause, halt or revoke it yourself.`,
		Example: `  lpsctl rollout plan 202604.01.3 --steps 20n:30m:20,10:1h:100,100:2h:500 --dry-run
  lpsctl rollout plan 202604.01.3 --steps 20n:30m:20,10:1h:100,100:2h:500 --reason "ICM 1234"
  lpsctl rollout plan 202604.01.3 --steps 20n:30m:20,10:1h:100,100:2h:500 --from-step 2 --reason "canary run by hand"
  lpsctl rollout plan 202604.01.3 --steps 5:1d:50,100:2d:500 --margin 0.02 --reason "ICM 1234: slow and strict"
  lpsctl rollout plan localDNS@3 --steps 10:1h,50:2h,100:0s --reason "new resolver"`,
		Args: positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := required(cmd, "steps"); err != nil {
				return err
			}
			_, _, isConfig := rollout.ParseConfigID(args[0])
			var plan *adminv1.Plan
			var err error
			if isConfig {
				for _, f := range []string{"margin", "max-failure", "max-silent", "max-delivery", "silent-after", "deadline"} {
					if cmd.Flags().Changed(f) {
						return usagef("--%s: %s is a component configuration, whose plan is timed: nothing judges it", f, args[0])
					}
				}
				plan, err = parseTimedSteps(steps)
			} else if plan, err = parseSteps(steps); err == nil {
				plan.Margin, plan.MaxFailureRate, plan.SilentAfterSeconds = margin, ceiling, int64(silentAfter/time.Second)
				plan.MaxSilentRate, plan.MaxDeliveryRate, plan.DeadlineSeconds = maxSilent, maxDelivery, int64(deadline/time.Second)
			}
			if err != nil {
				return usagef("--steps %q: %v", steps, err)
			}
			if int(fromStep) > len(plan.Steps) {
				return usagef("--from-step %d: --steps has %d steps (1 to %d)", fromStep, len(plan.Steps), len(plan.Steps))
			}
			req := &adminv1.SetPlanRequest{Version: args[0], Plan: plan, IfRevision: c.ifRevision, Reason: c.reason, FromStep: int32(fromStep), DryRun: dryRun}
			var resp *adminv1.SetPlanResponse
			err = c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.SetPlan(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			if cc := resp.GetComponentConfig(); cc != nil {
				if resp.GetDryRun() && !c.out.structured() {
					fmt.Fprintln(e.stdout, "dry run: nothing changed")
				}
				return printConfig(e.stdout, &c.out, cc, "")
			}
			if c.out.structured() {
				doc := toReleaseJSON(resp.GetRelease())
				doc.DryRun, doc.Preview, doc.NeedsApproval = resp.GetDryRun(), toPreviewJSON(resp.GetPreview()), resp.GetNeedsApproval()
				err = c.out.write(e.stdout, doc)
			} else {
				err = printPlan(e.stdout, resp.GetRelease(), resp.GetPreview(), resp.GetDryRun())
				if why := resp.GetNeedsApproval(); why != "" && err == nil {
					_, err = fmt.Fprintf(e.stdout, "applied, this plan would wait for a second operator (lpsd --policy-two-person): %s\n", quote.Text(why))
				}
			}
			if dryRun && !resp.GetDryRun() {
				// An lpsd from before dry runs ignores the field and
				// applies the plan: say so loudly, and how to stop it.
				v := quote.Text(resp.GetRelease().GetVersion())
				return fmt.Errorf("lpsd does not know --dry-run: the plan was APPLIED (revision %d); to stop it, '%s rollout pause %s'; to see it, '%s audit --target %s'",
					resp.GetRelease().GetRevision(), programName, v, programName, v)
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&steps, "steps", "", "the steps, `SIZE:BAKE:REPORTS,...`: a percentage (10) or a canary of nodes (20n), least time at the step (30m, 1d), reports needed by its end")
	newInt(fs, &fromStep, "from-step", 0, 1, 20, "start at step `N` (from 1), skipping the steps before it (unset: step 1; a step the release is past is refused)")
	fs.BoolVar(&dryRun, "dry-run", false, "print the steps, the baseline and the deadlines lpsd would use; change nothing")
	fs.Float64Var(&margin, "margin", rollout.DefaultMargin, "how much the failure rate may exceed its base's incumbent's, as a fraction (0.05: five points)")
	fs.Float64Var(&ceiling, "max-failure", rollout.DefaultMaxFailureRate, "absolute failure-rate ceiling, a fraction in (0, 1]")
	fs.Float64Var(&maxSilent, "max-silent", rollout.DefaultMaxRate, "ceiling of the rate of nodes served the release that never report (silent), a fraction in [0, 1]")
	fs.Float64Var(&maxDelivery, "max-delivery", rollout.DefaultMaxRate, "ceiling of the rate of nodes served the release that could not get it (refusedDelivery), a fraction in [0, 1]")
	newDuration(fs, &silentAfter, "silent-after", rollout.DefaultSilentAfter, "how long a node served the release has to report before it counts as silent (hung or dead), 1m to 24h")
	newDuration(fs, &deadline, "deadline", rollout.DefaultDeadline, "how long past its bake a step may wait for enough evidence before lpsd pauses the release as inconclusive, 1m to 30d")
	c.register(cmd)
	return cmd
}

func newRolloutSkipCmd(e *env) *cobra.Command {
	var c change
	cmd := &cobra.Command{
		Use:   "skip VERSION --reason TEXT",
		Short: "move a planned rollout past its current step to the next",
		Long: `skip ends a rolling release's current plan step now, whatever its bake
time, reports and health say, and starts the next step (at the next step's
size; steps a percentage set by hand is already past are passed over too).
It gives up the step's evidence, so --reason is required; the audit log
records it as "skip". At the plan's last step there is nothing to skip to:
'lpsctl rollout complete' serves every node in scope.`,
		Example: `  lpsctl rollout skip 202604.01.3 --reason "ICM 1234: the canary subscription is drained"
  lpsctl rollout skip 202604.01.3 --reason "..." --if-revision 7`,
		Args: positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *adminv1.SkipStepResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.SkipStep(ctx, &adminv1.SkipStepRequest{Version: args[0], IfRevision: c.ifRevision, Reason: c.reason})
				return err
			})
			if err != nil {
				return err
			}
			if cc := resp.GetComponentConfig(); cc != nil {
				if !c.out.structured() {
					p := cc.GetRollout().GetPlan()
					fmt.Fprintf(e.stdout, "skipped step %s; now at step %s\n", stepText(p, int(resp.GetSkippedStep())), stepText(p, int(p.GetStep())))
				}
				return printConfig(e.stdout, &c.out, cc, "")
			}
			r := resp.GetRelease()
			if c.out.structured() {
				doc := toReleaseJSON(r)
				skipped := resp.GetSkippedStep()
				doc.SkippedStep = &skipped
				return c.out.write(e.stdout, doc)
			}
			p := r.GetRollout().GetPlan()
			fmt.Fprintf(e.stdout, "skipped step %s; now at step %s, due %s\n", stepText(p, int(resp.GetSkippedStep())), stepText(p, int(p.GetStep())), dueText(p))
			return printRelease(e.stdout, &c.out, r, "")
		},
	}
	c.register(cmd)
	cmd.ValidArgsFunction = completeVersions(&c.conn, func(r *adminv1.Release) bool {
		p := r.GetRollout().GetPlan()
		return !r.GetRevoked() && r.GetRollout().GetState() == string(rollout.Rolling) && p != nil && int(p.GetStep()) < len(p.GetSteps())-1
	})
	return cmd
}

// stepSize is a plan step's size for people.
func stepSize(s *adminv1.PlanStep) string {
	if s.GetNodes() > 0 {
		return fmt.Sprintf("a canary of %d nodes", s.GetNodes())
	}
	return fmt.Sprintf("%d%%", s.GetPercent())
}

// stepText is step i of p for people, counted from 1: "2/3 (10%)".
func stepText(p *adminv1.Plan, i int) string {
	steps := p.GetSteps()
	if i < 0 || i >= len(steps) {
		return fmt.Sprintf("%d/%d", i+1, len(steps))
	}
	return fmt.Sprintf("%d/%d (%s)", i+1, len(steps), stepSize(steps[i]))
}

// dueText is when p's current step's bake ends.
func dueText(p *adminv1.Plan) string {
	steps := p.GetSteps()
	if i := int(p.GetStep()); i >= 0 && i < len(steps) {
		return formatTime(p.GetStepSince().AsTime().Add(time.Duration(steps[i].GetBakeSeconds()) * time.Second))
	}
	return "-"
}

// printPlan prints a plan's answer for people: for a dry run every step
// with its soonest window, the baseline and the deadlines; for a plan put
// in place, the release and where its plan starts.
func printPlan(w io.Writer, r *adminv1.Release, pv *adminv1.PlanPreview, dry bool) error {
	ro, p := r.GetRollout(), r.GetRollout().GetPlan()
	if !dry {
		soonest := ""
		if done := pv.GetEarliestComplete(); done != nil { // an older lpsd sends no preview
			soonest = "; complete at the soonest " + formatTime(done.AsTime())
		}
		fmt.Fprintf(w, "plan put in place: step %s from %s, its bake ends %s%s\n",
			stepText(p, int(p.GetStep())), formatTime(p.GetStepSince().AsTime()), dueText(p), soonest)
		if err := printRelease(w, &outputFlags{format: formatText}, r, ""); err != nil {
			return err
		}
		printExpiryWarning(w, r, pv)
		return nil
	}
	fmt.Fprintf(w, "dry run, nothing changed: %s would be %s at %d%%, at step %s, revision %d\n\n",
		quote.Text(r.GetVersion()), quote.Text(ro.GetState()), ro.GetPercent(), stepText(p, int(p.GetStep())), r.GetRevision())
	tw := newTable(w)
	fmt.Fprintln(tw, "STEP\tSIZE\tBAKE\tREPORTS\tEARLIEST START\tEARLIEST END\tDEADLINE")
	for i, s := range p.GetSteps() {
		var win *adminv1.StepWindow
		if i < len(pv.GetSteps()) {
			win = pv.GetSteps()[i]
		}
		start, end, deadline := "skipped", "-", "-"
		if win.GetEarliestStart() != nil {
			start, end = formatTime(win.GetEarliestStart().AsTime()), formatTime(win.GetEarliestEnd().AsTime())
		}
		if win.GetDeadline() != nil {
			deadline = formatTime(win.GetDeadline().AsTime())
		}
		fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%d\t%s\t%s\t%s\n", i+1, len(p.GetSteps()), stepSize(s), duration.Format(time.Duration(s.GetBakeSeconds())*time.Second), s.GetMinReports(), start, end, deadline)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b := pv.GetBaseline()
	fmt.Fprintf(w, "\ncomplete at the soonest %s: each step runs at least its bake, and ends once it has its reports (counted over all steps so far) and the release is healthy\n",
		formatTime(pv.GetEarliestComplete().AsTime()))
	fmt.Fprintf(w, "baseline: the release's failure rate (failed, fallen back, refused as signed) is judged against the ceiling %v (--max-failure) and, with a margin of %v (--margin), against %s; its silent and its refused-for-delivery rates against ceilings of %v and %v; nothing is judged on fewer than %d reports (the plan's floor, its smallest REPORTS)\n",
		b.GetMaxFailureRate(), b.GetMargin(), quote.Text(b.GetComparedWith()), b.GetMaxSilentRate(), b.GetMaxDeliveryRate(), b.GetFloor())
	deadlines := fmt.Sprintf("a node served the release that has not reported within %s counts as silent (--silent-after)", duration.Format(time.Duration(p.GetSilentAfterSeconds())*time.Second))
	if d := p.GetDeadlineSeconds(); d > 0 {
		deadlines += fmt.Sprintf("; a step still without enough evidence %s after its bake pauses the release as inconclusive (DEADLINE)", duration.Format(time.Duration(d)*time.Second))
	}
	fmt.Fprintf(w, "deadlines: %s; lpsd serves the release to no node after its envelope's not_after (%s)\n", deadlines, notAfterCell(r))
	printExpiryWarning(w, r, pv)
	return nil
}

// printExpiryWarning says when r's envelope expires before its plan can
// complete.
func printExpiryWarning(w io.Writer, r *adminv1.Release, pv *adminv1.PlanPreview) {
	if na, done := r.GetNotAfter(), pv.GetEarliestComplete(); na != nil && done != nil && na.AsTime().Before(done.AsTime()) {
		fmt.Fprintf(w, "warning: the envelope expires %s, before the plan can complete (%s): from then on lpsd serves the release to no node; sign it for longer, or plan shorter bakes\n",
			formatTime(na.AsTime()), formatTime(done.AsTime()))
	}
}

// parseSteps reads "SIZE:BAKE:REPORTS,..." (rollout.ParseSteps).
func parseSteps(s string) (*adminv1.Plan, error) {
	steps, err := rollout.ParseSteps(s)
	if err != nil {
		return nil, err
	}
	plan := &adminv1.Plan{}
	for _, st := range steps {
		plan.Steps = append(plan.Steps, &adminv1.PlanStep{Percent: int32(st.Percent), Nodes: int32(st.Nodes), BakeSeconds: int64(st.Bake / time.Second), MinReports: int32(st.MinReports)})
	}
	return plan, nil
}
