package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

// pruneBatch is how many keys one transaction of a prune visits: a read
// transaction held for a page, not the whole bucket, so the file can grow
// (bbolt remaps it only with no reader open), and a write transaction of
// at most this many deletes.
const pruneBatch = 1000

var _ store.Pruner = (*Store)(nil)

// PruneReports implements store.Pruner in transactions of pruneBatch keys.
func (s *Store) PruneReports(ctx context.Context, p store.Prune) (store.Pruned, error) {
	out, err := s.prune(ctx, reportsBucket, p, storecodec.ReportTime)
	if err != nil {
		return out, fmt.Errorf("prune reports: %w", err)
	}
	return out, nil
}

// PruneServed implements store.Pruner as PruneReports does.
func (s *Store) PruneServed(ctx context.Context, p store.Prune) (store.Pruned, error) {
	out, err := s.prune(ctx, servedBucket, p, storecodec.ServedTime)
	if err != nil {
		return out, fmt.Errorf("prune served: %w", err)
	}
	return out, nil
}

// prune deletes the records of bucket p selects, at reading each one's
// time: a first pass of read transactions finds the cutoff (only with
// p.Keep), a second of write transactions deletes, each record's time read
// again in the transaction that deletes it.
func (s *Store) prune(ctx context.Context, bucket string, p store.Prune, at func([]byte) (time.Time, error)) (store.Pruned, error) {
	c := store.NewCutoff(p)
	if c.Scans() {
		err := s.pages(ctx, bucket, s.view, func(b *bolt.Bucket, k, v []byte) error {
			if t, err := at(v); err == nil {
				c.Add(t)
			}
			return nil
		})
		if err != nil {
			return store.Pruned{}, err
		}
	}
	cut, over := c.Time()
	out := store.Pruned{Cutoff: cut, OverKeep: over}
	if cut.IsZero() {
		err := s.view(func(tx *bolt.Tx) error {
			out.Stored = tx.Bucket([]byte(bucket)).Stats().KeyN
			return nil
		})
		return out, mapErr(err)
	}
	var dels [][]byte
	err := s.pages(ctx, bucket, s.update, func(b *bolt.Bucket, k, v []byte) error {
		if t, err := at(v); err == nil && store.Deletes(cut, t) {
			dels = append(dels, k)
			return nil
		}
		out.Stored++
		return nil
	}, func(b *bolt.Bucket) error {
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("delete %q: %w", k, err)
			}
		}
		out.Deleted += len(dels)
		dels = dels[:0]
		return nil
	})
	return out, err
}

// pages calls each for every key of bucket, pruneBatch keys per
// transaction (tx: s.view or s.update), then, in the same transaction,
// every end; keys handed to each are copies, valid after it.
func (s *Store) pages(ctx context.Context, bucket string, tx func(func(*bolt.Tx) error) error, each func(b *bolt.Bucket, k, v []byte) error, end ...func(*bolt.Bucket) error) error {
	var after []byte
	for done := false; !done; {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := tx(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucket))
			cur := b.Cursor()
			k, v := cur.First()
			if after != nil {
				if k, v = cur.Seek(after); k != nil && bytes.Equal(k, after) {
					k, v = cur.Next()
				}
			}
			for n := 0; k != nil && n < pruneBatch; k, v = cur.Next() {
				n++
				after = bytes.Clone(k)
				if err := each(b, after, v); err != nil {
					return err
				}
			}
			done = k == nil
			for _, f := range end {
				if err := f(b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return mapErr(err)
		}
	}
	return nil
}

// PruneSeats implements store.Pruner in one transaction: the seats are a
// canary's size per release, not history.
func (s *Store) PruneSeats(ctx context.Context, drop func(set string) bool) (store.Pruned, error) {
	if err := ctx.Err(); err != nil {
		return store.Pruned{}, fmt.Errorf("prune seats: %w", err)
	}
	var out store.Pruned
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(seatsBucket))
		keep := map[string]bool{}
		var dels [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			// A set's count is keyed by its name, its holders by
			// name+"/"+vmId, its subscriptions' counts by name+"\x00…"
			// (TakeSeat); a name has neither "/" nor NUL.
			set := string(k)
			if i := bytes.IndexAny(k, "/\x00"); i >= 0 {
				set = string(k[:i])
			}
			kept, seen := keep[set]
			if !seen {
				kept = !drop(set)
				keep[set] = kept
				if kept {
					out.Stored++
				} else {
					out.Deleted++
				}
			}
			if !kept {
				dels = append(dels, bytes.Clone(k))
			}
		}
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("delete %q: %w", k, err)
			}
		}
		return nil
	})
	if err != nil {
		return store.Pruned{}, fmt.Errorf("prune seats: %w", mapErr(err))
	}
	return out, nil
}
