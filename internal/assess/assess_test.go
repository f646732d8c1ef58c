package assess

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/tally"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// unreadable wraps a store whose Reports also met a record it could not
// decode.
type unreadable struct{ *memstore.Store }

func (u unreadable) Reports(ctx context.Context) ([]store.Report, error) {
	rs, err := u.Store.Reports(ctx)
	if err != nil {
		return nil, err
	}
	return rs, &store.UnreadableError{Kind: "report", Count: 2, First: errors.New("report record encoding version 2, want 1")}
}

// TestAssess: one read of the evidence judges the planned release against
// its incumbent, counts its canary seats, and leaves unplanned ones
// counted but unjudged; records nobody can read are left out and counted,
// never fatal.
func TestAssess(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	first := rollout.Release{Version: "202604.01.1", Base: "202604.01", NotAfter: t0.Add(30 * 24 * time.Hour), Rollout: rollout.Rollout{State: rollout.Complete, Percent: 100}}
	plan := rollout.Plan{Steps: []rollout.PlanStep{{Nodes: 10, MinReports: 5}, {Percent: 100, MinReports: 5}}, Margin: 0.05, MaxFailureRate: 0.2}
	second, err := rollout.Release{Version: "202604.01.2", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Draft}}.SetPlan(plan, t0)
	if err != nil {
		t.Fatal(err)
	}
	var reports []store.Report
	for i := range 20 {
		reports = append(reports, store.Report{VMID: fmt.Sprintf("old-%d", i), Boot: "b", Base: "202604.01", HotfixVersion: first.Version, Time: t0})
	}
	for i := range 10 {
		vm := fmt.Sprintf("new-%d", i)
		reports = append(reports, store.Report{VMID: vm, Boot: "b", Base: "202604.01", HotfixVersion: second.Version, Time: t0, ExitCode: i % 2})
		if _, err := st.TakeSeat(t.Context(), second.Version, store.Seat{VMID: vm, Since: t0}, store.SeatLimit{Seats: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PutReports(t.Context(), reports); err != nil {
		t.Fatal(err)
	}
	f, err := Assess(t.Context(), unreadable{st}, []rollout.Release{first, second}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	a := f.Releases[second.Version]
	if !a.Planned || a.Counts.Seated != 10 || a.Counts.OK != 5 || a.Counts.Failed != 5 {
		t.Errorf("second = %+v", a)
	}
	if v := a.Verdict; v.Health != regression.Regressing || v.Baseline.Incumbent != first.Version || v.Baseline.Counts.OK != 20 {
		t.Errorf("verdict = %s against %+v (%s); want regressing against the first hotfix's 20 nodes", v.Health, v.Baseline, v.Detail)
	}
	if f.Releases[first.Version].Planned || f.Releases[first.Version].Counts.OK != 20 {
		t.Errorf("first = %+v, want counted, unjudged", f.Releases[first.Version])
	}
	if f.Unreadable["report"] != 2 || len(f.Skipped) != 1 {
		t.Errorf("unreadable %v, skipped %v; want 2 reports", f.Unreadable, f.Skipped)
	}
}

// replicas is a store several replicas share, whose heartbeats are beats.
type replicas struct {
	*memstore.Store
	beats []store.Heartbeat
}

func (r replicas) Replicas(context.Context) ([]store.Heartbeat, error) { return r.beats, nil }

// TestAssessReadsReplicasClocks: the evidence is read with the replicas'
// heartbeats, so a node served a moment ago by a replica whose clock is
// far behind is pending, not silent; a store that lists no replicas reads
// the times as stamped.
func TestAssessReadsReplicasClocks(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	now := time.Now()
	// Further behind than MaxClockCorrection: the correction is capped,
	// and still enough to keep a node served 10 s ago from silence.
	behind := rollout.DefaultSilentAfter + time.Minute
	rel := rollout.Release{Version: "202604.01.1", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Rolling, Percent: 100}}
	sv := store.Served{Version: rel.Version, VMID: "vm-1", Boot: "b", Base: "202604.01", Time: now.Add(-behind - 10*time.Second), Replica: "lpsd-b-1"}
	if err := st.PutServed(t.Context(), []store.Served{sv}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		src  Source
		want tally.Counts
	}{
		{"as stamped", st, tally.Counts{Silent: 1}},
		{"with the replicas' clocks", replicas{st, []store.Heartbeat{{ID: "lpsd-b-1", Time: now.Add(-behind)}}}, tally.Counts{Pending: 1}},
	} {
		f, err := Assess(t.Context(), tt.src, []rollout.Release{rel}, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Releases[rel.Version].Counts; got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestAssessCountsMinutesWithRecordsAsUp: mid-upgrade, replicas older than
// the minute marks serve and accept reports while no new one runs; the
// minutes in which they stamped records count as lpsd up, so a boot
// served before them turns silent on time instead of waiting out a gap
// that was no outage. A gap without any record is still one, and a
// record before the first mark (the minutes before it count as up) does
// not make the minutes after it an outage.
func TestAssessCountsMinutesWithRecordsAsUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	rel := rollout.Release{Version: "202604.01.1", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Rolling, Percent: 100}}
	for _, tt := range []struct {
		name string
		// marked is the minutes marked, [from, to) before now.
		marked      [2]time.Duration
		servedAgo   time.Duration
		oldReplicas bool // reports stamped through the last 40 minutes
		want        tally.Counts
	}{
		{"an outage", [2]time.Duration{2 * time.Hour, 40 * time.Minute}, 45 * time.Minute, false, tally.Counts{Pending: 1}},
		{"older replicas up", [2]time.Duration{2 * time.Hour, 40 * time.Minute}, 45 * time.Minute, true, tally.Counts{Silent: 1}},
		{"marks began after the boot was served", [2]time.Duration{20 * time.Minute, 0}, 90 * time.Minute, false, tally.Counts{Silent: 1}},
	} {
		st := memstore.New()
		t.Cleanup(func() { st.Close() })
		for m := now.Add(-tt.marked[0]); m.Before(now.Add(-tt.marked[1])); m = m.Add(time.Minute) {
			if err := st.PutBeat(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		hung := store.Served{Version: rel.Version, VMID: "vm-hung", Boot: "b", Base: "202604.01", Time: now.Add(-tt.servedAgo)}
		if err := st.PutServed(ctx, []store.Served{hung}); err != nil {
			t.Fatal(err)
		}
		if tt.oldReplicas {
			var rs []store.Report
			for i := range 40 {
				rs = append(rs, store.Report{VMID: fmt.Sprintf("control-%d", i), Boot: "b", Base: "202604.01", Agent: "baked", AgentVersion: "202604.01.0", Time: now.Add(-time.Duration(40-i) * time.Minute)})
			}
			if _, err := st.PutReports(ctx, rs); err != nil {
				t.Fatal(err)
			}
		}
		f, err := Assess(ctx, NewShared(st), []rollout.Release{rel}, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Releases[rel.Version].Counts; got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
