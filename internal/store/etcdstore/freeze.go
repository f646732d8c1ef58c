package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Freezer = (*Store)(nil)

// freezeKey is the fleet-wide freeze's one key. Watch watches it (as a
// prefix, which only it matches), so every replica sees a freeze another
// one wrote.
func (s *Store) freezeKey() string { return s.prefix + "freeze" }

// Freeze implements store.Freezer with one linearizable read. The
// revision is the key's ModRevision, which etcd keeps whatever the value
// holds: a record that cannot be decoded reads as frozen with an
// *store.UnreadableError at that revision, and a PutFreeze at it replaces
// the record.
func (s *Store) Freeze(ctx context.Context) (store.Freeze, int64, error) {
	v, rev, err := s.get(ctx, s.freezeKey())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Freeze{}, 0, nil
	case err != nil:
		return store.Freeze{}, 0, fmt.Errorf("read the freeze: %w", err)
	}
	f, err := storecodec.DecodeFreeze(v)
	if err != nil {
		f, err = store.UnreadableFreeze(fmt.Errorf("key %q: %w", s.freezeKey(), err))
		return f, rev, err
	}
	return f, rev, nil
}

// PutFreeze implements store.Freezer in one transaction with its audit
// entry, as PutConfig: it compares the key's ModRevision (ifRev 0: the key
// does not exist), and the transaction's revision becomes the freeze's.
// Watch signals on every replica through its watch of the key. An error
// other than ErrConflict leaves the outcome unknown, as PutRelease's.
func (s *Store) PutFreeze(ctx context.Context, f store.Freeze, ifRev int64, a store.AuditEntry) (int64, error) {
	if s.isClosed() {
		return 0, fmt.Errorf("put the freeze: %w", store.ErrClosed)
	}
	b, err := storecodec.EncodeFreeze(f)
	if err != nil {
		return 0, fmt.Errorf("put the freeze: %w", err)
	}
	rev, err := s.put(ctx, s.freezeKey(), string(b), ifRev, a, nil)
	if err != nil {
		return 0, fmt.Errorf("put the freeze: %w", err)
	}
	return rev, nil
}
