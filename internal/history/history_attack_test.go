package history

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/tally"
)

// TestAttackLeaderClockBehind: a new leader whose clock is behind the old
// leader's (by less than autopilot.MaxClockSkew, which the replicas
// tolerate) takes over within the old leader's last minute and records
// the revoke. Its point must be the release's last: before the fix it was
// keyed a minute before the old leader's last point, so the history ended
// "rolling, not revoked" for ever (a stopped release gets no more points).
func TestAttackLeaderClockBehind(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	a := rel("202604.01.1", rollout.Rolling, 10)
	c := map[string]tally.Counts{a.Version: {OK: 1}}
	// Old leader, 20 s ahead: true 10:00:50 reads 10:01:10.
	if err := NewRecorder(st, nil).Record(ctx, look(t0.Add(70*time.Second), c, a)); err != nil {
		t.Fatal(err)
	}
	// New leader, on time, takes over at true 10:00:55: the release is revoked.
	done := a
	done.Revoked = true
	rec := NewRecorder(st, nil)
	if err := rec.Record(ctx, look(t0.Add(55*time.Second), c, done)); err != nil {
		t.Fatal(err)
	}
	// And its looks go on; nothing changes.
	for i := range 3 {
		if err := rec.Record(ctx, look(t0.Add(time.Duration(2+i)*time.Minute), c, done)); err != nil {
			t.Fatal(err)
		}
	}
	ps := points(t, st, a.Version)
	if len(ps) == 0 || !ps[len(ps)-1].Revoked {
		t.Errorf("points %+v: the last recorded point is not the revoke", ps)
	}
	// Oldest first; the old leader's point, kept inside the minute as an
	// earlier one, may share the minute's start with the revoke.
	for i := 1; i < len(ps); i++ {
		if ps[i].Time.Before(ps[i-1].Time) {
			t.Errorf("points out of order: %v then %v", ps[i-1].Time, ps[i].Time)
		}
	}
	if len(ps) != 2 || ps[0].Revoked || !ps[1].Revoked {
		t.Errorf("points %+v: want the old leader's rolling point, then the revoke", ps)
	}
}

// halfway is a store.History whose PutPoints stores the first n points
// of a call and then fails, as etcdstore's chunked write can.
type halfway struct {
	store.History
	n int
}

func (h *halfway) PutPoints(ctx context.Context, ps []store.Point) error {
	if len(ps) > h.n {
		if err := h.History.PutPoints(ctx, ps[:h.n]); err != nil {
			return err
		}
		return errors.New("etcd: request timed out")
	}
	return h.History.PutPoints(ctx, ps)
}

// TestAttackRecorderHalfWrite: a look whose write stored some releases'
// points and failed for the others: the next look writes the missing
// points and does not rewrite the stored ones, and a revoke in the lost
// half is recorded.
func TestAttackRecorderHalfWrite(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	var rels []rollout.Release
	c := map[string]tally.Counts{}
	for i := range 200 {
		r := rel(fmt.Sprintf("202604.01.%d", i+1), rollout.Rolling, 10)
		r.Revoked = i == 150
		rels = append(rels, r)
		c[r.Version] = tally.Counts{OK: uint64(i)}
	}
	h := &halfway{History: st, n: 128}
	rec := NewRecorder(h, nil)
	if err := rec.Record(ctx, look(t0, c, rels...)); err == nil {
		t.Fatal("a failed write was no error")
	}
	h.n = 1 << 30
	if err := rec.Record(ctx, look(t0.Add(time.Minute), c, rels...)); err != nil {
		t.Fatal(err)
	}
	for i, r := range rels {
		ps := points(t, st, r.Version)
		want := t0
		if i >= 128 {
			want = t0.Add(time.Minute)
		}
		if len(ps) != 1 || !ps[0].Time.Equal(want) || ps[0].Revoked != r.Revoked {
			t.Fatalf("release %d: %+v, want one point at %v", i, ps, want)
		}
	}
}

// TestAttackReadLimitCountsEarlier: a stored point holds up to MaxEarlier
// more, so Read's limit, given or the store's most, bounds the points it
// returns, not those it read: a long history of busy minutes cannot make
// one read return seven times store.MaxPointsRead.
func TestAttackReadLimitCountsEarlier(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	const version = "202604.01.1"
	n := store.MaxPointsRead/(MaxEarlier+1) + 100
	sps := make([]store.Point, 0, n)
	for i := range n {
		m := t0.Add(time.Duration(i) * time.Minute)
		p := Point{At: m.Add(50 * time.Second), State: rollout.Rolling}
		for j := range MaxEarlier {
			p.Earlier = append(p.Earlier, Point{At: m.Add(time.Duration(j) * time.Second), State: rollout.Paused})
		}
		b, err := encode(p)
		if err != nil {
			t.Fatal(err)
		}
		sps = append(sps, store.Point{Version: version, Time: m, Data: b})
	}
	if err := st.PutPoints(ctx, sps); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, 10, store.MaxPointsRead + 1} {
		ps, err := Read(ctx, st, version, limit)
		if err != nil {
			t.Fatal(err)
		}
		want := store.PointsLimit(limit)
		if len(ps) != want {
			t.Errorf("Read(limit %d) returned %d points over %d stored minutes, want %d", limit, len(ps), n, want)
		}
		if len(ps) > 0 && !ps[len(ps)-1].Time.Equal(sps[n-1].Time.Add(50*time.Second)) {
			t.Errorf("Read(limit %d) ends at %v, want the newest look", limit, ps[len(ps)-1].Time)
		}
	}
}

// TestAttackEarlierOutOfOrder: the looks kept inside a minute were taken
// by leaders whose clocks disagree (or one that stepped back), so their
// recorded times are out of order; Read returns them in order anyway,
// each no later than the next, so a chart never draws time backwards.
func TestAttackEarlierOutOfOrder(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	const version = "202604.01.1"
	p := Point{At: t0.Add(40 * time.Second), State: rollout.Halted, Earlier: []Point{
		{At: t0.Add(30 * time.Second), State: rollout.Rolling},
		{At: t0.Add(10 * time.Second), State: rollout.Paused}, // a clock stepped back
		{At: t0.Add(20 * time.Second), State: rollout.Rolling},
	}}
	b, err := encode(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutPoints(ctx, []store.Point{{Version: version, Time: t0, Data: b}}); err != nil {
		t.Fatal(err)
	}
	ps, err := Read(ctx, st, version, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 4 {
		t.Fatalf("%d points, want the 3 earlier and the minute's last", len(ps))
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].Time.Before(ps[i-1].Time) {
			t.Errorf("point %d at %v before point %d at %v", i, ps[i].Time, i-1, ps[i-1].Time)
		}
	}
	for i, want := range []rollout.State{rollout.Rolling, rollout.Paused, rollout.Rolling, rollout.Halted} {
		if ps[i].State != want {
			t.Errorf("point %d is %v, want %v: the stored order", i, ps[i].State, want)
		}
	}
}
