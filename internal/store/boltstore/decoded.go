package boltstore

import (
	"fmt"
	"hash/maphash"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// decoded keeps what the last list of one bucket decoded (Reports,
// Served), by key, with a hash of the bytes it decoded, so that the next
// list decodes only the values that differ: a look's cost was mostly
// decoding every kept record, and hashing a record's bytes costs a small
// part of decoding them. The hash is seeded at random per process
// (hash/maphash), so no writer of a value can aim at another's hash, and
// 64 bits cost 8 bytes a record where a copy of the value cost hundreds.
// The entries are exactly the bucket's keys at the last list that
// succeeded; lists of one bucket take turns (mu), and each updates the
// entries in place (a new map per list cost more than the hashing).
type decoded[T any] struct {
	bucket string
	decode func([]byte) (T, error)
	what   string // names a key in a decode error: "report", "served"
	seed   maphash.Seed

	mu    sync.Mutex
	byKey map[string]*entry[T]
	lists uint64 // lists begun, numbering each entry's last
}

type entry[T any] struct {
	sum  uint64 // maphash of the value decoded
	seen uint64 // the list that last found the key
	v    T
	err  error
}

// list returns every value in the bucket, decoded, and the decode errors
// of the keys that could not be (each naming its key, in key order).
func (c *decoded[T]) list(tx *bolt.Tx) ([]T, []error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[string]*entry[T]{}
	}
	c.lists++
	out := make([]T, 0, len(c.byKey))
	var bad []error
	found := 0
	err := tx.Bucket([]byte(c.bucket)).ForEach(func(k, v []byte) error {
		found++
		sum := maphash.Bytes(c.seed, v)
		e, ok := c.byKey[string(k)]
		if !ok {
			e = &entry[T]{}
			c.byKey[string(k)] = e
		}
		if !ok || e.sum != sum {
			e.sum = sum
			e.v, e.err = c.decode(v)
		}
		e.seen = c.lists
		if e.err != nil {
			bad = append(bad, fmt.Errorf("%s %q: %w", c.what, k, e.err))
			return nil
		}
		out = append(out, e.v)
		return nil
	})
	if err != nil {
		// The entries are still true of the values they hashed.
		return nil, nil, err
	}
	if found != len(c.byKey) {
		for k, e := range c.byKey {
			if e.seen != c.lists {
				delete(c.byKey, k) // gone since the last list
			}
		}
	}
	return out, bad, nil
}
