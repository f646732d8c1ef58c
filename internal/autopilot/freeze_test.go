package autopilot

import (
	"context"
	"errors"
	"testing"
	"time"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// TestFreezeHoldsAdvances: while every rollout is frozen a healthy step
// that is due does not advance (OnFreeze says so each look), it advances
// at the first look after the thaw, and a regressing one halts frozen or
// not.
func TestFreezeHoldsAdvances(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var seen []bool
	f.ap.cfg.OnFreeze = func(frozen bool) { seen = append(seen, frozen) }
	ctx := t.Context()
	put := func(frozen bool, ifRev int64) int64 {
		t.Helper()
		rev, err := f.st.PutFreeze(ctx, store.Freeze{Frozen: frozen, Reason: "test", Actor: "op", Since: f.now}, ifRev, store.AuditEntry{Actor: "op", Action: "freeze", Target: "fleet"})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	rev := put(true, 0)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = t0.Add(31 * time.Minute) // due
	if c := f.step(); len(c) != 0 {
		t.Fatalf("advanced while frozen: %+v", c)
	}
	put(false, rev)
	if c := f.step(); len(c) != 1 || c[0].Action != ActionAdvance {
		t.Fatalf("after the thaw: %+v, want the advance", c)
	}
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Errorf("OnFreeze saw %v, want [true false]", seen)
	}
	rev, _ = f.freezeRev()
	put(true, rev)
	f.now = f.now.Add(time.Hour)
	f.report(version, 40, 0, true) // falling back: the hotfix fails
	if c := f.step(); len(c) != 1 || c[0].Action != ActionHalt {
		t.Errorf("a regression while frozen: %+v, want the halt", c)
	}
}

func (f *fixture) freezeRev() (int64, error) {
	_, rev, err := f.st.Freeze(f.t.Context())
	return rev, err
}

// brokenFreeze is a store whose freeze cannot be read.
type brokenFreeze struct{ *memstore.Store }

func (brokenFreeze) Freeze(context.Context) (store.Freeze, int64, error) {
	return store.Freeze{}, 0, errors.New("etcd: request timed out")
}

// TestUnreadableFreezeHolds: a freeze the autopilot cannot read holds
// every advance, and the look says why.
func TestUnreadableFreezeHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.ap = New(brokenFreeze{f.st}, Config{Now: func() time.Time { return t0.Add(31 * time.Minute) }})
	c, err := f.ap.Step(t.Context())
	if len(c) != 0 || err == nil {
		t.Errorf("Step with an unreadable freeze = %+v, %v; want no advance and the error", c, err)
	}
}
