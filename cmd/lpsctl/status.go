package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
)

type statusJSON struct {
	Region           string        `json:"region"`
	SnapshotRevision int64         `json:"snapshot_revision"`
	SnapshotTime     *time.Time    `json:"snapshot_time"`
	Releases         []releaseJSON `json:"releases"`
	Requests         []countJSON   `json:"requests"`
	// Control counts, per base, the nodes with the hotfix path on that
	// provisioned with the baked agent.
	Control []controlJSON `json:"control"`
	// Replicas are the live replicas serving from the store and their
	// labels.
	Replicas []replicaJSON `json:"replicas"`
	// ServedNow is what the nodes of each base get now, and why.
	ServedNow             []servedBaseJSON `json:"served_now"`
	FailureRateDefinition string           `json:"failure_rate_definition"`
	// Freeze is the fleet-wide freeze; null when the store keeps none.
	Freeze *freezeJSON `json:"freeze"`
	// Policy is the rollout policy lpsd enforces; null from an lpsd
	// older than the policy.
	Policy *policyJSON `json:"policy"`
}

type controlJSON struct {
	Base   string      `json:"base"`
	Counts *countsJSON `json:"counts"`
}

type countJSON struct {
	Outcome string `json:"outcome"`
	Count   uint64 `json:"count"`
}

func newStatusCmd(e *env) *cobra.Command {
	var c service
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status [--watch [--interval D]]",
		Short: "list releases, rollout states, outcome reports and request counts",
		Long: `status lists the replicas and their labels (what region scopes match),
releases, rollout states, the nodes' outcome reports per release (reported,
ok, failed, fell back, silent), what each part of each base's nodes is
served now and why (SERVED NOW: the incumbent, the candidate at its
percentage, halted or superseded releases, fallbacks and failure rate),
the control cohort per base, each planned release's step, health verdict
and when its next step is due, and this lpsd instance's node request
counts.`,
		Example: `  lpsctl status
  lpsctl status --watch --interval 5s
  lpsctl status -o json | jq '.releases[] | {version, state, counts}'`,
		GroupID: groupInspect,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if !watch {
				return statusOnce(ctx, &c, e)
			}
			if interval < 100*time.Millisecond {
				return usagef("--interval %v: want at least 100ms", interval)
			}
			term := isTerminal(e.stdout)
			for {
				// Each refresh is read before the screen is redrawn, so an
				// interrupt or a slow lpsd never leaves a half screen.
				// Documents: one per refresh, nothing between them, so
				// the stream feeds jq as it comes.
				var buf bytes.Buffer
				if err := statusOnce(ctx, &c, &env{stdout: &buf, stderr: e.stderr}); err != nil {
					if ctx.Err() != nil {
						return ctx.Err() // interrupted mid-refresh
					}
					return err
				}
				if !c.out.structured() {
					if term {
						fmt.Fprint(e.stdout, "\033[H\033[2J")
					}
					fmt.Fprintf(e.stdout, "lpsctl status, every %v (%s)\n", duration.Format(interval), formatTime(time.Now()))
				}
				if _, err := e.stdout.Write(buf.Bytes()); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh until interrupted (text: the screen is redrawn on a terminal; -o json: one document per refresh)")
	newDuration(cmd.Flags(), &interval, "interval", 2*time.Second, "refresh interval with --watch")
	c.register(cmd)
	return cmd
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func statusOnce(ctx context.Context, c *service, e *env) error {
	var st *adminv1.StatusResponse
	err := c.conn.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		st, err = cl.Status(ctx, &adminv1.StatusRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if c.out.structured() {
		out := statusJSON{Region: st.GetRegion(), SnapshotRevision: st.GetSnapshotRevision(), Releases: []releaseJSON{}, Requests: []countJSON{}, Control: []controlJSON{}}
		if st.GetSnapshotTime() != nil {
			t := st.GetSnapshotTime().AsTime()
			out.SnapshotTime = &t
		}
		for _, r := range st.GetReleases() {
			out.Releases = append(out.Releases, toReleaseJSON(r))
		}
		for _, n := range st.GetRequests() {
			out.Requests = append(out.Requests, countJSON{n.GetOutcome(), n.GetCount()})
		}
		for _, c := range st.GetControl() {
			out.Control = append(out.Control, controlJSON{Base: c.GetBase(), Counts: toCountsJSON(c.GetCounts())})
		}
		out.Replicas, out.ServedNow, out.FailureRateDefinition = toReplicasJSON(st.GetReplicas()), toServedJSON(st.GetServedNow()), st.GetFailureRateDefinition()
		out.Policy = toPolicyJSON(st.GetPolicy())
		if f := st.GetFreeze(); f != nil {
			j := toFreezeJSON(f)
			out.Freeze = &j
		}
		return c.out.write(e.stdout, out)
	}
	return printStatus(e, st)
}

func printStatus(e *env, st *adminv1.StatusResponse) error {
	region := quote.Text(st.GetRegion())
	if region == "" {
		region = "(none)"
	}
	snapshot := "none loaded yet"
	if st.GetSnapshotTime() != nil {
		snapshot = fmt.Sprintf("revision %d built %s", st.GetSnapshotRevision(), formatTime(st.GetSnapshotTime().AsTime()))
	}
	fmt.Fprintf(e.stdout, "region: %s\nserving snapshot: %s\n", region, snapshot)
	if f := st.GetFreeze(); f.GetFrozen() {
		if err := printFreeze(e.stdout, toFreezeJSON(f)); err != nil {
			return err
		}
	}
	if p := st.GetPolicy(); p != nil && p.GetSummary() != "none" {
		fmt.Fprintf(e.stdout, "rollout policy: %s\n", quote.Text(p.GetSummary()))
	}
	fmt.Fprintln(e.stdout)
	tw := newTable(e.stdout)
	printReplicas(tw, st.GetReplicas())
	if len(st.GetReleases()) == 0 {
		fmt.Fprintln(tw, "no releases")
	} else {
		fmt.Fprintln(tw, "VERSION\tBASE\tSTATE\tPERCENT\tREASON\tSUBSCRIPTIONS\tREGIONS\tREVOKED\tNOT AFTER\tSERVED*\tNODES\tOK\tFAILED\tFELL BACK\tREFUSED SIGNED\tREFUSED DELIVERY\tN/A\tSILENT\tPENDING\tREVISION\tUPDATED")
		for _, r := range st.GetReleases() {
			ro, c := r.GetRollout(), r.GetCounts()
			nodes := c.GetReported() + c.GetSilent() + c.GetPending()
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", quote.Text(r.GetVersion()), quote.Text(r.GetBase()), quote.Text(ro.GetState()), ro.GetPercent(), dash(quote.Text(ro.GetReason())),
				scope(ro.GetSubscriptions()), scope(ro.GetRegions()), yesNo(r.GetRevoked()), notAfterCell(r), r.GetServed(),
				nodes, c.GetOk(), c.GetFailed(), c.GetFallback(), c.GetRefusedIntegrity(), c.GetRefusedDelivery(), c.GetNotApplicable(), c.GetSilent(), c.GetPending(),
				r.GetRevision(), formatTime(r.GetUpdatedAt().AsTime()))
		}
		fmt.Fprintln(tw, "* requests this lpsd instance answered with the release; the nodes, one per vmId by its worst outcome, are the fleet's")
		fmt.Fprintln(tw)
		printServedNow(tw, st.GetServedNow(), st.GetFailureRateDefinition())
	}
	var planned []*adminv1.Release
	for _, r := range st.GetReleases() {
		if r.GetRollout().GetPlan() != nil {
			planned = append(planned, r)
		}
	}
	if len(planned) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "PLANNED\tSTEP\tHEALTH\tBASELINE\tNEXT STEP DUE\tDEADLINE\tDETAIL")
		for _, r := range planned {
			p, h := r.GetRollout().GetPlan(), r.GetRollout().GetHealth()
			steps := p.GetSteps()
			step := fmt.Sprintf("%d/%d at %d%%", p.GetStep()+1, len(steps), r.GetRollout().GetPercent())
			if p.GetStep() >= 0 && int(p.GetStep()) < len(steps) && steps[p.GetStep()].GetNodes() > 0 {
				step = fmt.Sprintf("%d/%d canary %d/%d nodes", p.GetStep()+1, len(steps), r.GetRollout().GetCanarySeats(), steps[p.GetStep()].GetNodes())
			}
			due, deadline := "-", "-"
			if r.GetRollout().GetState() == "rolling" && h.GetNextDue() != nil {
				due = formatTime(h.GetNextDue().AsTime())
				deadline = formatTime(h.GetDeadline().AsTime())
			}
			verdict := quote.Text(h.GetVerdict())
			if h.GetRule() != "" {
				verdict += " (" + quote.Text(h.GetReason()) + ", " + quote.Text(h.GetRule()) + ")"
			}
			baseline := quote.Text(h.GetBaselineIncumbent())
			if h.GetBaselineRecorded() {
				baseline += " (its record)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", quote.Text(r.GetVersion()), step, dash(verdict), dash(baseline), due, deadline, quote.Text(h.GetDetail()))
		}
	}
	printApprovals(tw, st.GetReleases())
	fmt.Fprintln(tw)
	if len(st.GetControl()) == 0 {
		fmt.Fprintln(tw, "no control-cohort reports yet (nodes with the hotfix flag on that ran the baked agent, served no release)")
	} else {
		fmt.Fprintln(tw, "CONTROL BASE\tREPORTED\tOK\tFAILED")
		for _, c := range st.GetControl() {
			n := c.GetCounts()
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", quote.Text(c.GetBase()), n.GetReported(), n.GetOk(), n.GetFailed())
		}
	}
	fmt.Fprintln(tw)
	if len(st.GetRequests()) == 0 {
		fmt.Fprintln(tw, "no node requests counted by this instance yet")
	} else {
		fmt.Fprintln(tw, "OUTCOME\tREQUESTS")
		for _, n := range st.GetRequests() {
			fmt.Fprintf(tw, "%s\t%d\n", quote.Text(n.GetOutcome()), n.GetCount())
		}
	}
	return tw.Flush()
}

// printApprovals lists the changes waiting for a second operator, if any.
func printApprovals(tw io.Writer, rels []*adminv1.Release) {
	first := true
	for _, r := range rels {
		a := r.GetRollout().GetApproval()
		if a == nil {
			continue
		}
		if first {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "AWAITING A SECOND OPERATOR\tACTION\tCHANGE\tREQUESTED BY\tAT\tEXPIRES\tREASON")
			first = false
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", quote.Text(r.GetVersion()), quote.Text(a.GetAction()), quote.Text(a.GetChange()), quote.Text(a.GetRequestedBy()),
			formatTime(a.GetRequestedAt().AsTime()), formatTime(a.GetExpires().AsTime()), quote.Text(a.GetReason()))
	}
	if !first {
		fmt.Fprintln(tw, "another operator approves one by asking for the same change (the same lpsctl command) before it expires")
	}
}

// dash is s, or "-" for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
