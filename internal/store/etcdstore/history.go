package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store"
)

// History points are keyed <prefix>points/<version>/<minute>, the Unix
// minute 12-digit zero-padded, so a version's keys sort by time.

var _ store.History = (*Store)(nil)

func (s *Store) pointsPrefix(version string) string { return s.prefix + "points/" + version + "/" }

func (s *Store) pointKey(version string, minute int64) string {
	return fmt.Sprintf("%s%012d", s.pointsPrefix(version), minute)
}

// PutPoints implements store.History: one transaction per
// maxReportsPerTxn points (etcd's --max-txn-ops), so a call of more than
// that is atomic per transaction only, as PutReports.
func (s *Store) PutPoints(ctx context.Context, ps []store.Point) error {
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("put history points: %w", err)
		}
	}
	if s.isClosed() {
		return fmt.Errorf("put history points: %w", store.ErrClosed)
	}
	// etcd refuses a transaction that puts a key twice: a later point of
	// a key wins, where the first occurrence was.
	var keys []string
	data := map[string]string{}
	for _, p := range ps {
		k := s.pointKey(p.Version, store.PointMinute(p.Time))
		if _, ok := data[k]; !ok {
			keys = append(keys, k)
		}
		data[k] = string(p.Data)
	}
	for chunk := range slices.Chunk(keys, maxReportsPerTxn) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpPut(k, data[k])
		}
		tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		_, err := s.cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("put history points: %w", s.mapErr(err))
		}
	}
	return nil
}

// Points implements store.History with a range read of the version's
// minutes, newest first, at one revision. A key under the version's
// prefix that is not a 12-digit minute (another writer of the prefix,
// damage) is not a point: it is skipped, and the read goes on past it, so
// such keys never crowd real points out of a limited read.
func (s *Store) Points(ctx context.Context, version string, limit int) ([]store.Point, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list history points: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	prefix := s.pointsPrefix(version)
	limit = store.PointsLimit(limit)
	// Every minute's key is in [prefix+"0", prefix+":"): ":" follows "9".
	from, end := prefix+"0", prefix+":"
	var out []store.Point
	var rev int64
	for len(out) < limit {
		opts := []clientv3.OpOption{clientv3.WithRange(end),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit - len(out)))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, from, opts...)
		if err != nil {
			return nil, fmt.Errorf("list history points: %w", s.mapErr(err))
		}
		if rev == 0 {
			rev = resp.Header.Revision // the current one: the first read's is ours
		}
		for _, kv := range resp.Kvs {
			if m, ok := pointMinute(strings.TrimPrefix(string(kv.Key), prefix)); ok {
				out = append(out, store.Point{Version: version, Time: time.Unix(m*60, 0).UTC(), Data: kv.Value})
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key) // the range's end is exclusive
	}
	slices.Reverse(out)
	return out, nil
}

// pointMinute parses a point key's minute: exactly 12 decimal digits.
func pointMinute(s string) (int64, bool) {
	if len(s) != 12 {
		return 0, false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	m, err := strconv.ParseInt(s, 10, 64)
	return m, err == nil
}

// DeletePoints implements store.History with one ranged delete.
func (s *Store) DeletePoints(ctx context.Context, version string) (int, error) {
	if s.isClosed() {
		return 0, fmt.Errorf("delete history points: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Delete(ctx, s.pointsPrefix(version), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("delete history points: %w", s.mapErr(err))
	}
	return int(resp.Deleted), nil
}
