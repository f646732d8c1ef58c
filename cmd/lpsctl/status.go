package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
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
}

type controlJSON struct {
	Base   string      `json:"base"`
	Counts *countsJSON `json:"counts"`
}

type countJSON struct {
	Outcome string `json:"outcome"`
	Count   uint64 `json:"count"`
}

func runStatus(ctx context.Context, args []string, e *env) error {
	var c connFlags
	fs := newFlagSet("status", "[--watch [--interval D]] [connection flags]", e)
	watch := fs.Bool("watch", false, "refresh until interrupted (text: the screen is redrawn on a terminal; --json: one document per refresh)")
	interval := fs.Duration("interval", 2*time.Second, "refresh interval with --watch")
	c.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if !*watch {
		return statusOnce(ctx, c, e)
	}
	if *interval < 100*time.Millisecond {
		return usagef("--interval %v: want at least 100ms", *interval)
	}
	term := isTerminal(e.stdout)
	for {
		// JSON: one document per refresh, nothing between them, so the
		// stream feeds jq as it comes.
		if !c.json {
			if term {
				fmt.Fprint(e.stdout, "\033[H\033[2J")
			}
			fmt.Fprintf(e.stdout, "lpsctl status, every %v (%s)\n", *interval, formatTime(time.Now()))
		}
		if err := statusOnce(ctx, c, e); err != nil {
			if ctx.Err() != nil {
				return nil // interrupted mid-refresh: that is how a watch ends
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
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

func statusOnce(ctx context.Context, c connFlags, e *env) error {
	var st *adminv1.StatusResponse
	err := c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		st, err = cl.Status(ctx, &adminv1.StatusRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if c.json {
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
		return writeJSON(e.stdout, out)
	}
	return printStatus(e, st)
}

func printStatus(e *env, st *adminv1.StatusResponse) error {
	region := st.GetRegion()
	if region == "" {
		region = "(none)"
	}
	snapshot := "none loaded yet"
	if st.GetSnapshotTime() != nil {
		snapshot = fmt.Sprintf("revision %d built %s", st.GetSnapshotRevision(), formatTime(st.GetSnapshotTime().AsTime()))
	}
	fmt.Fprintf(e.stdout, "region: %s\nserving snapshot: %s\n\n", region, snapshot)
	tw := newTable(e.stdout)
	if len(st.GetReleases()) == 0 {
		fmt.Fprintln(tw, "no releases")
	} else {
		fmt.Fprintln(tw, "VERSION\tBASE\tSTATE\tPERCENT\tSUBSCRIPTIONS\tREGIONS\tREVOKED\tSERVED*\tREPORTED\tOK\tFAILED\tFALLBACK\tSILENT\tREVISION\tUPDATED")
		for _, r := range st.GetReleases() {
			ro, c := r.GetRollout(), r.GetCounts()
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.GetVersion(), r.GetBase(), ro.GetState(), ro.GetPercent(),
				scope(ro.GetSubscriptions()), scope(ro.GetRegions()), yesNo(r.GetRevoked()), r.GetServed(),
				c.GetReported(), c.GetOk(), c.GetFailed(), c.GetFallback(), c.GetSilent(), r.GetRevision(), formatTime(r.GetUpdatedAt().AsTime()))
		}
		fmt.Fprintln(tw, "* requests this lpsd instance answered with the release; the reports are the fleet's")
	}
	var planned []*adminv1.Release
	for _, r := range st.GetReleases() {
		if r.GetRollout().GetPlan() != nil {
			planned = append(planned, r)
		}
	}
	if len(planned) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "PLANNED\tSTEP\tHEALTH\tNEXT STEP DUE\tDETAIL")
		for _, r := range planned {
			p, h := r.GetRollout().GetPlan(), r.GetRollout().GetHealth()
			steps := p.GetSteps()
			step := fmt.Sprintf("%d/%d at %d%%", p.GetStep()+1, len(steps), r.GetRollout().GetPercent())
			if int(p.GetStep()) < len(steps) && steps[p.GetStep()].GetNodes() > 0 {
				step = fmt.Sprintf("%d/%d canary %d/%d nodes", p.GetStep()+1, len(steps), r.GetRollout().GetCanarySeats(), steps[p.GetStep()].GetNodes())
			}
			due := "-"
			if r.GetRollout().GetState() == "rolling" && h.GetNextDue() != nil {
				due = formatTime(h.GetNextDue().AsTime())
			}
			verdict := h.GetVerdict()
			if h.GetRule() != "" {
				verdict += " (" + h.GetRule() + ")"
			}
			if verdict == "" {
				verdict = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.GetVersion(), step, verdict, due, h.GetDetail())
		}
	}
	fmt.Fprintln(tw)
	if len(st.GetControl()) == 0 {
		fmt.Fprintln(tw, "no control-cohort reports yet (nodes with the hotfix flag on that ran the baked agent)")
	} else {
		fmt.Fprintln(tw, "CONTROL BASE\tREPORTED\tOK\tFAILED")
		for _, c := range st.GetControl() {
			n := c.GetCounts()
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", c.GetBase(), n.GetReported(), n.GetOk(), n.GetFailed())
		}
	}
	fmt.Fprintln(tw)
	if len(st.GetRequests()) == 0 {
		fmt.Fprintln(tw, "no node requests counted by this instance yet")
	} else {
		fmt.Fprintln(tw, "OUTCOME\tREQUESTS")
		for _, n := range st.GetRequests() {
			fmt.Fprintf(tw, "%s\t%d\n", n.GetOutcome(), n.GetCount())
		}
	}
	return tw.Flush()
}
