package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/store"
)

// RunFreeze runs the conformance suite of store.Freezer against the
// backend that open returns, with Run's rules: each call of open returns a
// new, empty store of its own, the suite closes what it opens, and
// subtests run in parallel. A store that is no Freezer fails: every
// backend here has the capability, so calling RunFreeze for one that lost
// it is a mistake.
func RunFreeze(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"freeze-round-trip", testFreezeRoundTrip},
		{"freeze-compare-and-swap", testFreezeCompareAndSwap},
		{"freeze-audit", testFreezeAudit},
		{"freeze-concurrent", testFreezeConcurrent},
		{"freeze-apart-from-releases", testFreezeApart},
		{"freeze-watch", testFreezeWatch},
		{"freeze-close", testFreezeClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tt.fn(t, s)
		})
	}
}

// Frozen returns a freeze for reason, set by the suite's actor at a time
// with nanoseconds and a zone, so a backend that rounds or drops either
// shows.
func Frozen(reason string) store.Freeze {
	return store.Freeze{
		Frozen: true,
		Reason: reason,
		Actor:  "operator@example",
		Since:  time.Date(2026, 4, 2, 9, 30, 0, 123456789, time.FixedZone("UTC+2", 2*3600)),
	}
}

// FreezeEntry returns the audit entry of a freeze change.
func FreezeEntry(action, reason string) store.AuditEntry {
	e := Entry(action, "fleet")
	e.Reason = reason
	return e
}

func freezer(t *testing.T, s store.Store) store.Freezer {
	t.Helper()
	f, ok := s.(store.Freezer)
	if !ok {
		t.Fatalf("%T is no store.Freezer", s)
	}
	return f
}

// MustPutFreeze writes f with PutFreeze (its audit entry's reason is
// f.Reason) and fails the test on error.
func MustPutFreeze(t testing.TB, fz store.Freezer, f store.Freeze, ifRev int64) int64 {
	t.Helper()
	rev, err := fz.PutFreeze(t.Context(), f, ifRev, FreezeEntry("freeze", f.Reason))
	if err != nil {
		t.Fatalf("PutFreeze(%q, %d) = %v", f.Reason, ifRev, err)
	}
	return rev
}

// checkFreeze fails unless the stored freeze is want at revision rev.
func checkFreeze(t *testing.T, fz store.Freezer, want store.Freeze, rev int64) {
	t.Helper()
	got, gotRev, err := fz.Freeze(t.Context())
	if err != nil {
		t.Fatalf("Freeze = %v", err)
	}
	// cmp compares the times with their Equal method: the instant, not
	// the zone or the monotonic reading.
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Freeze mismatch (-want +got):\n%s", diff)
	}
	if gotRev != rev {
		t.Errorf("Freeze revision = %d, want %d", gotRev, rev)
	}
}

func testFreezeRoundTrip(t *testing.T, s store.Store) {
	fz := freezer(t, s)
	checkFreeze(t, fz, store.Freeze{}, 0)

	want := Frozen("INC-77: the \u201cnew\u201d kernel flag breaks boots")
	rev := MustPutFreeze(t, fz, want, 0)
	if rev <= 0 {
		t.Errorf("PutFreeze revision = %d, want > 0", rev)
	}
	checkFreeze(t, fz, want, rev)

	got, _, err := fz.Freeze(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Since.Equal(want.Since) {
		t.Errorf("Since = %v, want the instant %v", got.Since, want.Since)
	}
}

func testFreezeCompareAndSwap(t *testing.T, s store.Store) {
	ctx := t.Context()
	fz := freezer(t, s)
	if _, err := fz.PutFreeze(ctx, Frozen("none yet"), 7, FreezeEntry("freeze", "none yet")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutFreeze(none stored, ifRev 7) = %v, want ErrConflict", err)
	}
	checkFreeze(t, fz, store.Freeze{}, 0)

	first := Frozen("first")
	rev1 := MustPutFreeze(t, fz, first, 0)
	refused := Frozen("refused")
	for _, stale := range []int64{0, rev1 + 1000, -1} {
		if _, err := fz.PutFreeze(ctx, refused, stale, FreezeEntry("freeze", "refused")); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutFreeze(ifRev %d, stored %d) = %v, want ErrConflict", stale, rev1, err)
		}
	}
	checkFreeze(t, fz, first, rev1)

	thaw := store.Freeze{Reason: "fixed in 202604.02.1", Actor: "operator@example", Since: first.Since.Add(time.Hour)}
	rev2 := MustPutFreeze(t, fz, thaw, rev1)
	if rev2 <= rev1 {
		t.Errorf("revision after a write = %d, want > %d", rev2, rev1)
	}
	// The old revision is stale now.
	if _, err := fz.PutFreeze(ctx, refused, rev1, FreezeEntry("freeze", "refused")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutFreeze(old revision %d, stored %d) = %v, want ErrConflict", rev1, rev2, err)
	}
	checkFreeze(t, fz, thaw, rev2)

	again := Frozen("again")
	rev3 := MustPutFreeze(t, fz, again, rev2)
	if rev3 <= rev2 {
		t.Errorf("revision after a second write = %d, want > %d", rev3, rev2)
	}
	checkFreeze(t, fz, again, rev3)

	// Refused writes appended nothing.
	var reasons []string
	for _, a := range allAudit(t, s) {
		reasons = append(reasons, a.Reason)
	}
	if diff := cmp.Diff([]string{"first", thaw.Reason, "again"}, reasons); diff != "" {
		t.Errorf("audit reasons after refused and accepted writes (-want +got):\n%s", diff)
	}
}

func testFreezeAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	fz := freezer(t, s)
	// A release's entry first: the freeze's entries share its sequence.
	MustPut(t, s, Release("202604.01.1"), 0)
	want := allAudit(t, s)

	var rev int64
	for i, action := range []string{"freeze", "thaw", "freeze"} {
		f := Frozen(fmt.Sprintf("change %d", i))
		f.Frozen = action == "freeze"
		e := FreezeEntry(action, f.Reason)
		e.Before = []byte(`{"frozen": ` + fmt.Sprint(!f.Frozen) + `}`)
		e.After = []byte(`{"frozen" : ` + fmt.Sprint(f.Frozen) + `}`)
		var err error
		if rev, err = fz.PutFreeze(ctx, f, rev, e); err != nil {
			t.Fatalf("PutFreeze(%s) = %v", action, err)
		}
		got := allAudit(t, s)
		if len(got) != len(want)+1 {
			t.Fatalf("audit grew by %d entries with a freeze write, want 1", len(got)-len(want))
		}
		last := got[len(got)-1]
		if last.Seq <= want[len(want)-1].Seq {
			t.Errorf("freeze entry Seq %d after %d, want strictly increasing", last.Seq, want[len(want)-1].Seq)
		}
		e.Seq = last.Seq
		want = append(want, e)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("audit after %s (-want +got):\n%s", action, diff)
		}
	}
}

func testFreezeConcurrent(t *testing.T, s store.Store) {
	const writers = 8
	fz := freezer(t, s)
	put := func(ifRev int64) (int, int64) {
		t.Helper()
		before := len(allAudit(t, s))
		revs := make([]int64, writers)
		errs := race(writers, func(i int) error {
			var err error
			reason := fmt.Sprintf("writer %d at %d", i, ifRev)
			revs[i], err = fz.PutFreeze(t.Context(), Frozen(reason), ifRev, FreezeEntry("freeze", reason))
			return err
		})
		winner := checkOneWinner(t, errs)
		checkFreeze(t, fz, Frozen(fmt.Sprintf("writer %d at %d", winner, ifRev)), revs[winner])
		audit := allAudit(t, s)
		if len(audit) != before+1 {
			t.Fatalf("audit grew by %d entries with %d racing writers, want 1", len(audit)-before, writers)
		}
		if last := audit[len(audit)-1]; last.Reason != fmt.Sprintf("writer %d at %d", winner, ifRev) {
			t.Errorf("last audit entry reason = %q, want the winner's", last.Reason)
		}
		return winner, revs[winner]
	}
	// Racing first writes (none stored), then racing writes on the one
	// that won.
	_, rev := put(0)
	put(rev)
}

func testFreezeApart(t *testing.T, s store.Store) {
	ctx := t.Context()
	fz := freezer(t, s)
	relRev := MustPut(t, s, Release("202604.01.1"), 0)
	fRev := MustPutFreeze(t, fz, Frozen("apart"), 0)
	// A freeze write is no release write, nor a release write a freeze
	// write: each record keeps its revision, and a write on it still
	// compares equal.
	if _, got, err := s.Release(ctx, "202604.01.1"); err != nil || got != relRev {
		t.Errorf("Release after a freeze write = revision %d, %v; want %d", got, err, relRev)
	}
	MustPut(t, s, Release("202604.01.2"), 0)
	checkFreeze(t, fz, Frozen("apart"), fRev)
	r := Release("202604.01.1")
	r.Rollout.Percent = 5
	if _, err := s.PutRelease(ctx, r, relRev, Entry("rollout-set", r.Version), nil); err != nil {
		t.Errorf("PutRelease(its own revision) after a freeze write = %v", err)
	}
	MustPutFreeze(t, fz, store.Freeze{Reason: "thawed"}, fRev)
}

func testFreezeWatch(t *testing.T, s store.Store) {
	fz := freezer(t, s)
	w := s.Watch(t.Context())
	rev := MustPutFreeze(t, fz, Frozen("watched"), 0)
	WaitSignal(t, w)

	thaw := store.Freeze{Reason: "thawed"}
	MustPutFreeze(t, fz, thaw, rev)
	// As testWatchSignals: by the time a signal arrives the latest write
	// is visible, which may be the first signal if the two coalesced.
	deadline := time.Now().Add(WaitTimeout)
	for {
		got, _, err := fz.Freeze(t.Context())
		if err != nil {
			t.Fatalf("Freeze = %v", err)
		}
		if !got.Frozen && got.Reason == thaw.Reason {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thaw not visible within %v", WaitTimeout)
		}
		WaitSignal(t, w)
	}
}

func testFreezeClose(t *testing.T, s store.Store) {
	ctx := t.Context()
	fz := freezer(t, s)
	rev := MustPutFreeze(t, fz, Frozen("closing"), 0)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, _, err := fz.Freeze(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Freeze after Close = %v, want ErrClosed", err)
	}
	if _, err := fz.PutFreeze(ctx, store.Freeze{}, rev, FreezeEntry("thaw", "")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("PutFreeze after Close = %v, want ErrClosed", err)
	}
}
