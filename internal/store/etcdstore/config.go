package etcdstore

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

func (s *Store) configKey(id string) string { return s.configsPrefix() + id }

// Configs implements store.Store with one linearizable range read. The
// revision is the highest ModRevision among the configurations (0 for
// none).
func (s *Store) Configs(ctx context.Context) ([]rollout.Config, int64, error) {
	if s.isClosed() {
		return nil, 0, fmt.Errorf("list component configs: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.configsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list component configs: %w", s.mapErr(err))
	}
	out := make([]rollout.Config, 0, len(resp.Kvs))
	var rev int64
	for _, kv := range resp.Kvs {
		c, _, err := storecodec.DecodeConfig(kv.Value)
		if err != nil {
			return nil, 0, fmt.Errorf("list component configs: key %q: %w", kv.Key, err)
		}
		out = append(out, c)
		rev = max(rev, kv.ModRevision)
	}
	slices.SortFunc(out, rollout.CompareConfigs)
	return out, rev, nil
}

// Config implements store.Store.
func (s *Store) Config(ctx context.Context, component string, version int64) (rollout.Config, int64, error) {
	id := rollout.ConfigID(component, version)
	v, rev, err := s.get(ctx, s.configKey(id))
	if err != nil {
		return rollout.Config{}, 0, fmt.Errorf("read component config %q: %w", id, err)
	}
	c, _, err := storecodec.DecodeConfig(v)
	if err != nil {
		return rollout.Config{}, 0, fmt.Errorf("read component config %q: %w", id, err)
	}
	return c, rev, nil
}

// PutConfig implements store.Store in one transaction with its audit
// entry, as PutRelease.
func (s *Store) PutConfig(ctx context.Context, c rollout.Config, ifRev int64, a store.AuditEntry) (int64, error) {
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("put component config: %w", err)
	}
	id := c.ID()
	if s.isClosed() {
		return 0, fmt.Errorf("put component config %s: %w", id, store.ErrClosed)
	}
	key := s.configKey(id)
	b, err := storecodec.EncodeConfig(c, 0)
	if err != nil {
		return 0, fmt.Errorf("put component config %s: %w", id, err)
	}
	rev, err := s.put(ctx, key, string(b), ifRev, a, nil)
	if err != nil {
		return 0, fmt.Errorf("put component config %s: %w", id, err)
	}
	return rev, nil
}
