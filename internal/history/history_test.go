package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/tally"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func rel(version string, state rollout.State, percent int) rollout.Release {
	return rollout.Release{Version: version, Base: "202604.01", Rollout: rollout.Rollout{State: state, Percent: percent},
		NotAfter: t0.Add(365 * 24 * time.Hour), UpdatedAt: t0}
}

// look is an assessment at t of rels, with counts per version.
func look(t time.Time, counts map[string]tally.Counts, rels ...rollout.Release) assess.Fleet {
	f := assess.Fleet{Now: t, Records: rels, Releases: map[string]assess.Release{},
		Tally: tally.Tally{Control: map[string]tally.Counts{"202604.01": {OK: 40, Failed: 1}}}}
	for _, r := range rels {
		f.Releases[r.Version] = assess.Release{Counts: counts[r.Version]}
	}
	return f
}

func points(t *testing.T, st store.History, version string) []Point {
	t.Helper()
	ps, err := Read(t.Context(), st, version, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestRecorder: a point is written when the assessment changed and not
// when it did not; a release that stops (revoked) gets one last point and
// no more; a new Recorder (another leader) does not rewrite what is
// stored; the last look of a minute is the minute's point.
func TestRecorder(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	rec := NewRecorder(st, nil)
	a := rel("202604.01.1", rollout.Rolling, 10)
	c := map[string]tally.Counts{a.Version: {OK: 1, Pending: 2}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rec.Record(ctx, look(t0, c, a)))
	must(rec.Record(ctx, look(t0.Add(time.Minute), c, a))) // unchanged: nothing
	c[a.Version] = tally.Counts{OK: 3}
	must(rec.Record(ctx, look(t0.Add(2*time.Minute), c, a)))
	c[a.Version] = tally.Counts{OK: 3, Failed: 1}
	must(rec.Record(ctx, look(t0.Add(2*time.Minute+30*time.Second), c, a))) // same minute: replaces
	ps := points(t, st, a.Version)
	if len(ps) != 2 || !ps[0].Time.Equal(t0) || !ps[1].Time.Equal(t0.Add(2*time.Minute+30*time.Second)) || ps[1].Counts.Failed != 1 || len(ps[1].Earlier) != 0 {
		t.Fatalf("points %+v: want t0 and the minute +2 holding its last look (1 failed, at its own time), the earlier look of only other counts forgotten", ps)
	}
	if p := ps[0]; p.State != rollout.Rolling || p.Percent != 10 || p.Baseline != ControlBaseline || p.BaselineCounts.OK != 40 {
		t.Errorf("first point %+v: want rolling at 10%% against the base's control (40 ok)", p)
	}

	// It is revoked: one point, then none however its counts move.
	done := a
	done.Revoked = true
	must(rec.Record(ctx, look(t0.Add(3*time.Minute), c, done)))
	c[a.Version] = tally.Counts{OK: 1} // retention pruned its reports
	must(rec.Record(ctx, look(t0.Add(4*time.Minute), c, done)))
	// Another leader, which has not seen the stored points.
	must(NewRecorder(st, nil).Record(ctx, look(t0.Add(5*time.Minute), c, done)))
	ps = points(t, st, a.Version)
	if len(ps) != 3 || !ps[2].Revoked || ps[2].Counts.OK != 3 {
		t.Fatalf("points after revoke %+v: want the revoked point once, with the counts it was revoked on", ps)
	}

	// A new leader writes nothing for a moving release unchanged since
	// the last stored point, and writes what changed.
	b := rel("202604.01.2", rollout.Paused, 5)
	cb := map[string]tally.Counts{b.Version: {OK: 2}}
	must(rec.Record(ctx, look(t0, cb, b)))
	other := NewRecorder(st, nil)
	must(other.Record(ctx, look(t0.Add(time.Minute), cb, b)))
	if ps := points(t, st, b.Version); len(ps) != 1 {
		t.Errorf("a new recorder rewrote an unchanged point: %+v", ps)
	}
	// The first recorder, leader again after the other wrote: Forget
	// makes it read the store, not trust what it remembers.
	cb[b.Version] = tally.Counts{OK: 2, Silent: 1}
	must(other.Record(ctx, look(t0.Add(2*time.Minute), cb, b)))
	cb[b.Version] = tally.Counts{OK: 2}
	rec.Forget()
	must(rec.Record(ctx, look(t0.Add(3*time.Minute), cb, b)))
	if ps := points(t, st, b.Version); len(ps) != 3 || ps[2].Counts.Silent != 0 {
		t.Errorf("after Forget: %+v, want the return to 2 ok recorded at +3", ps)
	}
}

// TestPointOfPlanned: a planned release's point carries its step, health
// and the incumbent it was judged against.
func TestPointOfPlanned(t *testing.T) {
	t.Parallel()
	r := rel("202604.01.3", rollout.Rolling, 5)
	r.Rollout.Plan = &rollout.Plan{Steps: []rollout.PlanStep{{Percent: 5}, {Percent: 100}}, Step: 0}
	f := look(t0, map[string]tally.Counts{r.Version: {OK: 9, Fallback: 1}}, r)
	f.Releases[r.Version] = assess.Release{Counts: tally.Counts{OK: 9, Fallback: 1}, Planned: true,
		Verdict: regression.Verdict{Health: regression.Healthy, Baseline: tally.Baseline{Incumbent: "202604.01.2", Counts: tally.Counts{OK: 100}}}}
	p := Of(r, f)
	if p.Step != 1 || p.Steps != 2 || p.Health != regression.Healthy || p.Baseline != "202604.01.2" || p.BaselineCounts.OK != 100 {
		t.Errorf("%+v: want step 1 of 2, healthy, against 202604.01.2's 100 ok", p)
	}
}

// TestRecorderPrunes: a release whose life ended more than
// store.HistoryRetention ago has its points deleted, once, and gets none
// again; one that ended less long ago keeps them.
func TestRecorderPrunes(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	old, recent := rel("202604.01.1", rollout.Complete, 100), rel("202604.01.2", rollout.Rolling, 50)
	old.Revoked, old.UpdatedAt = true, t0
	recent.NotAfter = t0.Add(24 * time.Hour)
	if err := NewRecorder(st, nil).Record(ctx, look(t0, nil, old, recent)); err != nil {
		t.Fatal(err)
	}
	if len(points(t, st, old.Version)) != 1 || len(points(t, st, recent.Version)) != 1 {
		t.Fatal("want a point of each")
	}
	later := t0.Add(store.HistoryRetention + time.Hour)
	rec := NewRecorder(st, nil)
	for range 2 {
		if err := rec.Record(ctx, look(later, nil, old, recent)); err != nil {
			t.Fatal(err)
		}
	}
	if ps := points(t, st, old.Version); len(ps) != 0 {
		t.Errorf("revoked %v before: %d points left", store.HistoryRetention, len(ps))
	}
	// recent expired at t0+24h, so less than the retention before later:
	// kept, and its expiry recorded as its last point.
	ps := points(t, st, recent.Version)
	if len(ps) != 2 || !ps[1].Expired {
		t.Errorf("expired less than %v ago: %+v, want its points and an expired one", store.HistoryRetention, ps)
	}
}

// failing is a store.History whose writes fail.
type failing struct{ store.History }

func (failing) PutPoints(context.Context, []store.Point) error { return errors.New("etcd is down") }

// TestRecorderFailure: a failed write is an error for the look and is
// tried again at the next look, not remembered as written.
func TestRecorderFailure(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	a := rel("202604.01.1", rollout.Rolling, 10)
	c := map[string]tally.Counts{a.Version: {OK: 1}}
	rec := NewRecorder(failing{st}, nil)
	if err := rec.Record(t.Context(), look(t0, c, a)); err == nil {
		t.Fatal("a failed write was no error")
	}
	rec.st = st // the store is back
	if err := rec.Record(t.Context(), look(t0.Add(time.Minute), c, a)); err != nil {
		t.Fatal(err)
	}
	if ps := points(t, st, a.Version); len(ps) != 1 {
		t.Errorf("after the store came back: %+v, want the point written", ps)
	}
}

// TestReadSkipsUndecodable: a point this lpsd cannot decode is left out
// and counted, the others read.
func TestReadSkipsUndecodable(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	if err := st.PutPoints(t.Context(), []store.Point{
		{Version: "202604.01.1", Time: t0, Data: []byte(`{"counts":{"ok":1},"state":"rolling","percent":5}`)},
		{Version: "202604.01.1", Time: t0.Add(time.Minute), Data: []byte(`not json`)},
	}); err != nil {
		t.Fatal(err)
	}
	ps, err := Read(t.Context(), st, "202604.01.1", 0)
	var ue *store.UnreadableError
	if !errors.As(err, &ue) || ue.Count != 1 || len(ps) != 1 || ps[0].Counts.OK != 1 || ps[0].Percent != 5 {
		t.Errorf("Read: %+v, %v; want the readable point and one unreadable", ps, err)
	}
	// A recorder whose last stored point is unreadable writes a fresh one.
	a := rel("202604.01.1", rollout.Rolling, 5)
	if err := NewRecorder(st, nil).Record(t.Context(), look(t0.Add(2*time.Minute), map[string]tally.Counts{a.Version: {OK: 1}}, a)); err != nil {
		t.Fatal(err)
	}
	if ps, _ := Read(t.Context(), st, a.Version, 0); len(ps) != 2 {
		t.Errorf("after an unreadable last point: %+v, want a fresh one written", ps)
	}
}

// TestRecorderKeepsMovesWithinAMinute: a minute keeps one point, its last
// look's, but every look after which the rollout moved in that minute is
// kept inside it and read back as a point of its own, at its own time:
// a halt resumed and completed within the minute stays in the history.
// Changes of counts alone are still the minute's to forget, and the
// earlier points are bounded.
func TestRecorderKeepsMovesWithinAMinute(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	rec := NewRecorder(st, nil)
	a := rel("202604.01.1", rollout.Rolling, 10)
	c := map[string]tally.Counts{a.Version: {OK: 1}}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	record := func(s int, state rollout.State, ok uint64) {
		t.Helper()
		a.Rollout.State = state
		c[a.Version] = tally.Counts{OK: ok}
		if err := rec.Record(ctx, look(at(s), c, a)); err != nil {
			t.Fatal(err)
		}
	}
	record(5, rollout.Rolling, 1)
	record(10, rollout.Rolling, 2) // counts alone: replaces the 5 s look
	record(20, rollout.Halted, 2)
	record(40, rollout.Rolling, 2) // resumed
	record(50, rollout.Complete, 3)
	record(55, rollout.Complete, 4) // counts alone
	ps, err := Read(ctx, st, a.Version, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprintf("%s@%ds ok %d", p.State, int(p.Time.Sub(t0).Seconds()), p.Counts.OK))
	}
	want := []string{"rolling@10s ok 2", "halted@20s ok 2", "rolling@40s ok 2", "complete@55s ok 4"}
	if !slices.Equal(got, want) {
		t.Errorf("history %q, want %q", got, want)
	}
	if sps, _ := st.Points(ctx, a.Version, 0); len(sps) != 1 {
		t.Errorf("%d points stored, want the minute's one", len(sps))
	}
	// A new recorder (another leader) reads the minute's point and goes on
	// adding to it.
	rec = NewRecorder(st, nil)
	record(58, rollout.Halted, 4)
	if ps, _ = Read(ctx, st, a.Version, 0); len(ps) != 5 || ps[3].State != rollout.Complete || ps[4].State != rollout.Halted {
		t.Errorf("after another leader's look in the minute: %+v", ps)
	}
	// Read's limit counts the points it returns.
	if ps, _ = Read(ctx, st, a.Version, 2); len(ps) != 2 || ps[1].State != rollout.Halted {
		t.Errorf("Read(limit 2) = %+v, want the two newest", ps)
	}
	// Many moves in one minute: the latest MaxEarlier are kept.
	b := rel("202604.01.2", rollout.Rolling, 1)
	for i := range 20 {
		b.Rollout.Percent = i + 1
		if err := rec.Record(ctx, look(t0.Add(time.Duration(i)*time.Second), c, b)); err != nil {
			t.Fatal(err)
		}
	}
	if ps, _ = Read(ctx, st, b.Version, 0); len(ps) != MaxEarlier+1 || ps[len(ps)-1].Percent != 20 || ps[0].Percent != 20-MaxEarlier {
		t.Errorf("20 moves in a minute read back as %d points, want the last %d", len(ps), MaxEarlier+1)
	}
}
