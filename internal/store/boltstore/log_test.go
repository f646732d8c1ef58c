package boltstore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/storetest"
)

func key(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// logFile returns a closed store file whose log holds three releases'
// records and key sets 1 to 3, and those records.
func logFile(t *testing.T) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
		storetest.MustPutLogged(t, s, storetest.Release(v), 0, storetest.Record(v))
		want = append(want, storetest.Record(v))
	}
	for v := int64(1); v <= 3; v++ {
		if err := s.PutKeySet(t.Context(), storetest.KeySet(v), storetest.Entry("keyset", fmt.Sprint(v))); err != nil {
			t.Fatal(err)
		}
		want = append(want, storetest.KeySet(v).Envelope)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, want
}

// damage changes the closed file at path with fn.
func damage(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLogReopen(t *testing.T) {
	t.Parallel()
	path, want := logFile(t)
	s := mustOpen(t, path)
	storetest.CheckLog(t, s, want)
	storetest.MustPutLogged(t, s, storetest.Release("202604.01.4"), 0, storetest.Record("202604.01.4"))
	storetest.CheckLog(t, s, append(want, storetest.Record("202604.01.4")))
	if err := s.PutKeySet(t.Context(), storetest.KeySet(4), storetest.Entry("keyset", "4")); err != nil {
		t.Errorf("PutKeySet(4) after reopen = %v", err)
	}
}

// TestLogDamage: a damaged hash, record, key set or size is an error (a
// key set: an UnreadableError beside the others), never a zero hash, a
// shifted list or an overwritten record.
func TestLogDamage(t *testing.T) {
	t.Parallel()
	t.Run("short-hash", func(t *testing.T) {
		t.Parallel()
		path, _ := logFile(t)
		damage(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("log-hashes")).Put(key(1), []byte("short")) })
		s := mustOpen(t, path)
		if _, err := s.LogHashes(t.Context(), []int64{1}); !errors.Is(err, boltstore.ErrDamaged) {
			t.Errorf("LogHashes(a 5-byte hash) = %v, want ErrDamaged", err)
		}
	})
	t.Run("missing-record", func(t *testing.T) {
		t.Parallel()
		path, _ := logFile(t)
		damage(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("log-records")).Delete(key(1)) })
		s := mustOpen(t, path)
		if got, err := s.LogRecords(t.Context(), 0, 3); !errors.Is(err, boltstore.ErrDamaged) {
			t.Errorf("LogRecords over a missing record = %d records, %v; want ErrDamaged", len(got), err)
		}
	})
	t.Run("size-reset", func(t *testing.T) {
		t.Parallel()
		path, _ := logFile(t)
		damage(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("log-size"), key(1)) })
		s := mustOpen(t, path)
		r := storetest.Release("202604.01.4")
		if _, err := s.PutRelease(t.Context(), r, 0, storetest.Entry("publish", r.Version), storetest.Record(r.Version)); !errors.Is(err, boltstore.ErrDamaged) {
			t.Errorf("PutRelease with the log size reset = %v, want ErrDamaged", err)
		}
		if _, _, err := s.Release(t.Context(), r.Version); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Release after the refused write = %v, want ErrNotFound", err)
		}
	})
	t.Run("unreadable-key-set", func(t *testing.T) {
		t.Parallel()
		path, _ := logFile(t)
		damage(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("keysets")).Put(key(2), []byte(`{"v":9}`)) })
		s := mustOpen(t, path)
		got, err := s.KeySets(t.Context())
		var ue *store.UnreadableError
		if !errors.As(err, &ue) || ue.Kind != "key set" || !slices.Equal(ue.Keys, []string{"2"}) {
			t.Errorf("KeySets = %v, want an UnreadableError naming version 2", err)
		}
		if len(got) != 2 || got[0].Version != 1 || got[1].Version != 3 {
			t.Errorf("KeySets = %+v, want versions 1 and 3", got)
		}
		if err := s.PutKeySet(t.Context(), storetest.KeySet(4), storetest.Entry("keyset", "4")); err != nil {
			t.Errorf("PutKeySet(4) beside an unreadable 2 = %v", err)
		}
	})
}
