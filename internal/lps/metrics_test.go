package lps

import (
	"errors"
	"fmt"
	"math"
	"nodehotfix/internal/store"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

func TestCountsSkipsZeros(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	if got := m.Counts(); len(got) != 0 {
		t.Errorf("Counts of a new Metrics = %v, want empty", got)
	}
	m.count(outcomeServed)
	m.count(outcomeServed)
	m.count(string(attest.ReasonReplay))
	want := map[string]uint64{"served": 2, "replay": 1}
	if diff := cmp.Diff(want, m.Counts()); diff != "" {
		t.Errorf("Counts mismatch (-want +got):\n%s", diff)
	}
}

func TestEveryReasonIsAnOutcome(t *testing.T) {
	t.Parallel()
	for _, r := range attest.Reasons() {
		if !knownOutcome(string(r)) {
			t.Errorf("reason %q has no outcome", r)
		}
	}
}

func TestSnapshotGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	now := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	src := &staticSnapshots{}
	m.registerSnapshots(src, func() time.Time { return now })
	m.StoreError(errors.New("x"))

	if diff := cmp.Diff(map[string]float64{
		"lpsd_snapshot_loaded": 0, "lpsd_snapshot_age_seconds": 0, "lpsd_snapshot_revision": 0, "lpsd_store_errors_total": 1,
		"lpsd_connections_shed_total": 0, "lpsd_served_pointer_bytes": 0, "lpsd_served_pointer_trimmed_total": 0,
		"lpsd_autopilot_leader": 0, "lpsd_clock_skew_seconds": 0, "lpsd_snapshot_log_size": 0, "lpsd_snapshot_keyset_version": 0,
		"lpsd_rollouts_frozen": 0,
	}, scalars(t, reg)); diff != "" {
		t.Errorf("before the first snapshot (-want +got):\n%s", diff)
	}
	m.SetLeader(true)
	m.SetFrozen(true)
	m.SetClockSkew(-1500 * time.Millisecond)
	src.snap = &Snapshot{Revision: 42, Built: now.Add(-90 * time.Second), log: &servedLog{size: 7, keySets: []store.KeySetRecord{{Version: 2}, {Version: 3}}}}
	if diff := cmp.Diff(map[string]float64{
		"lpsd_snapshot_loaded": 1, "lpsd_snapshot_age_seconds": 90, "lpsd_snapshot_revision": 42, "lpsd_store_errors_total": 1,
		"lpsd_connections_shed_total": 0, "lpsd_served_pointer_bytes": 0, "lpsd_served_pointer_trimmed_total": 0,
		"lpsd_autopilot_leader": 1, "lpsd_clock_skew_seconds": -1.5, "lpsd_snapshot_log_size": 7, "lpsd_snapshot_keyset_version": 3,
		"lpsd_rollouts_frozen": 1,
	}, scalars(t, reg)); diff != "" {
		t.Errorf("with a snapshot (-want +got):\n%s", diff)
	}
	// A replica that stops leading no longer speaks for the freeze.
	m.SetLeader(false)
	if got := scalars(t, reg)["lpsd_rollouts_frozen"]; got != 0 {
		t.Errorf("lpsd_rollouts_frozen after leading = %v, want 0", got)
	}
}

// TestStoppedReleases: paused and halted releases are counted by why, the
// autopilot's reason code (a plan that reached no node pauses as stalled)
// or an operator's hand, every pair exported; revoked ones are not.
func TestStoppedReleases(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	src := &staticSnapshots{}
	m.registerSnapshots(src, time.Now)
	stopped := func(version string, st rollout.State, reason string, revoked bool) rollout.Release {
		return rollout.Release{Version: version, Base: version[:9], Revoked: revoked, Rollout: rollout.Rollout{State: st, Reason: reason}}
	}
	src.snap = &Snapshot{Releases: []rollout.Release{
		stopped("202604.01.1", rollout.Paused, "stalled", false),
		stopped("202604.01.2", rollout.Paused, "stalled", false),
		stopped("202604.01.3", rollout.Halted, "regression", false),
		stopped("202604.01.4", rollout.Halted, "", false),
		stopped("202604.01.5", rollout.Halted, "silent", true),
		stopped("202604.01.6", rollout.Rolling, "", false),
	}}
	got := labelled(t, reg, "lpsd_releases_stopped")
	if len(got) != 14 {
		t.Errorf("%d series, want every state and reason (2 × 7): %v", len(got), got)
	}
	// Keyed "reason,state", the labels' order.
	for series, want := range map[string]float64{"stalled,paused": 2, "regression,halted": 1, "operator,halted": 1, "silent,halted": 0, "operator,paused": 0} {
		if got[series] != want {
			t.Errorf("lpsd_releases_stopped{%s} = %v, want %v", series, got[series], want)
		}
	}
}

// scalars gathers reg's unlabelled gauges and counters.
func scalars(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		if len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 || !strings.HasPrefix(mf.GetName(), "lpsd_") {
			continue
		}
		pm := mf.GetMetric()[0]
		v := pm.GetGauge().GetValue() + pm.GetCounter().GetValue()
		if math.IsNaN(v) {
			t.Fatalf("%s is NaN", mf.GetName())
		}
		out[mf.GetName()] = v
	}
	return out
}

// TestFleetMetrics: the latest tally is served per release and per base,
// labelled by version and result only.
func TestFleetMetrics(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry())
	planned := rollout.Release{Version: "202604.01.1", Rollout: rollout.Rollout{Plan: &rollout.Plan{MaxSilentRate: 0.05}}}
	byDefault := rollout.Release{Version: "202604.01.2", Rollout: rollout.Rollout{Plan: &rollout.Plan{}}}
	byHand := rollout.Release{Version: "202604.01.3"}
	m.SetAssess(assess.Fleet{Records: []rollout.Release{planned, byDefault, byHand}, Tally: tally.Tally{
		Releases: map[string]tally.Counts{"202604.01.1": {OK: 3, Failed: 1, Fallback: 1, RefusedIntegrity: 2, Silent: 4}},
		Control:  map[string]tally.Counts{"202604.01": {OK: 9, Failed: 1}},
	}})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "lpsd_release_nodes" && f.GetName() != "lpsd_control_nodes" && f.GetName() != "lpsd_release_silent_ceiling" {
			continue
		}
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, l := range mt.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			got[key] = mt.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"lpsd_release_nodes outcome=fellBack version=202604.01.1":         1,
		"lpsd_release_nodes outcome=failed version=202604.01.1":           1,
		"lpsd_release_nodes outcome=ok version=202604.01.1":               3,
		"lpsd_release_nodes outcome=refusedIntegrity version=202604.01.1": 2,
		"lpsd_release_nodes outcome=refusedDelivery version=202604.01.1":  0,
		"lpsd_release_nodes outcome=notApplicable version=202604.01.1":    0,
		"lpsd_release_nodes outcome=silent version=202604.01.1":           4,
		"lpsd_release_nodes outcome=pending version=202604.01.1":          0,
		"lpsd_control_nodes base=202604.01 outcome=failed":                1,
		"lpsd_control_nodes base=202604.01 outcome=ok":                    9,
		// The plan's silent ceiling, its default, and none without a plan.
		"lpsd_release_silent_ceiling version=202604.01.1": 0.05,
		"lpsd_release_silent_ceiling version=202604.01.2": rollout.DefaultMaxRate,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fleet metrics (-want +got):\n%s", diff)
	}
	// A replica that stops leading exports no assessment: only the
	// leader's looks are current.
	m.SetLeader(false)
	families, err = m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if n := f.GetName(); (n == "lpsd_release_nodes" || n == "lpsd_control_nodes") && len(f.GetMetric()) > 0 {
			t.Errorf("%s still exported after the replica stopped leading: %v", n, f.GetMetric())
		}
	}
}

// TestCanarySeatMetrics: nodes' seat requests are counted by result, and
// the seats held per release come from the serving snapshot's holders (none
// before the first snapshot).
func TestCanarySeatMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	src := &staticSnapshots{}
	m.registerSnapshots(src, time.Now)
	if got := labelled(t, reg, "lpsd_canary_seats_held"); len(got) != 0 {
		t.Errorf("lpsd_canary_seats_held before a snapshot = %v, want none", got)
	}
	m.seatResult(seatTaken)
	m.seatResult(seatFull)
	m.seatResult(seatTaken)
	m.seatResult(seatSubscription)
	wantReq := map[string]float64{seatTaken: 2, seatFull: 1, seatError: 0, seatLate: 0, seatSubscription: 1}
	if diff := cmp.Diff(wantReq, labelled(t, reg, "lpsd_canary_seat_requests_total")); diff != "" {
		t.Errorf("lpsd_canary_seat_requests_total (-want +got):\n%s", diff)
	}
	src.snap = &Snapshot{Seats: map[string]map[string]bool{
		"202604.01.2": {"vm-a": true, "vm-b": true},
		"202604.02.1": {},
	}}
	want := map[string]float64{"202604.01.2": 2, "202604.02.1": 0}
	if diff := cmp.Diff(want, labelled(t, reg, "lpsd_canary_seats_held")); diff != "" {
		t.Errorf("lpsd_canary_seats_held (-want +got):\n%s", diff)
	}
}

// TestTrustByBase: answers are counted per base by what the node declared.
func TestTrustByBase(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewPedanticRegistry())
	m.countTrust("202604.01", true)
	m.countTrust("202604.01", false)
	m.countTrust("202604.01", true)
	m.countTrust("202605.02", false)
	want := map[string]TrustCounts{"202604.01": {Declared: 2, None: 1}, "202605.02": {None: 1}}
	if diff := cmp.Diff(want, m.TrustByBase()); diff != "" {
		t.Errorf("TrustByBase (-want +got):\n%s", diff)
	}
}

// TestRolloutMetrics: each release's state (revoked as its own), reason,
// percent and plan step come from the serving snapshot; every rolling,
// paused or halted release is shown however old (a halt pages until it is
// resumed or revoked), and of the drafts and of the complete or revoked
// ones only the newest rolloutTerminalKept, so the series stay bounded.
func TestRolloutMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	src := &staticSnapshots{}
	m.registerSnapshots(src, time.Now)
	if got := labelled(t, reg, "lpsd_rollout_state"); len(got) != 0 {
		t.Errorf("lpsd_rollout_state before a snapshot = %v, want none", got)
	}
	plan := &rollout.Plan{Steps: []rollout.PlanStep{{Nodes: 20, Bake: time.Hour}, {Percent: 50, Bake: time.Hour}, {Percent: 100}}, Step: 1}
	rels := []rollout.Release{
		{Version: "202604.01.40", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Rolling, Percent: 50, Plan: plan}},
		{Version: "202604.01.41", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Paused, Percent: 5, Reason: "inconclusive"}},
		// The oldest of all, halted: shown whatever came after it.
		{Version: "202601.01.1", Base: "202601.01", Rollout: rollout.Rollout{State: rollout.Halted, Reason: "regression"}},
	}
	// 25 complete or revoked releases (patches 1 to 25) and 25 drafts
	// (patches 101 to 125).
	for i := 1; i <= 25; i++ {
		r := rollout.Release{Version: fmt.Sprintf("202604.01.%d", i), Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Complete, Percent: 100}, Revoked: i%2 == 1}
		d := rollout.Release{Version: fmt.Sprintf("202604.01.%d", 100+i), Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Draft}}
		rels = append(rels, r, d)
	}
	src.snap = &Snapshot{Releases: rels}
	// Gathered label values come in label-name order: base, reason,
	// state, version.
	state := labelled(t, reg, "lpsd_rollout_state")
	for _, want := range []string{
		"202604.01,,rolling,202604.01.40", "202604.01,inconclusive,paused,202604.01.41", "202601.01,regression,halted,202601.01.1",
		"202604.01,,revoked,202604.01.25", "202604.01,,complete,202604.01.24", "202604.01,,complete,202604.01.6",
		"202604.01,,draft,202604.01.125", "202604.01,,draft,202604.01.106",
	} {
		if state[want] != 1 {
			t.Errorf("lpsd_rollout_state{%s} = %v, want 1", want, state[want])
		}
	}
	if len(state) != 3+2*rolloutTerminalKept {
		t.Errorf("%d lpsd_rollout_state series, want the 3 live, %d drafts and %d ended: %v", len(state), rolloutTerminalKept, rolloutTerminalKept, state)
	}
	for _, old := range []string{"202604.01,,revoked,202604.01.5", "202604.01,,revoked,202604.01.1", "202604.01,,draft,202604.01.105"} {
		if _, ok := state[old]; ok {
			t.Errorf("lpsd_rollout_state{%s} shown, want only the %d newest of its kind", old, rolloutTerminalKept)
		}
	}
	pct := labelled(t, reg, "lpsd_rollout_percent")
	if pct["202604.01,202604.01.40"] != 50 || pct["202604.01,202604.01.41"] != 5 || len(pct) != 3+2*rolloutTerminalKept {
		t.Errorf("lpsd_rollout_percent = %v", pct)
	}
	step, steps := labelled(t, reg, "lpsd_rollout_step"), labelled(t, reg, "lpsd_rollout_steps")
	if diff := cmp.Diff(map[string]float64{"202604.01,202604.01.40": 2}, step); diff != "" {
		t.Errorf("lpsd_rollout_step (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"202604.01,202604.01.40": 3}, steps); diff != "" {
		t.Errorf("lpsd_rollout_steps (-want +got):\n%s", diff)
	}
}
