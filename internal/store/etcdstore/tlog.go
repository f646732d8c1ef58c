package etcdstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Log = (*Store)(nil)

// maxHashesPerTxn bounds the reads of one LogHashes transaction, under
// etcd's default --max-txn-ops of 128.
const maxHashesPerTxn = 128

func (s *Store) logSizeKey() string          { return s.prefix + "log/size" }
func (s *Store) logRecordsPrefix() string    { return s.prefix + "log/records/" }
func (s *Store) logRecordKey(n int64) string { return fmt.Sprintf("%s%020d", s.logRecordsPrefix(), n) }
func (s *Store) logHashKey(i int64) string {
	return fmt.Sprintf("%slog/hashes/%020d", s.prefix, i)
}
func (s *Store) checkpointKey() string    { return s.prefix + "log/checkpoint" }
func (s *Store) keySetsPrefix() string    { return s.prefix + "keysets/" }
func (s *Store) keySetKey(v int64) string { return fmt.Sprintf("%s%020d", s.keySetsPrefix(), v) }

// logSize reads the log size key from kvs (a Get of it): the size (0 when
// absent) and the key's ModRevision, which a transaction appending record
// n compares.
func logSize(kvs []*mvccpb.KeyValue) (n, modRev int64, err error) {
	if len(kvs) == 0 {
		return 0, 0, nil
	}
	n, err = strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("log size %q: not a size", kvs[0].Value)
	}
	return n, kvs[0].ModRevision, nil
}

// readLogSize reads the log's size and its key's ModRevision.
func (s *Store) readLogSize(ctx context.Context) (n, modRev int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.logSizeKey())
	if err != nil {
		return 0, 0, s.mapErr(err)
	}
	return logSize(resp.Kvs)
}

// logAppend is what appending one record adds to a write's transaction.
type logAppend struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
	// sizeModRev is the log size key's ModRevision the append compares.
	sizeModRev int64
}

// planAppend reads the log's size n and the stored hashes that record n's
// hashes are computed from (tlog.StoredHashes), and returns the compares
// and puts that append rec as record n: the transaction fails, and the
// write is planned again, if any replica appended first, so the log never
// forks.
func (s *Store) planAppend(ctx context.Context, rec []byte) (logAppend, error) {
	n, modRev, err := s.readLogSize(ctx)
	if err != nil {
		return logAppend{}, err
	}
	hashes, err := tlog.StoredHashes(n, rec, tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		return s.readHashes(ctx, n, indexes)
	}))
	if err != nil {
		return logAppend{}, fmt.Errorf("append log record %d: %w", n, err)
	}
	a := logAppend{
		sizeModRev: modRev,
		cmps: []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(s.logSizeKey()), "=", modRev),
			// Append-only even if the size key were reset.
			clientv3.Compare(clientv3.CreateRevision(s.logRecordKey(n)), "=", 0),
		},
		ops: []clientv3.Op{
			clientv3.OpPut(s.logRecordKey(n), string(storecodec.EncodeLogRecord(rec))),
			clientv3.OpPut(s.logSizeKey(), strconv.FormatInt(n+1, 10)),
		},
	}
	first := tlog.StoredHashIndex(0, n)
	for i, h := range hashes {
		a.ops = append(a.ops, clientv3.OpPut(s.logHashKey(first+int64(i)), string(h[:])))
	}
	return a, nil
}

// readHashes reads the stored hashes at indexes of a log of size records,
// in transactions of at most maxHashesPerTxn reads. A stored hash never
// changes, so the transactions need not share a revision.
func (s *Store) readHashes(ctx context.Context, size int64, indexes []int64) ([]tlog.Hash, error) {
	if err := store.CheckHashIndexes(size, indexes); err != nil {
		return nil, err
	}
	out := make([]tlog.Hash, 0, len(indexes))
	for chunk := range slices.Chunk(indexes, maxHashesPerTxn) {
		ops := make([]clientv3.Op, len(chunk))
		for i, x := range chunk {
			ops[i] = clientv3.OpGet(s.logHashKey(x))
		}
		tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		resp, err := s.cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, s.mapErr(err)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().Kvs
			if len(kvs) == 0 {
				return nil, fmt.Errorf("log hash %d missing from a log of %d records", chunk[i], size)
			}
			h, err := storecodec.DecodeHash(kvs[0].Value)
			if err != nil {
				return nil, fmt.Errorf("log hash %d: %w", chunk[i], err)
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// PutKeySet implements store.Store with one transaction that also
// compares the highest stored version (its key exists, none above it), so
// of two replicas putting the same version one gets ErrConflict.
func (s *Store) PutKeySet(ctx context.Context, k store.KeySetRecord, a store.AuditEntry) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("put key set: %w", err)
	}
	if s.isClosed() {
		return fmt.Errorf("put key set %d: %w", k.Version, store.ErrClosed)
	}
	v, err := storecodec.EncodeKeySet(k)
	if err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, err)
	}
	key := s.keySetKey(k.Version)
	end := clientv3.GetPrefixRangeEnd(s.keySetsPrefix())
	prepare := func(ctx context.Context) (change, error) {
		high, err := s.highestKeySet(ctx)
		if err != nil {
			return change{}, err
		}
		c := change{
			ops: []clientv3.Op{clientv3.OpPut(key, string(v))},
			// The next attempt reads the highest version again and decides.
			lost: func([]*etcdserverpb.ResponseOp) error { return nil },
		}
		switch {
		case high == 0:
			c.cmps = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.keySetsPrefix()), "=", 0).WithRange(end)}
		case k.Version != high+1:
			return change{}, fmt.Errorf("the highest stored is %d: %w", high, store.ErrConflict)
		default:
			c.cmps = []clientv3.Cmp{
				clientv3.Compare(clientv3.CreateRevision(s.keySetKey(high)), ">", 0),
				// No key from key's on: an empty range compares as one absent key.
				clientv3.Compare(clientv3.CreateRevision(key), "=", 0).WithRange(end),
			}
		}
		return c, nil
	}
	if _, err := s.write(ctx, a, k.Envelope, prepare); err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, err)
	}
	return nil
}

// highestKeySet returns the highest stored key-set version, 0 for none.
func (s *Store) highestKeySet(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keySetsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return 0, s.mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	k := string(resp.Kvs[0].Key)
	v, err := strconv.ParseInt(strings.TrimPrefix(k, s.keySetsPrefix()), 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("key set key %q: not a version", k)
	}
	return v, nil
}

// KeySets implements store.Store with one range read.
func (s *Store) KeySets(ctx context.Context) ([]store.KeySetRecord, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list key sets: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keySetsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list key sets: %w", s.mapErr(err))
	}
	var out []store.KeySetRecord
	bad := store.NewUnreadable("key set")
	for _, kv := range resp.Kvs {
		ver := strings.TrimLeft(strings.TrimPrefix(string(kv.Key), s.keySetsPrefix()), "0")
		k, err := storecodec.DecodeKeySet(kv.Value)
		if err == nil && strconv.FormatInt(k.Version, 10) != ver {
			err = fmt.Errorf("holds version %d", k.Version)
		}
		if err != nil {
			bad.AddKey(ver, fmt.Errorf("key %q: %w", kv.Key, err))
			continue
		}
		out = append(out, k)
	}
	return out, bad.Err()
}

// LogSize implements store.Log.
func (s *Store) LogSize(ctx context.Context) (int64, error) {
	if s.isClosed() {
		return 0, fmt.Errorf("read log size: %w", store.ErrClosed)
	}
	n, _, err := s.readLogSize(ctx)
	if err != nil {
		return 0, fmt.Errorf("read log size: %w", err)
	}
	return n, nil
}

// LogHashes implements store.Log with one read of the size and one
// transaction per 128 hashes.
func (s *Store) LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("read log hashes: %w", store.ErrClosed)
	}
	n, _, err := s.readLogSize(ctx)
	if err != nil {
		return nil, fmt.Errorf("read log hashes: %w", err)
	}
	out, err := s.readHashes(ctx, n, indexes)
	if err != nil {
		return nil, fmt.Errorf("read log hashes: %w", err)
	}
	return out, nil
}

// LogRecords implements store.Log with one transaction reading the size
// and the records at one revision.
func (s *Store) LogRecords(ctx context.Context, start, end int64) ([][]byte, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("read log records: %w", store.ErrClosed)
	}
	// Bound the read before it is made; the size is checked after.
	if err := store.CheckRecordRange(math.MaxInt64, start, end); err != nil {
		return nil, fmt.Errorf("read log records: %w", err)
	}
	if start == end {
		n, _, err := s.readLogSize(ctx)
		if err == nil {
			err = store.CheckRecordRange(n, start, end)
		}
		if err != nil {
			return nil, fmt.Errorf("read log records: %w", err)
		}
		return [][]byte{}, nil
	}
	tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Txn(tctx).Then(
		clientv3.OpGet(s.logSizeKey()),
		clientv3.OpGet(s.logRecordKey(start), clientv3.WithRange(s.logRecordKey(end))),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("read log records: %w", s.mapErr(err))
	}
	n, _, err := logSize(resp.Responses[0].GetResponseRange().Kvs)
	if err == nil {
		err = store.CheckRecordRange(n, start, end)
	}
	if err != nil {
		return nil, fmt.Errorf("read log records: %w", err)
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	out := make([][]byte, 0, end-start)
	for i := start; i < end; i++ {
		j := i - start
		if j >= int64(len(kvs)) || string(kvs[j].Key) != s.logRecordKey(i) {
			return nil, fmt.Errorf("read log records: record %d missing from a log of %d", i, n)
		}
		rec, err := storecodec.DecodeLogRecord(kvs[j].Value)
		if err != nil {
			return nil, fmt.Errorf("read log records: record %d: %w", i, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// PutCheckpoint implements store.Log: a read of the kept checkpoint and
// the log size, then a transaction comparing the checkpoint key's
// ModRevision, retried (bounded) while another replica's put got in first.
func (s *Store) PutCheckpoint(ctx context.Context, size int64, note []byte) error {
	if s.isClosed() {
		return fmt.Errorf("put checkpoint: %w", store.ErrClosed)
	}
	v, err := storecodec.EncodeCheckpoint(size, note)
	if err != nil {
		return fmt.Errorf("put checkpoint: %w", err)
	}
	for attempt := range maxWriteAttempts {
		if attempt > 0 && !sleep(ctx, retryBackoff(attempt)) {
			return fmt.Errorf("put checkpoint: %w", ctx.Err())
		}
		done, err := s.tryPutCheckpoint(ctx, size, note, string(v))
		if err != nil {
			return fmt.Errorf("put checkpoint: %w", err)
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("put checkpoint: lost %d attempts to concurrent writers", maxWriteAttempts)
}

// tryPutCheckpoint makes one attempt; done is false if another write to
// the checkpoint got in between its read and its transaction.
func (s *Store) tryPutCheckpoint(ctx context.Context, size int64, note []byte, v string) (done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.logSizeKey()), clientv3.OpGet(s.checkpointKey())).Commit()
	if err != nil {
		return false, s.mapErr(err)
	}
	n, _, err := logSize(resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return false, err
	}
	if err := store.ValidateCheckpoint(size, n, note); err != nil {
		return false, err
	}
	var modRev int64
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		cur, _, err := storecodec.DecodeCheckpoint(kvs[0].Value)
		if err != nil {
			return false, err
		}
		if size < cur {
			return true, nil
		}
		modRev = kvs[0].ModRevision
	}
	put, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.checkpointKey()), "=", modRev)).
		Then(clientv3.OpPut(s.checkpointKey(), v)).
		Commit()
	if err != nil {
		return false, s.mapErr(err)
	}
	return put.Succeeded, nil
}

// Checkpoint implements store.Log.
func (s *Store) Checkpoint(ctx context.Context) (int64, []byte, error) {
	v, _, err := s.get(ctx, s.checkpointKey())
	if err != nil {
		return 0, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	size, note, err := storecodec.DecodeCheckpoint(v)
	if err != nil {
		return 0, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return size, note, nil
}
