package etcdstore

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// decoded keeps what the last list of one prefix decoded (Reports,
// Served), by key and ModRevision, so that the next list decodes only the
// keys written since: it reads the prefix's keys without their values,
// then the values of the keys that changed, both at one revision, and
// reuses the rest. A look's cost was mostly decoding every kept record;
// with this it is mostly the keys' listing.
//
// The entries are exactly the prefix's keys at rev in cluster after a
// list that succeeded; a list that fails leaves them as they were, still
// true of that revision. A revision below rev, or another cluster's ID
// (a cluster restored from a snapshot behind the same endpoints), drops
// them: revisions are then handed out again, and one key's ModRevision
// may name another value. Lists of one prefix take turns (sem), and one
// waiting for its turn gives up when its context ends.
type decoded[T any] struct {
	prefix string
	decode func([]byte) (T, error)

	sem     chan struct{} // one slot: the list running
	rev     int64         // the revision the entries are of; 0: none
	cluster uint64
	byKey   map[string]entry[T]
}

type entry[T any] struct {
	mod int64 // the key's ModRevision when decoded
	v   T
	err error // the decode error, kept so the key is reported again
}

func newDecoded[T any](prefix string, decode func([]byte) (T, error)) *decoded[T] {
	return &decoded[T]{prefix: prefix, decode: decode, sem: make(chan struct{}, 1)}
}

// maxChangedGets is how many changed keys a list fetches one by one (in
// transactions of maxReportsPerTxn gets); with more it reads every value
// again, in pages, decoding only the changed ones.
const maxChangedGets = 2048

// list returns every value under the prefix, decoded, and the decode
// errors of the keys that could not be (each naming its key, in key
// order), at one revision.
func (c *decoded[T]) list(ctx context.Context, s *Store) ([]T, []error, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-c.sem }()
	next, at, err := c.read(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	c.byKey, c.rev, c.cluster = next, at.rev, at.cluster
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

// read returns the entries of the prefix now and where they were read;
// it changes nothing of c.
func (c *decoded[T]) read(ctx context.Context, s *Store) (map[string]entry[T], readPoint, error) {
	var at readPoint
	if c.rev == 0 {
		return c.readAll(ctx, s, at, nil)
	}
	next := make(map[string]entry[T], len(c.byKey))
	changed := map[string]bool{}
	err := s.scanAt(ctx, c.prefix, &at, true, func(kv *mvccpb.KeyValue) error {
		k := string(kv.Key)
		if e, ok := c.byKey[k]; ok && e.mod == kv.ModRevision {
			next[k] = e
		} else {
			changed[k] = true
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, at, err
	case at.rev < c.rev || at.cluster != c.cluster:
		// Not the history the entries are of: read it all, at the
		// revision the keys were listed at.
		return c.readAll(ctx, s, readPoint{rev: at.rev}, nil)
	case len(changed) > maxChangedGets:
		return c.readAll(ctx, s, at, next)
	}
	keys := make([]string, 0, len(changed))
	for k := range changed {
		keys = append(keys, k)
	}
	for chunk := range slices.Chunk(keys, maxReportsPerTxn) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k, clientv3.WithRev(at.rev))
		}
		tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		resp, err := s.cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, at, s.mapErr(err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				next[string(kv.Key)] = c.entry(kv)
			}
		}
	}
	for _, k := range keys {
		if _, ok := next[k]; !ok {
			// At one revision a key listed is there to read.
			return nil, at, fmt.Errorf("key %q listed at revision %d but not read at it", k, at.rev)
		}
	}
	return next, at, nil
}

// readAll reads every value under the prefix in pages at at.rev (0: the
// current revision), decoding those not already in kept, the entries
// already read at that revision.
func (c *decoded[T]) readAll(ctx context.Context, s *Store, at readPoint, kept map[string]entry[T]) (map[string]entry[T], readPoint, error) {
	next := make(map[string]entry[T], max(len(kept), len(c.byKey)))
	err := s.scanAt(ctx, c.prefix, &at, false, func(kv *mvccpb.KeyValue) error {
		k := string(kv.Key)
		if e, ok := kept[k]; ok && e.mod == kv.ModRevision {
			next[k] = e
		} else {
			next[k] = c.entry(kv)
		}
		return nil
	})
	if err != nil {
		return nil, at, err
	}
	return next, at, nil
}

func (c *decoded[T]) entry(kv *mvccpb.KeyValue) entry[T] {
	v, err := c.decode(kv.Value)
	return entry[T]{mod: kv.ModRevision, v: v, err: err}
}
