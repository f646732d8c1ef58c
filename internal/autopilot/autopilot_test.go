package autopilot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

const (
	version = "202604.01.1"
	base    = "202604.01"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

var testPlan = rollout.Plan{
	Steps: []rollout.PlanStep{
		{Percent: 1, Bake: 30 * time.Minute, MinReports: 20},
		{Percent: 25, Bake: time.Hour, MinReports: 50},
		{Percent: 100, Bake: time.Hour, MinReports: 100},
	},
	Margin:         0.05,
	MaxFailureRate: 0.20,
}

// fixture is a memstore with one planned release and a settable clock.
type fixture struct {
	t   *testing.T
	st  *memstore.Store
	now time.Time
	ap  *Autopilot
	n   int // reports written so far, for unique keys
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, st: memstore.New(), now: t0}
	t.Cleanup(func() { f.st.Close() })
	r := rollout.Release{Version: version, Base: base, Envelope: json.RawMessage(`{}`), NotAfter: t0.Add(30 * 24 * time.Hour), Rollout: rollout.Rollout{State: rollout.Draft}}
	r, err := r.SetPlan(testPlan, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.PutRelease(t.Context(), r, 0, store.AuditEntry{Actor: "op", Action: "plan", Target: version}, nil); err != nil {
		t.Fatal(err)
	}
	f.ap = New(f.st, Config{Now: func() time.Time { return f.now }})
	return f
}

// report adds n reports: exit is the exit code; hotfix "" is the control.
func (f *fixture) report(hotfixVersion string, n, exit int, fallback bool) {
	f.t.Helper()
	var rs []store.Report
	for range n {
		f.n++
		rs = append(rs, store.Report{VMID: fmt.Sprintf("vm-%d", f.n), Boot: "b", Base: base, HotfixVersion: hotfixVersion, ExitCode: exit, Fallback: fallback})
	}
	if _, err := f.st.PutReports(f.t.Context(), rs); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) release() rollout.Release {
	f.t.Helper()
	r, _, err := f.st.Release(f.t.Context(), version)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) step() []Change {
	f.t.Helper()
	c, err := f.ap.Step(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// TestLeavesAnExpiredRelease: a release whose envelope expired reaches no
// node, so its plan does not advance, however healthy its reports were.
func TestLeavesAnExpiredRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = f.release().NotAfter
	// Its expiry is audited (what its nodes get changed), nothing else.
	if c := f.step(); len(c) != 1 || c[0].Action != ActionExpire {
		t.Fatalf("stepped an expired release: %+v", c)
	}
	if r := f.release(); r.Rollout.Percent != 1 || r.Rollout.State != rollout.Rolling {
		t.Errorf("expired release %s at %d%%, want left rolling at 1%%", r.Rollout.State, r.Rollout.Percent)
	}
}

// TestAdvancesAHealthyRollout walks a healthy release through its plan:
// each step waits for its bake time and its reports.
func TestAdvancesAHealthyRollout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report("", 10, 1, false)
	if r := f.release(); r.Rollout.State != rollout.Rolling || r.Rollout.Percent != 1 {
		t.Fatalf("planned release = %s %d%%, want rolling at the canary's 1%%", r.Rollout.State, r.Rollout.Percent)
	}
	f.report(version, 30, 0, false)
	if c := f.step(); len(c) != 0 {
		t.Fatalf("advanced before the bake time: %+v", c)
	}
	f.now = t0.Add(31 * time.Minute)
	if c := f.step(); len(c) != 1 || c[0].Action != ActionAdvance || c[0].To != 25 {
		t.Fatalf("after the bake: %+v, want an advance to 25%%", c)
	}
	f.now = f.now.Add(2 * time.Hour)
	if c := f.step(); len(c) != 0 {
		t.Fatalf("advanced with 30 of 50 reports: %+v", c)
	}
	f.report(version, 80, 0, false)
	if c := f.step(); len(c) != 1 || c[0].To != 100 {
		t.Fatalf("second step: %+v, want 100%%", c)
	}
	f.now = f.now.Add(2 * time.Hour)
	if c := f.step(); len(c) != 1 {
		t.Fatalf("last step: %+v, want the completion", c)
	}
	if r := f.release(); r.Rollout.State != rollout.Complete || r.Rollout.Percent != 100 {
		t.Errorf("release = %s %d%%, want complete", r.Rollout.State, r.Rollout.Percent)
	}
	entries, err := f.st.Audit(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var auto int
	for _, e := range entries {
		if e.Actor != Actor {
			continue
		}
		auto++
		var ev Evidence
		if err := json.Unmarshal(e.Evidence, &ev); err != nil || ev.Verdict.Health != regression.Healthy || ev.Rule == "" {
			t.Errorf("audit %s evidence = %s (%v)", e.Action, e.Evidence, err)
		}
		if !strings.Contains(e.Reason, "healthy") || !strings.Contains(e.Reason, "step ") {
			t.Errorf("audit %s reason = %q, want a summary naming the step and the verdict", e.Action, e.Reason)
		}
	}
	if auto != 3 {
		t.Errorf("%d automatic audit entries, want 3", auto)
	}
}

// TestHaltsARegressingCanary: a release failing far more often than its
// control halts on its canary, without waiting for the bake, and the audit
// entry carries the evidence.
func TestHaltsARegressingCanary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 980, 0, false)
	f.report("", 20, 1, false)
	f.report(version, 14, 0, false)
	f.report(version, 10, 0, true) // fell back: the hotfix failed
	c := f.step()
	if len(c) != 1 || c[0].Action != ActionHalt {
		t.Fatalf("Step = %+v, want a halt", c)
	}
	if r := f.release(); r.Rollout.State != rollout.Halted || r.Rollout.Percent != 1 || r.Rollout.Reason != regression.ReasonRegression {
		t.Errorf("release = %s %d%% (%q), want halted at the canary's 1%%, reason regression", r.Rollout.State, r.Rollout.Percent, r.Rollout.Reason)
	}
	entries, _ := f.st.Audit(t.Context(), 0, 100)
	last := entries[len(entries)-1]
	var ev Evidence
	if last.Actor != Actor || last.Action != ActionHalt || json.Unmarshal(last.Evidence, &ev) != nil ||
		ev.Verdict.Health != regression.Regressing || ev.Verdict.Rule == "" || ev.Verdict.Release.Fallback != 10 || ev.Verdict.Baseline.Counts.Reported() != 1000 ||
		ev.Reason != regression.ReasonRegression || !strings.Contains(last.Reason, "regression") {
		t.Errorf("halt audit by %s, %s: evidence %s", last.Actor, last.Action, last.Evidence)
	}
	// Halted: nothing more happens, whatever the reports say.
	f.now = f.now.Add(24 * time.Hour)
	f.report(version, 100, 0, false)
	if c := f.step(); len(c) != 0 {
		t.Errorf("acted on a halted release: %+v", c)
	}
}

// TestOperatorWins: a pause stops the autopilot; a change made between the
// autopilot's look and its write makes it leave the release.
func TestOperatorWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = t0.Add(time.Hour)
	r, rev, _ := f.st.Release(t.Context(), version)
	paused, _ := r.Transition(rollout.Paused)
	if _, err := f.st.PutRelease(t.Context(), paused, rev, store.AuditEntry{Actor: "op", Action: "pause", Target: version}, nil); err != nil {
		t.Fatal(err)
	}
	if c := f.step(); len(c) != 0 {
		t.Errorf("acted on a paused release: %+v", c)
	}
}

// TestExactlyOneReplicaActs: two autopilots on one store decide the same
// advance; one acts, the other finds the release moved.
func TestExactlyOneReplicaActs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = t0.Add(time.Hour)
	other := New(f.st, Config{Now: func() time.Time { return f.now }})
	a, errA := f.ap.Step(t.Context())
	b, errB := other.Step(t.Context())
	if errA != nil || errB != nil || len(a)+len(b) != 1 {
		t.Fatalf("changes %+v and %+v (%v, %v), want exactly one", a, b, errA, errB)
	}
	if r := f.release(); r.Rollout.Percent != 25 {
		t.Errorf("percent = %d, want one step to 25%%", r.Rollout.Percent)
	}
}

// TestHaltsOnTheCeilingWithoutControl: with no control cohort to compare
// with, the absolute ceiling still halts, and the evidence encodes.
func TestHaltsOnTheCeilingWithoutControl(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report(version, 20, 0, true)
	if c := f.step(); len(c) != 1 || c[0].Action != ActionHalt || c[0].Verdict.Rule != regression.RuleCeiling || c[0].Verdict.Compared {
		t.Fatalf("Step = %+v, want a halt on the ceiling", c)
	}
}

// racing is a store where an operator changes the release between the
// autopilot's read and its write.
type racing struct {
	*memstore.Store
	t *testing.T
}

func (s racing) Release(ctx context.Context, v string) (rollout.Release, int64, error) {
	r, rev, err := s.Store.Release(ctx, v)
	if err != nil {
		return r, rev, err
	}
	scoped, err := r.SetScope(r.Rollout.Percent, []string{"0a1b2c3d-0000-4000-8000-00000000000a"}, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.Store.PutRelease(ctx, scoped, rev, store.AuditEntry{Actor: "op", Action: "scope", Target: v}, nil); err != nil {
		s.t.Fatal(err)
	}
	return r, rev, nil
}

// TestLosesTheRaceToAnOperator: the operator's write between the
// autopilot's read and its compare-and-swap wins; the autopilot reports no
// change and no error, and the operator's scope stands.
func TestLosesTheRaceToAnOperator(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = t0.Add(time.Hour)
	ap := New(racing{f.st, t}, Config{Now: func() time.Time { return f.now }})
	c, err := ap.Step(t.Context())
	if err != nil || len(c) != 0 {
		t.Fatalf("Step = %+v, %v; want no change and no error", c, err)
	}
	if r := f.release(); r.Rollout.Percent != 1 || len(r.Rollout.Subscriptions) != 1 {
		t.Errorf("release %d%% scoped %v, want the operator's change at 1%%", r.Rollout.Percent, r.Rollout.Subscriptions)
	}
}

// TestLeavesAReleaseRescopedSinceTheLook: a change in scope alone, same
// state, step and percentage, is a different release than the one judged.
func TestLeavesAReleaseRescopedSinceTheLook(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	judged := f.release()
	cur, err := judged.SetScope(judged.Rollout.Percent, nil, []string{"westeurope"})
	if err != nil {
		t.Fatal(err)
	}
	if moved, err := changed(judged, cur); err != nil || !moved {
		t.Errorf("changed = %v, %v after a rescope; want true", moved, err)
	}
	if moved, err := changed(judged, judged); err != nil || moved {
		t.Errorf("changed = %v, %v on the same release; want false", moved, err)
	}
}

// TestHaltsOnSilentCanary: nodes served the release that never reported
// (hung or dead before launch could) count as silent once the plan's
// silent-after has passed, and halt the release on the silent rate; until
// then they hold the canary: it does not advance on the few fast reports,
// whatever its bake and minimum.
func TestHaltsOnSilentCanary(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	p := rollout.Plan{
		Steps:  []rollout.PlanStep{{Nodes: 10, Bake: 10 * time.Minute, MinReports: 2}, {Percent: 100, MinReports: 10}},
		Margin: 0.05, MaxFailureRate: 0.2, SilentAfter: 20 * time.Minute,
	}
	r, err := rollout.Release{Version: version, Base: base, Envelope: json.RawMessage(`{}`), NotAfter: t0.Add(30 * 24 * time.Hour), Rollout: rollout.Rollout{State: rollout.Draft}}.SetPlan(p, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutRelease(t.Context(), r, 0, store.AuditEntry{Actor: "op", Action: "plan", Target: version}, nil); err != nil {
		t.Fatal(err)
	}
	// Ten nodes are served it; two report success, one reported only a
	// boot before it was served, the other seven say nothing.
	var reports []store.Report
	for i := range 10 {
		vm := fmt.Sprintf("vm-%d", i)
		if err := st.PutServed(t.Context(), []store.Served{{Version: version, VMID: vm, Boot: "b1", Base: base, Time: t0}}); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 0, 1:
			reports = append(reports, store.Report{VMID: vm, Boot: "b1", Base: base, HotfixVersion: version, Time: t0.Add(5 * time.Minute)})
		case 2:
			reports = append(reports, store.Report{VMID: vm, Boot: "b0", Base: base, Time: t0.Add(-time.Hour)})
		}
	}
	if _, err := st.PutReports(t.Context(), reports); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(15 * time.Minute)
	ap := New(st, Config{Now: func() time.Time { return now }})
	changes, err := ap.Step(t.Context())
	if err != nil || len(changes) != 0 {
		t.Fatalf("bake passed, 2 of 2 reports in, 8 holders pending: changes %+v, %v; want none", changes, err)
	}
	now = t0.Add(21 * time.Minute)
	changes, err = ap.Step(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Action != ActionHalt || changes[0].Verdict.Release.Silent != 8 || changes[0].Verdict.Reason != regression.ReasonSilent {
		t.Fatalf("after silent-after: changes %+v; want a halt on 8 silent of 10", changes)
	}
	if d := changes[0].Verdict.Detail; !strings.Contains(d, "silent 80.0% (8/10)") {
		t.Errorf("the verdict does not say the nodes are silent: %s", d)
	}
}

func TestClockSkew(t *testing.T) {
	t.Parallel()
	hb := func(ages ...time.Duration) []store.Heartbeat {
		var out []store.Heartbeat
		for _, a := range ages {
			out = append(out, store.Heartbeat{Time: t0.Add(-a)})
		}
		return out
	}
	for _, tt := range []struct {
		peers []store.Heartbeat
		want  time.Duration
	}{
		{hb(BeatInterval / 2), 0},
		{hb(0, BeatInterval), 0},
		{hb(3*time.Minute, 3*time.Minute, time.Second), 3*time.Minute - BeatInterval/2},
		{hb(-time.Hour, time.Second, 2*time.Second), time.Second - BeatInterval/2},
	} {
		if got := ClockSkew(t0, tt.peers); got != tt.want {
			t.Errorf("ClockSkew(%v) = %v, want %v", tt.peers, got, tt.want)
		}
	}
}

// fakeReplica is a store.Replica whose election and heartbeats the test
// sets.
type fakeReplica struct {
	leads     chan struct{} // a value lets one Campaign win
	peers     []store.Heartbeat
	resigned  chan struct{}
	done      chan struct{}
	beats     atomic.Int64
	campaigns atomic.Int64
}

func newFakeReplica() *fakeReplica {
	return &fakeReplica{leads: make(chan struct{}, 1), resigned: make(chan struct{}, 8), done: make(chan struct{})}
}

func (r *fakeReplica) Beat(context.Context, time.Time) error { r.beats.Add(1); return nil }
func (r *fakeReplica) Peers(context.Context) ([]store.Heartbeat, error) {
	return r.peers, nil
}

func (r *fakeReplica) Campaign(ctx context.Context) error {
	r.campaigns.Add(1)
	select {
	case <-r.leads:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (r *fakeReplica) Resign(context.Context) error { r.resigned <- struct{}{}; return nil }
func (r *fakeReplica) Done() <-chan struct{}        { return r.done }
func (r *fakeReplica) Close() error                 { return nil }

// TestOnlyTheLeaderLooks: a replica that does not lead never looks; one
// that leads looks; a leader whose clock is off the others' heartbeats
// steps down before it decides anything.
func TestOnlyTheLeaderLooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = t0.Add(31 * time.Minute) // the canary is due to advance
	rep := newFakeReplica()
	var looks atomic.Int64
	var leading atomic.Bool
	ap := New(f.st, Config{Interval: time.Millisecond, Now: func() time.Time { return f.now }, Replica: rep,
		OnAssess: func(context.Context, assess.Fleet) { looks.Add(1) }, OnLeader: leading.Store})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ap.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if looks.Load() != 0 || f.release().Rollout.Percent != 1 {
		t.Fatalf("a replica that does not lead looked %d times (release at %d%%)", looks.Load(), f.release().Rollout.Percent)
	}
	// Its clock is two minutes ahead of the others': it leads, finds
	// that, and steps down without a look.
	rep.peers = []store.Heartbeat{{ID: "b", Time: f.now.Add(-2 * time.Minute)}, {ID: "c", Time: f.now.Add(-2 * time.Minute)}}
	rep.leads <- struct{}{}
	select {
	case <-rep.resigned:
	case <-time.After(10 * time.Second):
		t.Fatal("a leader with a skewed clock did not step down")
	}
	if looks.Load() != 0 || leading.Load() || f.release().Rollout.Percent != 1 {
		t.Errorf("the skewed leader looked %d times, leading %v, release at %d%%; want none, false, 1%%", looks.Load(), leading.Load(), f.release().Rollout.Percent)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if rep.beats.Load() == 0 {
		t.Error("no heartbeat written")
	}

	// With clocks that agree, the leader looks and advances the canary.
	rep = newFakeReplica()
	rep.peers = []store.Heartbeat{{ID: "b", Time: f.now.Add(-time.Second)}}
	rep.leads <- struct{}{}
	ap = New(f.st, Config{Interval: time.Millisecond, Now: func() time.Time { return f.now }, Replica: rep})
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	go func() { done <- ap.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.release().Rollout.Percent == 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p := f.release().Rollout.Percent; p != 25 {
		t.Errorf("the leader left the canary at %d%%, want 25%%", p)
	}
	// The membership lost: Run returns, for lpsd to join again.
	close(rep.done)
	select {
	case err := <-done:
		if err == nil {
			t.Error("Run after the membership was lost = nil, want an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the membership was lost")
	}
}

// TestLeadRunsWhileLeading: Config.Lead starts only once the replica
// leads, and its ctx ends when the leadership does.
func TestLeadRunsWhileLeading(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rep := newFakeReplica()
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	ap := New(f.st, Config{Interval: time.Hour, Now: func() time.Time { return f.now }, Replica: rep, Lead: func(ctx context.Context, ready func()) {
		started <- struct{}{}
		ready()
		<-ctx.Done()
		ended <- struct{}{}
	}})
	done := make(chan error, 1)
	go func() { done <- ap.Run(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for rep.campaigns.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-started:
		t.Fatal("Lead ran before the replica led")
	default:
	}
	rep.leads <- struct{}{}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	wait(started, "Lead did not start once the replica led")
	close(rep.done)
	wait(ended, "Lead's ctx did not end with the leadership")
	if err := <-done; err == nil {
		t.Error("Run after the membership was lost = nil, want an error")
	}
}

// TestPausesAtTheDeadline: a step without the evidence to advance by its
// deadline (its bake, then the plan's Deadline) is paused, never advanced
// and never left waiting: stalled when it reached no node, inconclusive
// when it reached too few. The audit entry by lpsd says which, and that
// the deadline passed; until the deadline it waits.
func TestPausesAtTheDeadline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		reports int
		want    string
	}{
		{"stalled", 0, regression.ReasonStalled},
		{"inconclusive", 5, regression.ReasonInconclusive},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.report("", 500, 0, false) // a control cohort to compare with
			f.report(version, tt.reports, 0, false)
			deadline := f.release().Rollout.Plan.StepDeadline()
			if want := t0.Add(testPlan.Steps[0].Bake + rollout.DefaultDeadline); !deadline.Equal(want) {
				t.Fatalf("deadline %v, want the bake then the default deadline, %v", deadline, want)
			}
			for _, at := range []time.Time{t0.Add(31 * time.Minute), deadline} {
				f.now = at
				if c := f.step(); len(c) != 0 {
					t.Fatalf("at %v, before the deadline passed: %+v, want it to wait", at, c)
				}
			}
			f.now = deadline.Add(time.Second)
			c := f.step()
			if len(c) != 1 || c[0].Action != ActionPause {
				t.Fatalf("past the deadline: %+v, want a pause", c)
			}
			r := f.release()
			if r.Rollout.State != rollout.Paused || r.Rollout.Reason != tt.want || r.Rollout.Percent != 1 {
				t.Errorf("release %s %d%% reason %q, want paused at 1%% for %s", r.Rollout.State, r.Rollout.Percent, r.Rollout.Reason, tt.want)
			}
			entries, err := f.st.Audit(t.Context(), 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			last := entries[len(entries)-1]
			if last.Actor != Actor || last.Action != ActionPause || !strings.Contains(last.Reason, tt.want) || !strings.Contains(last.Reason, "deadline") {
				t.Errorf("audit %s %s %q, want lpsd's pause naming %s and the deadline", last.Actor, last.Action, last.Reason, tt.want)
			}
			var ev Evidence
			if err := json.Unmarshal(last.Evidence, &ev); err != nil || ev.Reason != tt.want || ev.Verdict.Health != regression.Insufficient {
				t.Errorf("audit evidence %s (%v), want reason %s on an insufficient verdict", last.Evidence, err, tt.want)
			}
			f.now = f.now.Add(time.Hour)
			if c := f.step(); len(c) != 0 {
				t.Errorf("paused, a later look changed it: %+v", c)
			}
		})
	}
}

// TestClockAgrees: a replica steps down only when its clock disagrees
// with a majority of the replicas, itself among them: with three, the one
// replica 3 minutes behind (or one whose heartbeats stopped) steps down
// and the other two may lead; with two that disagree, both step down.
func TestClockAgrees(t *testing.T) {
	t.Parallel()
	hb := func(ages ...time.Duration) []store.Heartbeat {
		var out []store.Heartbeat
		for _, a := range ages {
			out = append(out, store.Heartbeat{Time: t0.Add(-a)})
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		peers []store.Heartbeat
		want  bool
	}{
		{"two peers agree", hb(time.Second, 2*time.Second), true},
		{"one of two peers 3 minutes behind", hb(time.Second, 3*time.Minute), true},
		{"one of two peers 3 minutes ahead", hb(time.Second, -3*time.Minute), true},
		{"both peers 3 minutes behind: this one is ahead", hb(3*time.Minute, 3*time.Minute), false},
		{"both peers ahead: this one is behind", hb(-3*time.Minute, -2*time.Minute), false},
		{"the one peer off", hb(3 * time.Minute), false},
		{"the one peer agrees", hb(time.Second), true},
		{"two of four peers off", hb(time.Second, 2*time.Second, time.Hour, time.Hour), true},
		{"three of four peers off", hb(time.Second, time.Hour, time.Hour, -time.Hour), false},
	} {
		if got := ClockAgrees(t0, tt.peers); got != tt.want {
			t.Errorf("%s: ClockAgrees = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestOneSkewedReplicaLeavesALeader: of the shipped three replicas, one
// whose clock is 3 minutes behind does not make the others step down (the
// mean of two peers' ages did): the leader with a right clock looks and
// halts a canary failing 30 of 30.
func TestOneSkewedReplicaLeavesALeader(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 1, false) // 30 of 30 failed
	f.now = t0.Add(time.Minute)
	rep := newFakeReplica()
	rep.peers = []store.Heartbeat{{ID: "b", Time: f.now.Add(-2 * time.Second)}, {ID: "c", Time: f.now.Add(-3*time.Minute - time.Second)}}
	ap := New(f.st, Config{Interval: time.Millisecond, Now: func() time.Time { return f.now }, Replica: rep})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ap.Run(ctx) }()
	rep.leads <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for f.release().Rollout.State != rollout.Halted && time.Now().Before(deadline) {
		select {
		case <-rep.resigned:
			t.Fatal("the leader with a right clock stepped down")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if st := f.release().Rollout.State; st != rollout.Halted {
		t.Errorf("a canary failing 30 of 30 is %s, want halted", st)
	}
	cancel()
	<-done
}
