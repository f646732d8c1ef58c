package boltstore

import (
	"fmt"
	"hash/maphash"
	"sync"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store/kept"
)

// decoded keeps what the last list of one bucket decoded (Reports,
// Served), by key, with a hash of the bytes it decoded, so that the next
// list decodes only the values that differ: a look's cost was mostly
// decoding every kept record, and hashing a record's bytes costs a small
// part of decoding them. The hash is seeded at random per process
// (hash/maphash), so no writer of a value can aim at another's hash, and
// 64 bits cost 8 bytes a record where a copy of the value cost hundreds.
// The entries are exactly the bucket's keys at the last list that
// succeeded (each kept, after one that failed, true of the value it
// hashed); lists of one bucket take turns (mu).
type decoded[T any] struct {
	bucket string
	decode func([]byte) (T, error)
	what   string // names a key in a decode error: "report", "served"
	seed   maphash.Seed

	mu      sync.Mutex
	entries *kept.Set[T] // tagged with the hash of the value decoded
	lists   uint64       // lists begun, marking the entries each found
}

// newDecoded returns the decoded values of bucket, listed in cmp order.
func newDecoded[T any](bucket, what string, decode func([]byte) (T, error), cmp func(a, b T) int) *decoded[T] {
	return &decoded[T]{bucket: bucket, decode: decode, what: what, seed: maphash.MakeSeed(), entries: kept.New(cmp)}
}

// list returns every value in the bucket, decoded, in cmp order, and the
// decode errors of the keys that could not be (each naming its key, in
// key order).
func (c *decoded[T]) list(tx *bolt.Tx) ([]T, []error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lists++
	found := 0
	err := tx.Bucket([]byte(c.bucket)).ForEach(func(k, v []byte) error {
		found++
		sum := maphash.Bytes(c.seed, v)
		if e := c.entries.Get(string(k)); e != nil && e.Tag == sum {
			e.Mark = c.lists
			return nil
		}
		v2, err := c.decode(v)
		c.entries.Put(string(k), kept.Entry[T]{Tag: sum, Mark: c.lists, V: v2, Err: err})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if found != c.entries.Len() {
		c.entries.DeleteUnmarked(c.lists) // gone since the last list
	}
	out, badKeys := c.entries.List()
	bad := make([]error, len(badKeys))
	for i, k := range badKeys {
		bad[i] = fmt.Errorf("%s %q: %w", c.what, k, c.entries.Get(k).Err)
	}
	return out, bad, nil
}
