package memstore

import (
	"context"
	"fmt"
	"slices"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

type configEntry struct {
	c   rollout.Config
	rev int64
}

// Configs implements store.Store. The revision is the store-wide one,
// which release writes move too.
func (s *Store) Configs(ctx context.Context) ([]rollout.Config, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, fmt.Errorf("list component configs: %w", store.ErrClosed)
	}
	out := make([]rollout.Config, 0, len(s.configs))
	for _, e := range s.configs {
		out = append(out, cloneConfig(e.c))
	}
	slices.SortFunc(out, rollout.CompareConfigs)
	return out, s.rev, nil
}

// Config implements store.Store.
func (s *Store) Config(ctx context.Context, component string, version int64) (rollout.Config, int64, error) {
	id := rollout.ConfigID(component, version)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return rollout.Config{}, 0, fmt.Errorf("read component config %q: %w", id, store.ErrClosed)
	}
	e, ok := s.configs[id]
	if !ok {
		return rollout.Config{}, 0, fmt.Errorf("read component config %q: %w", id, store.ErrNotFound)
	}
	return cloneConfig(e.c), e.rev, nil
}

// PutConfig implements store.Store.
func (s *Store) PutConfig(ctx context.Context, c rollout.Config, ifRev int64, a store.AuditEntry) (int64, error) {
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("put component config: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("put component config %s: %w", c.ID(), store.ErrClosed)
	}
	if cur := s.configs[c.ID()].rev; cur != ifRev {
		return 0, fmt.Errorf("put component config %s at revision %d (stored %d): %w", c.ID(), ifRev, cur, store.ErrConflict)
	}
	if s.configs == nil {
		s.configs = make(map[string]configEntry)
	}
	s.rev++
	s.configs[c.ID()] = configEntry{c: cloneConfig(c), rev: s.rev}
	a.Seq = int64(len(s.audit)) + 1
	s.audit = append(s.audit, cloneAudit(a))
	s.hub.Notify()
	return s.rev, nil
}

func cloneConfig(c rollout.Config) rollout.Config {
	c.Envelope = cloneRaw(c.Envelope)
	c.Rollout = cloneRollout(c.Rollout)
	return c
}
