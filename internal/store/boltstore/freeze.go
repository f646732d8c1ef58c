package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Freezer = (*Store)(nil)

// Freeze implements store.Freezer. A record that cannot be decoded, or a
// revision without its record, reads as frozen with an
// *store.UnreadableError, at the revision stored (0 if that is unreadable
// too), which a PutFreeze replacing it compares against.
func (s *Store) Freeze(ctx context.Context) (store.Freeze, int64, error) {
	var (
		f   store.Freeze
		rev int64
		bad error
	)
	err := s.view(func(tx *bolt.Tx) error {
		f, rev, bad = storedFreeze(tx)
		return nil
	})
	if err != nil {
		return store.Freeze{}, 0, fmt.Errorf("read the freeze: %w", mapErr(err))
	}
	return f, rev, bad
}

// storedFreeze reads the freeze and its revision from the meta bucket:
// the zero Freeze and 0 when neither key is there. unreadable is the
// *store.UnreadableError of a record that cannot be read, with f the
// frozen stand-in store.UnreadableFreeze makes.
func storedFreeze(tx *bolt.Tx) (f store.Freeze, rev int64, unreadable error) {
	meta := tx.Bucket([]byte(metaBucket))
	v, rv := meta.Get([]byte(freezeKey)), meta.Get([]byte(freezeRevisionKey))
	if v == nil && rv == nil {
		return store.Freeze{}, 0, nil
	}
	var err error
	switch {
	case len(rv) != 8:
		err = fmt.Errorf("freeze revision of %d bytes, want 8", len(rv))
	case v == nil:
		err = fmt.Errorf("no freeze record at revision %d", binary.BigEndian.Uint64(rv))
	}
	if len(rv) == 8 {
		rev = int64(binary.BigEndian.Uint64(rv))
	}
	if err == nil {
		if f, err = storecodec.DecodeFreeze(v); err == nil {
			return f, rev, nil
		}
	}
	f, unreadable = store.UnreadableFreeze(fmt.Errorf("key %q in bucket %q: %w", freezeKey, metaBucket, err))
	return f, rev, unreadable
}

// PutFreeze implements store.Freezer in one transaction that compares the
// freeze's revision, puts the record and its revision, moves the
// store-wide revision to it and appends a, as PutConfig does; then it
// signals Watch. The record may be unreadable: it is replaced at the
// revision Freeze returned for it, so a freeze nobody can read can still
// be thawed.
func (s *Store) PutFreeze(ctx context.Context, f store.Freeze, ifRev int64, a store.AuditEntry) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("put the freeze: %w", err)
	}
	fv, err := storecodec.EncodeFreeze(f)
	if err != nil {
		return 0, fmt.Errorf("put the freeze: %w", err)
	}
	var rev int64
	err = s.update(func(tx *bolt.Tx) error {
		if _, cur, _ := storedFreeze(tx); cur != ifRev {
			return fmt.Errorf("at revision %d (stored %d): %w", ifRev, cur, store.ErrConflict)
		}
		rev = revision(tx) + 1
		meta := tx.Bucket([]byte(metaBucket))
		for _, kv := range []struct{ k, v []byte }{
			{[]byte(freezeKey), fv},
			{[]byte(freezeRevisionKey), uint64Key(uint64(rev))},
			{[]byte(revisionKey), uint64Key(uint64(rev))},
		} {
			if err := meta.Put(kv.k, kv.v); err != nil {
				return err
			}
		}
		return appendAudit(tx, a)
	})
	if err != nil {
		return 0, fmt.Errorf("put the freeze: %w", mapErr(err))
	}
	s.hub.Notify()
	return rev, nil
}
