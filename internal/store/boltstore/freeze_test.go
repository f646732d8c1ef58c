package boltstore_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storetest"
)

func TestFreeze(t *testing.T) {
	storetest.RunFreeze(t, func(t *testing.T) store.Store { return mustOpen(t, filepath.Join(t.TempDir(), "lpsd.db")) })
}

// TestFreezeDamage: a freeze record this lpsd cannot read (garbage, a
// newer encoding, gone from under its revision, or with its revision
// damaged) reads as frozen with an UnreadableError, never as the zero
// freeze that lets rollouts advance; and a write at the revision it reads
// at replaces it, so it can be thawed without editing the file.
func TestFreezeDamage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key string
		value     []byte // nil: the key is deleted
		zeroRev   bool   // the revision is the damaged key: it reads as 0
	}{
		{"garbage", "freeze", []byte("\x00\xffnot a record"), false},
		{"newer-encoding", "freeze", []byte(`{"v":2,"freeze":{"frozen":false}}`), false},
		{"record-gone", "freeze", nil, false},
		{"revision-damaged", "freeze-revision", []byte("abc"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "lpsd.db")
			s := mustOpen(t, path)
			storetest.MustPut(t, s, storetest.Release("202604.01.1"), 0)
			thawed := store.Freeze{Reason: "not frozen"}
			rev := storetest.MustPutFreeze(t, s, thawed, 0)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			damage(t, path, func(tx *bolt.Tx) error {
				if tt.value == nil {
					return tx.Bucket([]byte("meta")).Delete([]byte(tt.key))
				}
				return tx.Bucket([]byte("meta")).Put([]byte(tt.key), tt.value)
			})
			if tt.zeroRev {
				rev = 0
			}

			s = mustOpen(t, path)
			f, gotRev, err := s.Freeze(t.Context())
			var ue *store.UnreadableError
			if !errors.As(err, &ue) || ue.Kind != "freeze" || ue.Count != 1 {
				t.Errorf("Freeze of a damaged record = %v, want an UnreadableError of kind freeze", err)
			}
			if !f.Frozen || !strings.HasPrefix(f.Reason, "the stored freeze record cannot be read: ") {
				t.Errorf("Freeze of a damaged record = %+v, want frozen, saying why", f)
			}
			if gotRev != rev {
				t.Errorf("Freeze of a damaged record at revision %d, want %d", gotRev, rev)
			}
			if _, err := s.PutFreeze(t.Context(), thawed, rev+1, storetest.FreezeEntry("thaw", "")); !errors.Is(err, store.ErrConflict) {
				t.Errorf("PutFreeze(another revision) over a damaged record = %v, want ErrConflict", err)
			}
			next, err := s.PutFreeze(t.Context(), thawed, rev, storetest.FreezeEntry("thaw", "replace the damaged record"))
			if err != nil {
				t.Fatalf("PutFreeze(the revision read) over a damaged record = %v", err)
			}
			f, gotRev, err = s.Freeze(t.Context())
			if err != nil || f.Frozen || f.Reason != thawed.Reason || gotRev != next {
				t.Errorf("Freeze after the replacing write = %+v at %d, %v; want thawed at %d", f, gotRev, err, next)
			}
			// The release beside it was never affected.
			if _, _, err := s.Release(t.Context(), "202604.01.1"); err != nil {
				t.Errorf("Release beside a damaged freeze = %v", err)
			}
		})
	}
}
