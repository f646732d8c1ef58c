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
