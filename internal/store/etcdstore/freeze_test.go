package etcdstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storetest"
)

// TestIntegrationFreezeReplicas: two replicas (two clients of one etcd,
// one prefix) share one freeze: a freeze one writes signals the other's
// Watch and is what the other's Freeze returns, at the same revision, and
// the other's write on a stale revision conflicts.
func TestIntegrationFreezeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	a, b := mustOpenPrefix(t, endpoints, "/freeze/"), mustOpenPrefix(t, endpoints, "/freeze/")
	wa, wb := a.Watch(t.Context()), b.Watch(t.Context())

	frozen := storetest.Frozen("INC-88: frozen on replica a")
	rev := storetest.MustPutFreeze(t, a, frozen, 0)
	storetest.WaitSignal(t, wb)
	waitFreeze(t, b, wb, frozen, rev)

	if _, err := b.PutFreeze(t.Context(), store.Freeze{Reason: "stale"}, 0, storetest.FreezeEntry("thaw", "stale")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("replica b: PutFreeze(ifRev 0) over a's freeze = %v, want ErrConflict", err)
	}
	thaw := store.Freeze{Reason: "thawed on replica b", Actor: "operator@example", Since: frozen.Since.Add(time.Hour)}
	rev2 := storetest.MustPutFreeze(t, b, thaw, rev)
	waitFreeze(t, a, wa, thaw, rev2)

	audit, err := a.Audit(t.Context(), 0, 10)
	if err != nil || len(audit) != 2 || audit[0].Reason != frozen.Reason || audit[1].Reason != thaw.Reason {
		t.Errorf("Audit = %+v, %v; want a's freeze then b's thaw", audit, err)
	}
}

// waitFreeze waits, re-reading on each signal of w, until s's Freeze is
// want at rev.
func waitFreeze(t *testing.T, s *Store, w <-chan struct{}, want store.Freeze, rev int64) {
	t.Helper()
	deadline := time.Now().Add(storetest.WaitTimeout)
	for {
		got, gotRev, err := s.Freeze(t.Context())
		if err != nil {
			t.Fatalf("Freeze = %v", err)
		}
		if gotRev == rev && got.Frozen == want.Frozen && got.Reason == want.Reason && got.Since.Equal(want.Since) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Freeze = %+v at %d, want %+v at %d within %v", got, gotRev, want, rev, storetest.WaitTimeout)
		}
		storetest.WaitSignal(t, w)
	}
}

// TestIntegrationFreezeDamage writes what no Store writes under the
// freeze's key: it reads as frozen with an UnreadableError at the key's
// ModRevision, never as the zero freeze that lets rollouts advance, and a
// write at that revision replaces it.
func TestIntegrationFreezeDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	for _, tt := range []struct{ name, value string }{
		{"garbage", "\x00\xffnot a record"},
		{"newer-encoding", `{"v":2,"freeze":{"frozen":false}}`},
		{"empty", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.value
			s := mustOpenPrefix(t, endpoints, "/freeze-damage/"+tt.name+"/")
			thawed := store.Freeze{Reason: "not frozen"}
			first := storetest.MustPutFreeze(t, s, thawed, 0)
			resp, err := s.cli.Put(t.Context(), s.freezeKey(), v)
			if err != nil {
				t.Fatal(err)
			}
			rev := resp.Header.Revision

			f, gotRev, err := s.Freeze(t.Context())
			var ue *store.UnreadableError
			if !errors.As(err, &ue) || ue.Kind != "freeze" || ue.Count != 1 {
				t.Errorf("Freeze of %q = %v, want an UnreadableError of kind freeze", v, err)
			}
			if !f.Frozen || !strings.HasPrefix(f.Reason, "the stored freeze record cannot be read: ") {
				t.Errorf("Freeze of %q = %+v, want frozen, saying why", v, f)
			}
			if gotRev != rev {
				t.Errorf("Freeze of %q at revision %d, want the key's %d", v, gotRev, rev)
			}
			if _, err := s.PutFreeze(t.Context(), thawed, first, storetest.FreezeEntry("thaw", "")); !errors.Is(err, store.ErrConflict) {
				t.Errorf("PutFreeze(the revision before the damage) = %v, want ErrConflict", err)
			}
			next := storetest.MustPutFreeze(t, s, thawed, rev)
			if f, gotRev, err := s.Freeze(t.Context()); err != nil || f.Frozen || f.Reason != thawed.Reason || gotRev != next {
				t.Errorf("Freeze after the replacing write = %+v at %d, %v; want thawed at %d", f, gotRev, err, next)
			}
		})
	}
}
