package etcdstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storetest"
)

func mustOpenPrefix(t *testing.T, endpoints []string, prefix string) *Store {
	t.Helper()
	s, err := Open(t.Context(), endpoints, Config{Prefix: prefix})
	if err != nil {
		t.Fatalf("Open(%v) = %v", endpoints, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestIntegrationReplicasShareLog appends from two replicas (two clients
// of one etcd) at once: one log, every record exactly once, the same to
// both, and one winner of a key-set version both put.
func TestIntegrationReplicasShareLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	replicas := []*Store{mustOpenPrefix(t, endpoints, "/shared/"), mustOpenPrefix(t, endpoints, "/shared/")}
	const perReplica, each = 4, 3
	var (
		mu     sync.Mutex
		want   [][]byte
		wg     sync.WaitGroup
		ksWins int
	)
	for ri, s := range replicas {
		for w := range perReplica {
			wg.Go(func() {
				for i := range each {
					v := fmt.Sprintf("2026%02d.%02d.%d", ri+1, w+1, i+1)
					if _, err := s.PutRelease(t.Context(), storetest.Release(v), 0, storetest.Entry("publish", v), storetest.Record(v)); err != nil {
						t.Errorf("replica %d: PutRelease(%s) = %v", ri, v, err)
						continue
					}
					mu.Lock()
					want = append(want, storetest.Record(v))
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			k := storetest.KeySet(1)
			k.Envelope = fmt.Appendf(k.Envelope, " from replica %d", ri)
			err := s.PutKeySet(t.Context(), k, storetest.Entry("keyset", "1"))
			if err != nil && !errors.Is(err, store.ErrConflict) {
				t.Errorf("replica %d: PutKeySet(1) = %v, want nil or ErrConflict", ri, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ksWins++
				want = append(want, k.Envelope)
			}
		})
	}
	wg.Wait()
	if ksWins != 1 {
		t.Errorf("%d replicas stored key-set version 1, want 1", ksWins)
	}
	for _, s := range replicas {
		storetest.CheckLogOnce(t, s, want)
	}
	audit, err := replicas[0].Audit(t.Context(), 0, 1000)
	if err != nil || len(audit) != len(want) {
		t.Errorf("Audit = %d entries, %v; want one per logged write, %d", len(audit), err, len(want))
	}
}

// TestIntegrationLogDamage writes what no Store writes under the log's
// keys: a damaged hash, record, key set or size is an error (or, for a key
// set, an UnreadableError beside the others), never a zero hash, a
// shifted list or an overwritten record.
func TestIntegrationLogDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	var n int
	setup := func(t *testing.T) *Store {
		n++
		s := mustOpenPrefix(t, endpoints, fmt.Sprintf("/damage/%d/", n))
		for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
			storetest.MustPutLogged(t, s, storetest.Release(v), 0, storetest.Record(v))
		}
		return s
	}
	put := func(t *testing.T, s *Store, k, v string) {
		t.Helper()
		if _, err := s.cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("short-hash", func(t *testing.T) {
		s := setup(t)
		put(t, s, s.logHashKey(1), "short")
		if _, err := s.LogHashes(t.Context(), []int64{0, 1}); err == nil || errors.Is(err, store.ErrLogRange) {
			t.Errorf("LogHashes(a 5-byte hash) = %v, want a damage error", err)
		}
	})
	t.Run("missing-hash", func(t *testing.T) {
		s := setup(t)
		if _, err := s.cli.Delete(t.Context(), s.logHashKey(2)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LogHashes(t.Context(), []int64{2}); err == nil || errors.Is(err, store.ErrLogRange) {
			t.Errorf("LogHashes(a missing hash) = %v, want a damage error", err)
		}
		// An append that needs it fails rather than hash a zero.
		r := storetest.Release("202604.01.4")
		if _, err := s.PutRelease(t.Context(), r, 0, storetest.Entry("publish", r.Version), storetest.Record(r.Version)); err == nil {
			t.Error("PutRelease over a missing hash = nil error")
		}
	})
	t.Run("missing-record", func(t *testing.T) {
		s := setup(t)
		if _, err := s.cli.Delete(t.Context(), s.logRecordKey(1)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.LogRecords(t.Context(), 0, 3); err == nil {
			t.Errorf("LogRecords over a missing record = %d records, nil error", len(got))
		}
	})
	t.Run("record-encoding", func(t *testing.T) {
		s := setup(t)
		put(t, s, s.logRecordKey(1), "\x02later")
		if _, err := s.LogRecords(t.Context(), 1, 2); err == nil {
			t.Error("LogRecords(another encoding version) = nil error")
		}
	})
	t.Run("size-reset", func(t *testing.T) {
		s := setup(t)
		put(t, s, s.logSizeKey(), "1")
		r := storetest.Release("202604.01.4")
		if _, err := s.PutRelease(t.Context(), r, 0, storetest.Entry("publish", r.Version), storetest.Record(r.Version)); err == nil {
			t.Error("PutRelease with the log size reset = nil error, want a refusal")
		}
		if _, _, err := s.Release(t.Context(), r.Version); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Release after the refused write = %v, want ErrNotFound", err)
		}
		resp, err := s.cli.Get(t.Context(), s.logRecordKey(1))
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value[1:]) != string(storetest.Record("202604.01.2")) {
			t.Errorf("record 1 = %v, %v; want it unchanged", resp, err)
		}
	})
	t.Run("unreadable-key-set", func(t *testing.T) {
		s := setup(t)
		for v := int64(1); v <= 3; v++ {
			if err := s.PutKeySet(t.Context(), storetest.KeySet(v), storetest.Entry("keyset", fmt.Sprint(v))); err != nil {
				t.Fatal(err)
			}
		}
		put(t, s, s.keySetKey(2), `{"v":9}`)
		got, err := s.KeySets(t.Context())
		var ue *store.UnreadableError
		if !errors.As(err, &ue) || ue.Count != 1 || !cmp.Equal(ue.Keys, []string{"2"}) {
			t.Errorf("KeySets = %v, want an UnreadableError for version 2", err)
		}
		if diff := cmp.Diff([]store.KeySetRecord{storetest.KeySet(1), storetest.KeySet(3)}, got); diff != "" {
			t.Errorf("KeySets readable (-want +got):\n%s", diff)
		}
		// The version check reads keys, not values: 4 still comes next.
		if err := s.PutKeySet(t.Context(), storetest.KeySet(3), storetest.Entry("keyset", "3")); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutKeySet(3 again) = %v, want ErrConflict", err)
		}
		if err := s.PutKeySet(t.Context(), storetest.KeySet(4), storetest.Entry("keyset", "4")); err != nil {
			t.Errorf("PutKeySet(4) = %v", err)
		}
	})
}
