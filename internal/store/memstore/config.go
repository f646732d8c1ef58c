package memstore

import (
	"context"
	"fmt"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Configs implements store.Store. The revision is the store-wide one,
// which release writes move too.
func (s *Store) Configs(ctx context.Context) ([]rollout.Config, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := list(s, s.configs, cloneConfig, rollout.CompareConfigs)
	if err != nil {
		return nil, 0, fmt.Errorf("list component configs: %w", err)
	}
	return out, s.rev, nil
}

// Config implements store.Store.
func (s *Store) Config(ctx context.Context, component string, version int64) (rollout.Config, int64, error) {
	id := rollout.ConfigID(component, version)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := get(s, s.configs, id)
	if err != nil {
		return rollout.Config{}, 0, fmt.Errorf("read component config %q: %w", id, err)
	}
	return cloneConfig(e.v), e.rev, nil
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
	if s.configs == nil {
		s.configs = make(map[string]entry[rollout.Config])
	}
	rev, err := put(s, s.configs, c.ID(), cloneConfig(c), ifRev, a, nil)
	if err != nil {
		return 0, fmt.Errorf("put component config %s %w", c.ID(), err)
	}
	return rev, nil
}

func cloneConfig(c rollout.Config) rollout.Config {
	c.Envelope = cloneRaw(c.Envelope)
	c.Rollout = cloneRollout(c.Rollout)
	return c
}
