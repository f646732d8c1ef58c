package main

import (
	"context"
	"fmt"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

type statusJSON struct {
	Region           string        `json:"region"`
	SnapshotRevision int64         `json:"snapshot_revision"`
	SnapshotTime     *time.Time    `json:"snapshot_time"`
	Releases         []releaseJSON `json:"releases"`
	Requests         []countJSON   `json:"requests"`
}

type countJSON struct {
	Outcome string `json:"outcome"`
	Count   uint64 `json:"count"`
}

func runStatus(ctx context.Context, args []string, e *env) error {
	var c connFlags
	fs := newFlagSet("status", "[connection flags]", e)
	c.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	var st *adminv1.StatusResponse
	err := c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		st, err = cl.Status(ctx, &adminv1.StatusRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if c.json {
		out := statusJSON{Region: st.GetRegion(), SnapshotRevision: st.GetSnapshotRevision(), Releases: []releaseJSON{}, Requests: []countJSON{}}
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
		fmt.Fprintln(tw, "VERSION\tBASE\tSTATE\tPERCENT\tSUBSCRIPTIONS\tREGIONS\tREVOKED\tREVISION\tUPDATED")
		for _, r := range st.GetReleases() {
			ro := r.GetRollout()
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%s\t%s\t%s\t%d\t%s\n", r.GetVersion(), r.GetBase(), ro.GetState(), ro.GetPercent(),
				scope(ro.GetSubscriptions()), scope(ro.GetRegions()), yesNo(r.GetRevoked()), r.GetRevision(), formatTime(r.GetUpdatedAt().AsTime()))
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
