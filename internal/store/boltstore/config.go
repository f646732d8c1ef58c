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
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte(configsBucket)).Get([]byte(id))
		if v == nil {
			return store.ErrNotFound
		}
		var err error
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
	var rev int64
	err := s.update(func(tx *bolt.Tx) error {
		configs := tx.Bucket([]byte(configsBucket))
		var cur int64
		if v := configs.Get([]byte(id)); v != nil {
			var err error
			if _, cur, err = storecodec.DecodeConfig(v); err != nil {
				return err
			}
		}
		if cur != ifRev {
			return fmt.Errorf("at revision %d (stored %d): %w", ifRev, cur, store.ErrConflict)
		}
		rev = revision(tx) + 1
		cv, err := storecodec.EncodeConfig(c, rev)
		if err != nil {
			return err
		}
		if err := configs.Put([]byte(id), cv); err != nil {
			return err
		}
		if err := tx.Bucket([]byte(metaBucket)).Put([]byte(revisionKey), uint64Key(uint64(rev))); err != nil {
			return err
		}
		audit := tx.Bucket([]byte(auditBucket))
		seq, err := audit.NextSequence()
		if err != nil {
			return err
		}
		a.Seq = int64(seq)
		av, err := storecodec.EncodeAudit(a)
		if err != nil {
			return err
		}
		return audit.Put(uint64Key(seq), av)
	})
	if err != nil {
		return 0, fmt.Errorf("put component config %s: %w", id, mapErr(err))
	}
	s.hub.Notify()
	return rev, nil
}
