package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// decoded keeps what the last list of one prefix decoded (Reports,
// Served), by key and ModRevision, so that the next list decodes only the
// keys written since: it reads the prefix's keys without their values,
// then the values of the keys that changed, both at one revision, and
// reuses the rest. A look's cost was mostly decoding every kept record;
// with this it is mostly the keys' listing. The entries are exactly the
// prefix's keys at rev after a list that succeeded; a list that fails
// leaves the cache empty, and the next one reads every value, as the
// first does. Lists of one prefix take turns (mu).
type decoded[T any] struct {
	prefix string
	decode func([]byte) (T, error)

	mu    sync.Mutex
	rev   int64 // the revision the entries are of; 0: none
	byKey map[string]entry[T]
}

type entry[T any] struct {
	mod int64 // the key's ModRevision when decoded
	v   T
	err error // the decode error, kept so the key is reported again
}

// maxChangedGets is how many changed keys a list fetches one by one (in
// transactions of maxReportsPerTxn gets); more are read with one range
// filtered by ModRevision, which etcd serves by reading every value under
// the prefix, sparing only their transfer and decoding.
const maxChangedGets = 2048

// list returns every value under the prefix, decoded, and the decode
// errors of the keys that could not be (each naming its key), at one
// revision.
func (c *decoded[T]) list(ctx context.Context, s *Store) ([]T, []error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := c.read(ctx, s)
	if err != nil {
		c.rev, c.byKey = 0, nil
		return nil, nil, err
	}
	c.byKey = next
	out := make([]T, 0, len(next))
	var badKeys []string
	for k, e := range next {
		if e.err != nil {
			badKeys = append(badKeys, k)
			continue
		}
		out = append(out, e.v)
	}
	slices.Sort(badKeys) // the first reported is the first key, as a scan finds it
	bad := make([]error, len(badKeys))
	for i, k := range badKeys {
		bad[i] = fmt.Errorf("key %q: %w", k, next[k].err)
	}
	return out, bad, nil
}

// read returns the entries of the prefix now, and sets c.rev to their
// revision.
func (c *decoded[T]) read(ctx context.Context, s *Store) (map[string]entry[T], error) {
	next := make(map[string]entry[T], len(c.byKey))
	if c.rev == 0 {
		// Nothing kept: every value, as the pages come.
		var rev int64
		err := s.scanAt(ctx, c.prefix, &rev, false, func(kv *mvccpb.KeyValue) error {
			next[string(kv.Key)] = c.entry(kv)
			return nil
		})
		if err != nil {
			return nil, err
		}
		c.rev = rev
		return next, nil
	}
	var rev int64
	var changed []string
	err := s.scanAt(ctx, c.prefix, &rev, true, func(kv *mvccpb.KeyValue) error {
		k := string(kv.Key)
		if e, ok := c.byKey[k]; ok && e.mod == kv.ModRevision {
			next[k] = e
		} else {
			changed = append(changed, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := c.fetch(ctx, s, rev, changed, next); err != nil {
		return nil, err
	}
	c.rev = rev
	return next, nil
}

// fetch decodes the values of keys at rev into next.
func (c *decoded[T]) fetch(ctx context.Context, s *Store, rev int64, keys []string, next map[string]entry[T]) error {
	if len(keys) == 0 {
		return nil
	}
	if len(keys) > maxChangedGets {
		ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		defer cancel()
		// Every key written after the last list, at rev: those that
		// changed, and none kept unchanged.
		resp, err := s.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithMinModRev(c.rev+1))
		if err != nil {
			return s.mapErr(err)
		}
		for _, kv := range resp.Kvs {
			next[string(kv.Key)] = c.entry(kv)
		}
		return c.complete(keys, next)
	}
	for chunk := range slices.Chunk(keys, maxReportsPerTxn) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k, clientv3.WithRev(rev))
		}
		tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		resp, err := s.cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return s.mapErr(err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				next[string(kv.Key)] = c.entry(kv)
			}
		}
	}
	return c.complete(keys, next)
}

// complete checks that every changed key was read: at one revision a key
// listed is there to read, so one missing means the reads disagreed.
func (c *decoded[T]) complete(keys []string, next map[string]entry[T]) error {
	for _, k := range keys {
		if _, ok := next[k]; !ok {
			return fmt.Errorf("key %q listed at a revision but not read at it", k)
		}
	}
	return nil
}

func (c *decoded[T]) entry(kv *mvccpb.KeyValue) entry[T] {
	v, err := c.decode(kv.Value)
	return entry[T]{mod: kv.ModRevision, v: v, err: err}
}
