package autopilot

import (
	"context"
	"testing"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// requesting is a store where an operator's two-person request (only
// Rollout.Approval changes) lands between the autopilot's look and its
// write, as lpsd's admin approve() writes it.
type requesting struct {
	*memstore.Store
	t    *testing.T
	done bool
}

func (s *requesting) Release(ctx context.Context, v string) (rollout.Release, int64, error) {
	r, rev, err := s.Store.Release(ctx, v)
	if err != nil || s.done {
		return r, rev, err
	}
	s.done = true
	upd := r
	a := rollout.NewApproval(r, r, "skip", "token:alice", "looks fine", t0)
	upd.Rollout.Approval = &a
	if _, err := s.Store.PutRelease(ctx, upd, rev, store.AuditEntry{Actor: "token:alice", Action: "request-approval", Target: v}, nil); err != nil {
		s.t.Fatal(err)
	}
	return s.Store.Release(ctx, v)
}

// A pending request is no change to the rollout the autopilot judged, yet
// changed() compares the whole Rollout, Approval included: the halt of a
// regressing release is dropped for the look.
func TestRequestDoesNotDelayAHalt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 980, 0, false)
	f.report("", 20, 1, false)
	f.report(version, 14, 0, false)
	f.report(version, 10, 0, true)
	ap := New(&requesting{Store: f.st, t: t}, Config{Now: func() time.Time { return f.now }})
	c, err := ap.Step(t.Context())
	if r := f.release(); r.Rollout.State != rollout.Halted {
		t.Errorf("a regressing release stays %s after the look (changes %+v, %v): a two-person request written meanwhile made the autopilot drop its halt", r.Rollout.State, c, err)
	}
}
