package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Pruner = (*Store)(nil)

// PruneReports implements store.Pruner: range reads of reportsPageSize
// keys, then transactions of at most maxReportsPerTxn/2 deletes, each
// nested in a compare of the key's ModRevision to the one read, so a
// report replaced meanwhile (by any replica) stays. Every read and
// transaction is bounded by the request timeout.
func (s *Store) PruneReports(ctx context.Context, p store.Prune) (store.Pruned, error) {
	out, err := s.prune(ctx, s.reportsPrefix(), p, storecodec.ReportTime)
	if err != nil {
		return out, fmt.Errorf("prune reports: %w", err)
	}
	return out, nil
}

// PruneServed implements store.Pruner as PruneReports does.
func (s *Store) PruneServed(ctx context.Context, p store.Prune) (store.Pruned, error) {
	out, err := s.prune(ctx, s.servedPrefix(), p, storecodec.ServedTime)
	if err != nil {
		return out, fmt.Errorf("prune served: %w", err)
	}
	return out, nil
}

// prune deletes the records under prefix that p selects by the time at
// reads from each value.
func (s *Store) prune(ctx context.Context, prefix string, p store.Prune, at func([]byte) (time.Time, error)) (store.Pruned, error) {
	c := store.NewCutoff(p)
	if c.Scans() {
		err := s.scan(ctx, prefix, func(kv *mvccpb.KeyValue) error {
			if t, err := at(kv.Value); err == nil {
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
		n, err := s.count(ctx, prefix)
		out.Stored = n
		return out, err
	}
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := s.commitReports(ctx, ops)
		if err != nil {
			return err
		}
		for _, r := range resp.Responses {
			if r.GetResponseTxn().GetSucceeded() {
				out.Deleted++
			} else {
				out.Stored++ // replaced since it was read
			}
		}
		ops = ops[:0]
		return nil
	}
	err := s.scan(ctx, prefix, func(kv *mvccpb.KeyValue) error {
		if t, err := at(kv.Value); err != nil || !store.Deletes(cut, t) {
			out.Stored++
			return nil
		}
		k := string(kv.Key)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)},
			[]clientv3.Op{clientv3.OpDelete(k)}, nil))
		if len(ops) == maxReportsPerTxn/2 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return out, err
}

// count returns how many keys are under prefix, bounded by the request
// timeout.
func (s *Store) count(ctx context.Context, prefix string) (int, error) {
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, s.mapErr(err)
	}
	return int(resp.Count), nil
}

// PruneSeats implements store.Pruner: a keys-only scan of the seats finds
// the sets, and each dropped set goes in one delete of its prefix, bounded
// by the request timeout. A seat a replica takes in a set while it is
// deleted either goes with it or stays, alone in the set, whose other
// seats TakeSeat then hands out from the lowest free slot.
func (s *Store) PruneSeats(ctx context.Context, drop func(set string) bool) (store.Pruned, error) {
	root := s.prefix + "seats/"
	var sets []string
	var at readPoint
	err := s.scanAt(ctx, root, &at, true, func(kv *mvccpb.KeyValue) error {
		// <prefix>seats/<set>/…: a set's name has no "/" (ValidateSeat).
		set, _, _ := strings.Cut(string(kv.Key[len(root):]), "/")
		if len(sets) == 0 || sets[len(sets)-1] != set {
			sets = append(sets, set)
		}
		return nil
	})
	if err != nil {
		return store.Pruned{}, fmt.Errorf("prune seats: %w", err)
	}
	var out store.Pruned
	for _, set := range sets {
		if !drop(set) {
			out.Stored++
			continue
		}
		if err := s.deletePrefix(ctx, s.seatsPrefix(set)); err != nil {
			return out, fmt.Errorf("prune seats of %s: %w", set, err)
		}
		out.Deleted++
	}
	return out, nil
}

// deletePrefix deletes every key under prefix in one request.
func (s *Store) deletePrefix(ctx context.Context, prefix string) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	_, err := s.cli.Delete(ctx, prefix, clientv3.WithPrefix())
	return s.mapErr(err)
}
