package boltstore

import (
	"context"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

// Configs implements store.Store. The revision is the store-wide one,
// which release writes move too.
func (s *Store) Configs(ctx context.Context) ([]rollout.Config, int64, error) {
	var (
		out []rollout.Config
		rev int64
	)
	err := s.view(func(tx *bolt.Tx) error {
		rev = revision(tx)
		return tx.Bucket([]byte(configsBucket)).ForEach(func(k, v []byte) error {
			c, _, err := storecodec.DecodeConfig(v)
			if err != nil {
				return fmt.Errorf("component config %q: %w", k, err)
			}
			out = append(out, c)
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list component configs: %w", mapErr(err))
	}
	slices.SortFunc(out, rollout.CompareConfigs)
	return out, rev, nil
}

// Config implements store.Store.
func (s *Store) Config(ctx context.Context, component string, version int64) (rollout.Config, int64, error) {
	id := rollout.ConfigID(component, version)
	var (
		c   rollout.Config
		rev int64
	)
	err := s.get(configsBucket, id, func(v []byte) (err error) {
		c, rev, err = storecodec.DecodeConfig(v)
		return err
	})
	if err != nil {
		return rollout.Config{}, 0, fmt.Errorf("read component config %q: %w", id, mapErr(err))
	}
	return c, rev, nil
}

// PutConfig implements store.Store.
func (s *Store) PutConfig(ctx context.Context, c rollout.Config, ifRev int64, a store.AuditEntry) (int64, error) {
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("put component config: %w", err)
	}
	id := c.ID()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("put component config %s: %w", id, err)
	}
	rev, err := s.put(configsBucket, id, ifRev, a, nil, func(v []byte) (int64, error) {
		_, cur, err := storecodec.DecodeConfig(v)
		return cur, err
	}, func(rev int64) ([]byte, error) { return storecodec.EncodeConfig(c, rev) })
	if err != nil {
		return 0, fmt.Errorf("put component config %s: %w", id, mapErr(err))
	}
	s.hub.Notify()
	return rev, nil
}
