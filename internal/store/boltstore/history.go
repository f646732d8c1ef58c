package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store"
)

// pointsBucket maps version + "/" + a Unix minute (8 bytes, big endian)
// to a history point's data (store.History); no version contains "/".
const pointsBucket = "points"

var _ store.History = (*Store)(nil)

// errNoPoints: a write to a file opened without the points bucket (read
// only, from a release before history).
var errNoPoints = errors.New("the file has no history points bucket (opened read-only?)")

func pointKey(version string, minute int64) []byte {
	return binary.BigEndian.AppendUint64([]byte(version+"/"), uint64(minute))
}

// PutPoints implements store.History in one transaction.
func (s *Store) PutPoints(ctx context.Context, ps []store.Point) error {
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("put history points: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put history points: %w", err)
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(pointsBucket))
		if b == nil {
			return errNoPoints
		}
		for _, p := range ps {
			if err := b.Put(pointKey(p.Version, store.PointMinute(p.Time)), p.Data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put history points: %w", mapErr(err))
	}
	return nil
}

// Points implements store.History, walking back from the version's newest
// key.
func (s *Store) Points(ctx context.Context, version string, limit int) ([]store.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list history points: %w", err)
	}
	limit = store.PointsLimit(limit)
	prefix := []byte(version + "/")
	var out []store.Point
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(pointsBucket))
		if b == nil {
			return nil // a file of a release before history, opened read-only
		}
		c := b.Cursor()
		// The first key after the version's: "/" + 1 is "0".
		var v []byte
		k, _ := c.Seek([]byte(version + "0"))
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, v = c.Prev() {
			if len(k) != len(prefix)+8 {
				continue
			}
			m := int64(binary.BigEndian.Uint64(k[len(prefix):]))
			out = append(out, store.Point{Version: version, Time: time.Unix(m*60, 0).UTC(), Data: slices.Clone(v)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list history points: %w", mapErr(err))
	}
	slices.Reverse(out)
	return out, nil
}

// DeletePoints implements store.History in one transaction: a release
// holds at most a point a minute over its life.
func (s *Store) DeletePoints(ctx context.Context, version string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("delete history points: %w", err)
	}
	prefix := []byte(version + "/")
	n := 0
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(pointsBucket))
		if b == nil {
			return errNoPoints
		}
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
			if err := c.Delete(); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("delete history points: %w", mapErr(err))
	}
	return n, nil
}
