package memstore

import (
	"context"
	"fmt"

	"nodehotfix/internal/store"
)

var _ store.Freezer = (*Store)(nil)

// freezeKey is the freeze's key among the store's singleton records.
const freezeKey = "freeze"

// Freeze implements store.Freezer.
func (s *Store) Freeze(ctx context.Context) (store.Freeze, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Freeze{}, 0, fmt.Errorf("read the freeze: %w", store.ErrClosed)
	}
	e := s.freeze[freezeKey]
	return e.v, e.rev, nil
}

// PutFreeze implements store.Freezer.
func (s *Store) PutFreeze(ctx context.Context, f store.Freeze, ifRev int64, a store.AuditEntry) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("put the freeze: %w", store.ErrClosed)
	}
	if s.freeze == nil {
		s.freeze = make(map[string]entry[store.Freeze])
	}
	rev, err := put(s, s.freeze, freezeKey, f, ifRev, a, nil)
	if err != nil {
		return 0, fmt.Errorf("put the freeze %w", err)
	}
	return rev, nil
}
