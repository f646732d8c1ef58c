// Package etcdstore is the store.Store on an etcd v3 cluster, shared by
// every lpsd replica.
//
// Key layout under Config.Prefix (default DefaultPrefix):
//
//	<prefix>releases/<version>      release record (JSON, encoding version "v")
//	<prefix>audit/<seq>             audit entry (JSON, "v"); seq is 20-digit zero-padded
//	<prefix>audit-seq               last allocated audit seq (decimal)
//	<prefix>reports/<vmId>/<boot>   report (JSON, "v")
//	<prefix>seats/<version>/vm/<vmId> canary seat held (value: when taken, RFC 3339)
//	<prefix>seats/<version>/n/<slot>  the seat's holder; slot is 5-digit zero-padded
//	<prefix>seats/<version>/sub/<subscription>/<slot> a seat taken under a per-subscription bound: its holder
//	<prefix>served/<version>/<vmId>/<boot> served record (JSON, "v")
//	<prefix>configs/<component>@<version> component configuration record (JSON, "v")
//	<prefix>keysets/<version>       key-set record (JSON, "v"); version is 20-digit zero-padded
//	<prefix>log/size                how many records the transparency log holds (decimal)
//	<prefix>log/records/<n>         log record n from 0: a version byte (1), then its exact bytes; 20-digit
//	<prefix>log/hashes/<i>          stored hash i (tlog.StoredHashIndex): its 32 bytes; 20-digit
//	<prefix>log/checkpoint          the kept checkpoint: its size and note (JSON, "v")
//	<prefix>freeze                  the fleet-wide rollout freeze (JSON, "v")
//	<prefix>points/<version>/<minute> a release's history point (internal/history's JSON); minute is 12-digit zero-padded
//
// A release's revision is its key's ModRevision, and the store-wide
// revision is the highest ModRevision under releases/ (release keys are
// never deleted), so writes to other keys, such as reports or another
// prefix's, do not move it. Component configurations are the same under
// configs/, with their own highest ModRevision; Watch follows both. The
// freeze's revision is its key's ModRevision (it moves neither of those),
// and Watch follows that key too. A release write is one transaction that
// compares the release's ModRevision and the audit-seq counter's, then puts
// the release, its audit entry and the counter. A canary seat is taken by
// creating both its slot key, numbered by the count of slots, and its vmId
// key in one transaction that requires neither to exist, so no slot has
// two holders and no vmId two slots.
//
// A write that appends to the transparency log (a release or revocation
// with a record, a key set) first reads log/size and the stored hashes the
// new record's hashes are computed from (tlog.StoredHashes), then commits
// one transaction that also compares log/size's ModRevision and that the
// record's key does not exist, putting the record, its hashes and the new
// size beside the release, the audit entry and the counter. If only the
// size or the audit seq moved (another replica appended), it plans again,
// so replicas never fork the log; if nothing moved, a key where the next
// record or audit entry goes exists already, and the write fails rather
// than retry or overwrite it. A key set's transaction also compares
// that the highest version read is still the highest.
package etcdstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Store = (*Store)(nil)

// DefaultPrefix is the key prefix when Config.Prefix is empty.
const DefaultPrefix = "/nodehotfix/v1/"

const (
	defaultDialTimeout    = 5 * time.Second
	defaultRequestTimeout = 5 * time.Second
	// keepaliveTime and keepaliveTimeout detect a dead connection under an
	// idle watch well before the snapshotter's periodic resync would.
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
	// maxWriteAttempts bounds a write's retries when only the audit-seq
	// or log-size compare lost, i.e. another replica wrote something else.
	maxWriteAttempts = 32
	// maxWatchFailures is how many consecutive failed watch attempts end a
	// Watch channel; the consumer then calls Watch again.
	maxWatchFailures = 8
	watchBackoffMin  = 100 * time.Millisecond
	watchBackoffMax  = 5 * time.Second
	// maxReportsPerTxn is etcd's default --max-txn-ops; 128 reports of
	// well under 1 KiB also stay far below its 1.5 MiB request limit.
	maxReportsPerTxn = 128
	// reportsPageSize bounds each range read of Reports, so a large fleet's
	// reports never make one huge response.
	reportsPageSize = 1000
)

// Config holds the optional settings of Open. The zero value works for a
// plain-text etcd without authentication.
type Config struct {
	// Prefix is put before every key; a missing final "/" is added.
	// Default DefaultPrefix.
	Prefix string
	// DialTimeout bounds Open's connection check and authentication.
	// Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each read and each write attempt. Default 5s.
	RequestTimeout time.Duration
	// TLS, if set, secures the connection (use https endpoints).
	TLS *tls.Config
	// Username and Password, if set, authenticate to etcd.
	Username, Password string
	// Log receives watch re-establishments, compactions and the etcd
	// client's own warnings and errors. Default: discard.
	Log *slog.Logger
}

// Store is a store.Store on etcd. Several Stores (processes) may share one
// prefix; each sees the others' writes through Watch. Store is safe for
// concurrent use.
type Store struct {
	cli        *clientv3.Client
	prefix     string
	reqTimeout time.Duration
	log        *slog.Logger

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close; stops watches
	wg     sync.WaitGroup

	// seq caches the audit-seq counter's last seen value and ModRevision;
	// a stale cache only costs one retried transaction.
	seqMu     sync.Mutex
	seq       int64
	seqModRev int64

	// reports and served keep the prefixes decoded (decoded.go).
	reports *decoded[store.Report]
	served  *decoded[store.Served]
	// follow says lists may keep a feed; when not, followable asks again
	// from followAgain on.
	followMu    sync.Mutex
	follow      bool
	followAgain time.Time
}

// Open connects to the etcd cluster at endpoints (e.g.
// "http://10.0.0.1:2379") and checks within c.DialTimeout that it answers.
func Open(ctx context.Context, endpoints []string, c Config) (*Store, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("open etcd store: no endpoints")
	}
	prefix := cmp.Or(c.Prefix, DefaultPrefix)
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	dialTimeout := cmp.Or(c.DialTimeout, defaultDialTimeout)
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    keepaliveTime,
		DialKeepAliveTimeout: keepaliveTimeout,
		TLS:                  c.TLS,
		Username:             c.Username,
		Password:             c.Password,
		Logger:               clientLogger(log),
	})
	if err != nil {
		return nil, fmt.Errorf("open etcd store %v: %w", endpoints, err)
	}
	s := &Store{
		cli:        cli,
		prefix:     prefix,
		reqTimeout: cmp.Or(c.RequestTimeout, defaultRequestTimeout),
		log:        log,
		done:       make(chan struct{}),
	}
	s.reports = newDecoded(s.reportsPrefix(), storecodec.DecodeReport, store.CompareReports)
	s.served = newDecoded(s.servedPrefix(), storecodec.DecodeServed, store.CompareServed)
	// The client connects lazily; one read proves the cluster answers and
	// primes the audit-seq cache.
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, s.seqKey())
	if err == nil {
		err = s.updateSeq(resp.Kvs)
	}
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("open etcd store %v: %w", endpoints, err)
	}
	return s, nil
}

func (s *Store) releasesPrefix() string      { return s.prefix + "releases/" }
func (s *Store) releaseKey(v string) string  { return s.releasesPrefix() + v }
func (s *Store) auditPrefix() string         { return s.prefix + "audit/" }
func (s *Store) seqKey() string              { return s.prefix + "audit-seq" }
func (s *Store) reportsPrefix() string       { return s.prefix + "reports/" }
func (s *Store) seatsPrefix(v string) string { return s.prefix + "seats/" + v + "/" }
func (s *Store) servedPrefix() string        { return s.prefix + "served/" }
func (s *Store) configsPrefix() string       { return s.prefix + "configs/" }
func (s *Store) beatKey(minute int64) string {
	return fmt.Sprintf("%sbeats/%012d", s.prefix, max(minute, 0))
}
func (s *Store) reportKey(r store.Report) string {
	return s.reportsPrefix() + r.VMID + "/" + r.Boot
}

// auditKey zero-pads seq to 20 digits so key order is Seq order.
func (s *Store) auditKey(seq int64) string {
	return fmt.Sprintf("%s%020d", s.auditPrefix(), seq)
}

// Releases implements store.Store with one linearizable range read. The
// revision is the highest ModRevision among the releases (0 for none).
func (s *Store) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	if s.isClosed() {
		return nil, 0, fmt.Errorf("list releases: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.releasesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list releases: %w", s.mapErr(err))
	}
	out := make([]rollout.Release, 0, len(resp.Kvs))
	var rev int64
	bad := store.NewUnreadable("release")
	for _, kv := range resp.Kvs {
		rev = max(rev, kv.ModRevision)
		r, _, err := storecodec.DecodeRelease(kv.Value)
		if err != nil {
			bad.AddKey(strings.TrimPrefix(string(kv.Key), s.releasesPrefix()), fmt.Errorf("key %q: %w", kv.Key, err))
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, rollout.Compare)
	return out, rev, bad.Err()
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, version string) (rollout.Release, int64, error) {
	v, rev, err := s.get(ctx, s.releaseKey(version))
	if err != nil {
		return rollout.Release{}, 0, fmt.Errorf("read release %q: %w", version, err)
	}
	r, _, err := storecodec.DecodeRelease(v)
	if err != nil {
		return rollout.Release{}, 0, fmt.Errorf("read release %q: %w", version, err)
	}
	return r, rev, nil
}

// get reads key's value and ModRevision: ErrNotFound when it is absent,
// ErrClosed after Close. Release and Config share it.
func (s *Store) get(ctx context.Context, key string) ([]byte, int64, error) {
	if s.isClosed() {
		return nil, 0, store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, s.mapErr(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, store.ErrNotFound
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// PutRelease implements store.Store. The revision returned is the
// transaction's, which becomes the release key's ModRevision. An error
// other than ErrConflict (a timeout, say) leaves the outcome unknown: the
// write may have applied, so re-read before retrying.
func (s *Store) PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a store.AuditEntry, rec []byte) (int64, error) {
	if err := cmp.Or(r.Validate(), store.ValidateRecord(rec)); err != nil {
		return 0, fmt.Errorf("put release: %w", err)
	}
	if s.isClosed() {
		return 0, fmt.Errorf("put release %s: %w", r.Version, store.ErrClosed)
	}
	key := s.releaseKey(r.Version)
	b, err := storecodec.EncodeRelease(r, 0) // etcd keeps the revision
	if err != nil {
		return 0, fmt.Errorf("put release %s: %w", r.Version, err)
	}
	rev, err := s.put(ctx, key, string(b), ifRev, a, rec)
	if err != nil {
		return 0, fmt.Errorf("put release %s: %w", r.Version, err)
	}
	return rev, nil
}

// put writes val under key in one transaction with its audit entry a and
// log record rec (nil: none), compare-and-swap on key's ModRevision
// (ifRev; 0: key absent), retrying while only the audit seq or the log
// size lost. PutRelease and PutConfig share it.
func (s *Store) put(ctx context.Context, key, val string, ifRev int64, a store.AuditEntry, rec []byte) (int64, error) {
	keyCmp := clientv3.Compare(clientv3.ModRevision(key), "=", ifRev)
	if ifRev == 0 {
		keyCmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	w := change{
		cmps:    []clientv3.Cmp{keyCmp},
		ops:     []clientv3.Op{clientv3.OpPut(key, val)},
		elseOps: []clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())},
		lost: func(resps []*etcdserverpb.ResponseOp) error {
			var stored int64
			if kvs := resps[0].GetResponseRange().Kvs; len(kvs) > 0 {
				stored = kvs[0].ModRevision
			}
			if stored != ifRev {
				return fmt.Errorf("at revision %d (stored %d): %w", ifRev, stored, store.ErrConflict)
			}
			return nil
		},
	}
	return s.write(ctx, a, rec, func(context.Context) (change, error) { return w, nil })
}

// change is one write attempt's own part of its transaction, beside the
// audit entry and log record every write carries.
type change struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
	// elseOps are read when the transaction fails, for lost, which
	// returns an error (ErrConflict wrapped) if the write's own compares
	// failed, nil if only the audit seq or the log size moved.
	elseOps []clientv3.Op
	lost    func(elseResps []*etcdserverpb.ResponseOp) error
}

// write commits the change prepare returns, with audit entry a and log
// record rec (nil: none), in one transaction, preparing again and retrying
// (bounded, with jittered backoff) while only a concurrent writer's audit
// seq or log append got in first. Every lost attempt is another writer's
// success, so the bound is only reached under heavy contention, or with a
// counter behind the keys it numbers.
func (s *Store) write(ctx context.Context, a store.AuditEntry, rec []byte, prepare func(context.Context) (change, error)) (int64, error) {
	for attempt := range maxWriteAttempts {
		if attempt > 0 && !sleep(ctx, retryBackoff(attempt)) {
			return 0, ctx.Err()
		}
		c, err := prepare(ctx)
		if err != nil {
			return 0, err
		}
		rev, retry, err := s.tryWrite(ctx, c, a, rec)
		if err != nil {
			return 0, err
		}
		if !retry {
			return rev, nil
		}
	}
	return 0, fmt.Errorf("lost %d attempts to concurrent writers (contention, or an audit seq or log size counter behind its keys)", maxWriteAttempts)
}

// retryBackoff is the wait before write attempt n (1-based): up to 1ms,
// doubling, capped at 20ms, with full jitter, so writers that lost
// together do not collide again.
func retryBackoff(n int) time.Duration {
	d := min(time.Millisecond<<min(n-1, 5), 20*time.Millisecond)
	return rand.N(d + 1)
}

// tryWrite runs one write transaction. retry reports that only an
// audit-seq or log-size compare lost; the seq cache then holds the current
// counter.
func (s *Store) tryWrite(ctx context.Context, c change, a store.AuditEntry, rec []byte) (rev int64, retry bool, err error) {
	s.seqMu.Lock()
	seq, seqModRev := s.seq, s.seqModRev
	s.seqMu.Unlock()
	a.Seq = seq + 1
	av, err := storecodec.EncodeAudit(a)
	if err != nil {
		return 0, false, err
	}
	cmps := append(slices.Clip(c.cmps),
		clientv3.Compare(clientv3.ModRevision(s.seqKey()), "=", seqModRev),
		// The log is append-only even if the counter was reset.
		clientv3.Compare(clientv3.CreateRevision(s.auditKey(a.Seq)), "=", 0),
	)
	ops := append(slices.Clip(c.ops),
		clientv3.OpPut(s.auditKey(a.Seq), string(av)),
		clientv3.OpPut(s.seqKey(), strconv.FormatInt(a.Seq, 10)),
	)
	var sizeModRev int64
	if rec != nil {
		app, err := s.planAppend(ctx, rec)
		if err != nil {
			return 0, false, err
		}
		cmps = append(cmps, app.cmps...)
		ops = append(ops, app.ops...)
		sizeModRev = app.sizeModRev
	}
	tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Txn(tctx).
		If(cmps...).
		Then(ops...).
		Else(append(slices.Clip(c.elseOps), clientv3.OpGet(s.seqKey()), clientv3.OpGet(s.logSizeKey(), clientv3.WithKeysOnly()))...).
		Commit()
	if err != nil {
		return 0, false, s.mapErr(err)
	}
	if resp.Succeeded {
		s.seqMu.Lock()
		if resp.Header.Revision > s.seqModRev {
			s.seq, s.seqModRev = a.Seq, resp.Header.Revision
		}
		s.seqMu.Unlock()
		return resp.Header.Revision, false, nil
	}
	seqKVs := resp.Responses[len(c.elseOps)].GetResponseRange().Kvs
	if err := s.updateSeq(seqKVs); err != nil {
		return 0, false, err
	}
	if err := c.lost(resp.Responses[:len(c.elseOps)]); err != nil {
		return 0, false, err
	}
	// Nobody else wrote: an audit entry or log record already sits where
	// a counter says the next one goes. Retrying would meet it again.
	var nowSeq, nowSize int64
	if len(seqKVs) > 0 {
		nowSeq = seqKVs[0].ModRevision
	}
	if kvs := resp.Responses[len(c.elseOps)+1].GetResponseRange().Kvs; len(kvs) > 0 {
		nowSize = kvs[0].ModRevision
	}
	if nowSeq == seqModRev && (rec == nil || nowSize == sizeModRev) {
		return 0, false, fmt.Errorf("audit entry %d or the next log record exists already: a counter (audit seq or log size) is behind its keys", a.Seq)
	}
	return 0, true, nil
}

// updateSeq records the audit-seq counter from a read of its key.
func (s *Store) updateSeq(kvs []*mvccpb.KeyValue) error {
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	if len(kvs) == 0 {
		s.seq, s.seqModRev = 0, 0
		return nil
	}
	n, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil {
		return fmt.Errorf("audit seq counter %q: %w", kvs[0].Value, err)
	}
	// A concurrent write may already have cached a newer counter.
	if kvs[0].ModRevision >= s.seqModRev {
		s.seq, s.seqModRev = n, kvs[0].ModRevision
	}
	return nil
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, after int64, limit int) ([]store.AuditEntry, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("read audit log: %w", store.ErrClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.auditKey(max(after, 0)+1),
		clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.auditPrefix())),
		clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", s.mapErr(err))
	}
	var out []store.AuditEntry
	for _, kv := range resp.Kvs {
		a, err := storecodec.DecodeAudit(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("read audit log: key %q: %w", kv.Key, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// PutReports implements store.Store. A call of more than 128 distinct keys
// (etcd's default --max-txn-ops) is split into consecutive transactions of
// at most 128 puts each; atomicity is per transaction, so an error may leave
// the earlier ones applied. An error other than ErrInvalidReport or
// ErrClosed (a timeout, say) leaves the outcome of the failing transaction
// unknown; retrying the call is safe, but may then report keys it stored as
// not new.
func (s *Store) PutReports(ctx context.Context, rs []store.Report) ([]bool, error) {
	// etcd refuses a transaction that puts one key twice, so each key is
	// put once, at its first occurrence, with its last outcome's value, or
	// its first started report's when it has no outcome in the call; the
	// latter only if the key does not exist (store.MergeReport).
	keys := make([]string, 0, len(rs))  // distinct, in order of first occurrence
	at := make(map[string]int, len(rs)) // key -> index of its first occurrence in rs
	value := make(map[string]string, len(rs))
	outcome := make(map[string]bool, len(rs)) // the key has an outcome in the call
	for i, r := range rs {
		if err := r.ValidateKey(); err != nil {
			return nil, fmt.Errorf("put reports: %w", err)
		}
		b, err := storecodec.EncodeReport(r)
		if err != nil {
			return nil, fmt.Errorf("put reports: %w", err)
		}
		k := s.reportKey(r)
		_, seen := at[k]
		if !seen {
			at[k] = i
			keys = append(keys, k)
		}
		if !store.MergeReport(seen, r) {
			continue // a started report after one of this call's own
		}
		value[k] = string(b)
		outcome[k] = !r.Started()
	}
	if s.isClosed() {
		return nil, fmt.Errorf("put reports: %w", store.ErrClosed)
	}
	first := make([]bool, len(rs))
	stored := 0
	for chunk := range slices.Chunk(keys, maxReportsPerTxn) {
		err := ctx.Err()
		var resp *clientv3.TxnResponse
		if err == nil {
			ops := make([]clientv3.Op, len(chunk))
			for i, k := range chunk {
				ops[i] = clientv3.OpPut(k, value[k], clientv3.WithPrevKV())
				if !outcome[k] {
					ops[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)}, []clientv3.Op{clientv3.OpPut(k, value[k])}, nil)
				}
			}
			resp, err = s.commitReports(ctx, ops)
		}
		if err != nil {
			return nil, fmt.Errorf("put reports (%d of %d keys stored before): %w", stored, len(keys), err)
		}
		for i, k := range chunk {
			if outcome[k] {
				first[at[k]] = resp.Responses[i].GetResponsePut().GetPrevKv() == nil
			} else {
				first[at[k]] = resp.Responses[i].GetResponseTxn().GetSucceeded()
			}
		}
		stored += len(chunk)
	}
	return first, nil
}

// commitReports runs one unconditional transaction of ops, bounded by the
// request timeout.
func (s *Store) commitReports(ctx context.Context, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, s.mapErr(err)
	}
	return resp, nil
}

// Reports implements store.Store with range reads of up to 1000 reports,
// all at the revision of the first, so the list is one consistent view. Each
// read is bounded by the request timeout.
func (s *Store) Reports(ctx context.Context) ([]store.Report, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list reports: %w", store.ErrClosed)
	}
	out, bad, err := s.reports.list(ctx, s) // in (VMID, Boot) order, not the keys'
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	return out, unreadable("report", bad)
}

// unreadable returns the *store.UnreadableError of a list's decode
// errors, or nil for none.
func unreadable(kind string, errs []error) error {
	u := store.NewUnreadable(kind)
	for _, err := range errs {
		u.Add(err)
	}
	return u.Err()
}

// scan calls each for every key under prefix, in pages of reportsPageSize
// read at the revision of the first page.
func (s *Store) scan(ctx context.Context, prefix string, each func(*mvccpb.KeyValue) error) error {
	var at readPoint
	return s.scanAt(ctx, prefix, &at, false, each)
}

// readPoint is where a scan read: the revision (0 before the first page:
// the current one) and the cluster's ID.
type readPoint struct {
	rev     int64
	cluster uint64
}

// scanAt is scan at at.rev (0: the current revision, which it sets), and
// with keysOnly reads the keys and their revisions without the values.
func (s *Store) scanAt(ctx context.Context, prefix string, at *readPoint, keysOnly bool, each func(*mvccpb.KeyValue) error) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	var (
		from  = prefix
		end   = clientv3.GetPrefixRangeEnd(prefix)
		pages int
	)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := s.reportsPage(ctx, from, end, at.rev, keysOnly)
		if err != nil {
			return fmt.Errorf("page %d: %w", pages, err)
		}
		pages++
		if at.rev == 0 {
			// A response's header carries the store's current revision,
			// not the one read at: only the first page's is ours.
			at.rev = resp.Header.Revision
		}
		at.cluster = resp.Header.ClusterId
		for _, kv := range resp.Kvs {
			if err := each(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// PutServed implements store.Store: each record is put only if its key
// does not exist (a nested transaction per key), in transactions of at
// most maxReportsPerTxn/2 keys, each nested one counting its compare too.
func (s *Store) PutServed(ctx context.Context, ss []store.Served) error {
	ops := make([]clientv3.Op, 0, len(ss))
	seen := make(map[string]bool, len(ss))
	for _, sv := range ss {
		if err := sv.ValidateKey(); err != nil {
			return fmt.Errorf("put served: %w", err)
		}
		b, err := storecodec.EncodeServed(sv)
		if err != nil {
			return fmt.Errorf("put served: %w", err)
		}
		k := s.servedPrefix() + sv.Version + "/" + sv.VMID + "/" + sv.Boot
		if seen[k] {
			continue // etcd refuses a transaction that puts a key twice; the first stays
		}
		seen[k] = true
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k, string(b))}, nil))
	}
	if s.isClosed() {
		return fmt.Errorf("put served: %w", store.ErrClosed)
	}
	stored := 0
	for chunk := range slices.Chunk(ops, maxReportsPerTxn/2) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("put served: %w", err)
		}
		if _, err := s.commitReports(ctx, chunk); err != nil {
			return fmt.Errorf("put served (%d of %d keys stored before): %w", stored, len(ops), err)
		}
		stored += len(chunk)
	}
	return nil
}

// Served implements store.Store as Reports does.
func (s *Store) Served(ctx context.Context) ([]store.Served, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list served: %w", store.ErrClosed)
	}
	out, bad, err := s.served.list(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("list served: %w", err)
	}
	return out, unreadable("served record", bad)
}

// reportsPage reads up to reportsPageSize keys in [from, end) at revision
// rev (0: the current one), without their values if keysOnly.
func (s *Store) reportsPage(ctx context.Context, from, end string, rev int64, keysOnly bool) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(reportsPageSize)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	resp, err := s.cli.Get(ctx, from, opts...)
	if err != nil {
		return nil, s.mapErr(err)
	}
	return resp, nil
}

// maxSeatTries bounds TakeSeat's attempts. Each lost attempt means another
// taker won a seat, and lpsd takes one seat per release at a time per
// replica, so with a handful of replicas losing this often means the store
// is misbehaving.
const maxSeatTries = 64

// TakeSeat implements store.Store. Each attempt is one read (is vmID
// seated, which slots are taken) and one conditional transaction creating
// the lowest free slot and vmID's key; both bounded by the request
// timeout.
func (s *Store) TakeSeat(ctx context.Context, version string, seat store.Seat, limit store.SeatLimit) (bool, error) {
	if err := store.ValidateTake(version, seat, limit); err != nil {
		return false, fmt.Errorf("take seat: %w", err)
	}
	if s.isClosed() {
		return false, fmt.Errorf("take seat: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("take seat: %w", err)
	}
	vmKey := s.seatsPrefix(version) + "vm/" + seat.VMID
	slots := s.seatsPrefix(version) + "n/"
	// A subscription's seats are numbered slots of their own, created in
	// the same transaction; replicas from before the bound ignore them.
	subSlots := s.seatsPrefix(version) + "sub/" + seat.SubscriptionID + "/"
	for range maxSeatTries {
		st, err := s.seatState(ctx, vmKey, slots, subSlots)
		if err != nil || st.held || st.taken >= int64(limit.Seats) {
			return st.held, err
		}
		claim := []string{vmKey, fmt.Sprintf("%s%05d", slots, st.free)}
		if limit.PerSubscription > 0 {
			if st.subTaken >= int64(limit.PerSubscription) {
				return false, fmt.Errorf("take seat: %w", store.ErrSubscriptionSeats)
			}
			claim = append(claim, fmt.Sprintf("%s%05d", subSlots, st.subFree))
		}
		won, err := s.claimSeat(ctx, claim, seat)
		if err != nil || won {
			return won, err
		}
	}
	return false, fmt.Errorf("take seat %s for %s: lost %d attempts to concurrent takers", version, seat.VMID, maxSeatTries)
}

// HoldsSeat implements store.Store with one count-only read of vmID's key.
func (s *Store) HoldsSeat(ctx context.Context, version, vmID string) (bool, error) {
	if err := store.ValidateSeat(version, vmID); err != nil {
		return false, fmt.Errorf("read seat: %w", err)
	}
	if s.isClosed() {
		return false, fmt.Errorf("read seat: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("read seat: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.seatsPrefix(version)+"vm/"+vmID, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("read seat: %w", s.mapErr(err))
	}
	return resp.Count > 0, nil
}

// seatCounts is what one read of a canary's seats says.
type seatCounts struct {
	held            bool
	taken, subTaken int64
	// free and subFree are the lowest slot numbers not taken: the count
	// when the slots are 0 to count−1, as takes number them, and the
	// first gap when some went (deleted by hand, or under a take by a
	// replica that predates the prune of a set's earlier windows), so a
	// set with a gap never claims a taken slot over and over.
	free, subFree int64
}

// seatState reads, at one revision, whether vmKey exists and the keys
// under slots and under subSlots (a canary has at most
// rollout.MaxCanaryNodes).
func (s *Store) seatState(ctx context.Context, vmKey, slots, subSlots string) (seatCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(vmKey, clientv3.WithCountOnly()),
		clientv3.OpGet(slots, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(subSlots, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return seatCounts{}, fmt.Errorf("take seat: %w", s.mapErr(err))
	}
	all, sub := resp.Responses[1].GetResponseRange(), resp.Responses[2].GetResponseRange()
	return seatCounts{
		held:     resp.Responses[0].GetResponseRange().Count > 0,
		taken:    all.Count,
		subTaken: sub.Count,
		free:     freeSlot(all.Kvs, slots),
		subFree:  freeSlot(sub.Kvs, subSlots),
	}, nil
}

// isSlotNumber reports whether n is a slot number as TakeSeat writes
// them: decimal digits only.
func isSlotNumber(n string) bool {
	_, err := strconv.ParseUint(n, 10, 64)
	return err == nil
}

// freeSlot returns the lowest slot number under prefix no key of kvs (the
// prefix's keys, in order) takes.
func freeSlot(kvs []*mvccpb.KeyValue, prefix string) int64 {
	taken := make(map[int64]bool, len(kvs))
	for _, kv := range kvs {
		if n, err := strconv.ParseInt(string(kv.Key[len(prefix):]), 10, 64); err == nil {
			taken[n] = true
		}
	}
	var n int64
	for taken[n] {
		n++
	}
	return n
}

// claimSeat creates the keys of claim (the vmId's key first, then its
// slots) if none exists, and reports whether it did.
func (s *Store) claimSeat(ctx context.Context, claim []string, seat store.Seat) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	cmps := make([]clientv3.Cmp, len(claim))
	puts := make([]clientv3.Op, len(claim))
	for i, k := range claim {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
		puts[i] = clientv3.OpPut(k, seat.VMID)
	}
	puts[0] = clientv3.OpPut(claim[0], seat.Since.UTC().Format(time.RFC3339Nano))
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return false, fmt.Errorf("take seat: %w", s.mapErr(err))
	}
	return resp.Succeeded, nil
}

// Seats implements store.Store with one range read of the set (a canary
// has at most rollout.MaxCanaryNodes seats): the holders' keys, and the
// slots of the seats taken under a per-subscription bound, whose values
// name their holders and whose keys their subscriptions.
func (s *Store) Seats(ctx context.Context, version string) ([]store.Seat, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list seats: %w", store.ErrClosed)
	}
	if err := cmp.Or(ctx.Err(), store.ValidateSeat(version, "-")); err != nil {
		return nil, fmt.Errorf("list seats: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	set := s.seatsPrefix(version)
	resp, err := s.cli.Get(ctx, set, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list seats: %w", s.mapErr(err))
	}
	var out []store.Seat
	subOf := map[string]string{}
	bad := store.NewUnreadable("seat")
	for _, kv := range resp.Kvs {
		k := string(kv.Key[len(set):])
		if vm, ok := strings.CutPrefix(k, "vm/"); ok {
			since, err := time.Parse(time.RFC3339Nano, string(kv.Value))
			if err != nil {
				bad.Add(fmt.Errorf("key %q: %w", kv.Key, err))
				since = time.Time{}
			}
			out = append(out, store.Seat{VMID: vm, Since: since})
		} else if slot, ok := strings.CutPrefix(k, "sub/"); ok {
			// sub/<subscription>/<slot>, as TakeSeat writes it; any
			// other key there names nobody's subscription.
			if sub, n, ok := strings.Cut(slot, "/"); ok && sub != "" && isSlotNumber(n) {
				subOf[string(kv.Value)] = sub
			}
		}
	}
	for i := range out {
		out[i].SubscriptionID = subOf[out[i].VMID]
	}
	return out, bad.Err()
}

// Watch implements store.Store with etcd watches on the releases (and
// the other records whose changes it signals, the freeze among them), so it
// reports writes from every Store on the same prefix. Besides changes, the
// channel receives a value whenever changes may have been missed: when the
// watch is re-established after an error, and after a compaction. It is
// closed when ctx is done, the store is closed, or after repeated failures
// to re-establish the watch; the consumer then calls Watch again.
//
// Watch reads the current revision first (bounded by RequestTimeout), so a
// write made after Watch returns is always reported.
func (s *Store) Watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(out)
		return out
	}
	s.wg.Add(1)
	s.mu.Unlock()

	var next int64 // 0: from whenever the watch starts, then resync
	rctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	if resp, err := s.cli.Get(rctx, s.seqKey(), clientv3.WithCountOnly()); err == nil {
		next = resp.Header.Revision + 1
	}
	cancel()
	go func() {
		defer s.wg.Done()
		defer close(out)
		// Releases, component configurations, key sets, the kept
		// checkpoint and the freeze (the last two a prefix matching their
		// one key), each on its own watch; when one ends, so do the others,
		// and the consumer re-watches. The freeze must be among them: it
		// is how a replica learns that another one froze (or thawed) the
		// fleet, and without it the autopilot here would go on advancing.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		for _, prefix := range []string{s.releasesPrefix(), s.configsPrefix(), s.keySetsPrefix(), s.checkpointKey(), s.freezeKey()} {
			wg.Go(func() {
				defer cancel()
				s.watch(ctx, out, next, prefix)
			})
		}
		wg.Wait()
	}()
	return out
}

// watch relays changes under prefix from revision next on
// (0: from now, with an initial signal) until ctx is done, the store is
// closed, or maxWatchFailures attempts in a row end without delivering an
// event or progress notification.
func (s *Store) watch(ctx context.Context, out chan<- struct{}, next int64, prefix string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.cancelOnClose(ctx, cancel)

	resync := next == 0
	failures := 0
	for {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithProgressNotify()}
		if next > 0 {
			opts = append(opts, clientv3.WithRev(next))
		}
		compacted := false
		// WithRequireLeader ends the watch if its member loses the leader,
		// so we move to a member that still gets updates.
		for resp := range s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
			switch {
			case resp.CompactRevision != 0:
				// Changes between next and the compaction are gone: the
				// consumer must re-read; go on from the oldest kept revision.
				s.log.Warn("etcd watch compacted; resyncing", "from", next, "compacted", resp.CompactRevision)
				next, compacted = resp.CompactRevision, true
				signal(out)
			case resp.Canceled:
				s.log.Warn("etcd watch canceled", "err", resp.Err())
			case resp.Created:
				if resync {
					resync = false
					signal(out)
				}
			case resp.IsProgressNotify():
				// The watch has caught up to the header revision.
				failures = 0
				next = max(next, resp.Header.Revision+1)
			default:
				failures = 0
				if n := len(resp.Events); n > 0 {
					next = max(next, resp.Events[n-1].Kv.ModRevision+1)
				}
				signal(out)
			}
		}
		if ctx.Err() != nil {
			return
		}
		resync = true
		if compacted {
			continue
		}
		failures++
		if failures >= maxWatchFailures {
			s.log.Warn("etcd watch failed repeatedly; closing it", "attempts", failures)
			return
		}
		s.log.Info("etcd watch ended; re-establishing", "attempt", failures, "next_revision", next)
		if !sleep(ctx, backoff(failures)) {
			return
		}
	}
}

// cancelOnClose calls cancel when the store is closed, or returns when
// ctx ends first.
func (s *Store) cancelOnClose(ctx context.Context, cancel context.CancelFunc) {
	select {
	case <-s.done:
		cancel()
	case <-ctx.Done():
	}
}

// signal sends a change signal without blocking; a pending one suffices.
func signal(out chan<- struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

// backoff returns the wait before watch attempt n (1-based): exponential
// with full jitter, capped.
func backoff(n int) time.Duration {
	d := min(watchBackoffMin<<min(n-1, 10), watchBackoffMax)
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Close stops every watch (closing its channel) and disconnects. Later
// calls return store.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close etcd store: %w", err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// mapErr reports a call cut short by Close as store.ErrClosed.
func (s *Store) mapErr(err error) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	return err
}

var _ store.Beats = (*Store)(nil)

// PutBeat implements store.Beats: one transaction puts the minute's key
// and deletes the keys past store.BeatRetention, bounded by the request
// timeout.
func (s *Store) PutBeat(ctx context.Context, t time.Time) error {
	if s.isClosed() {
		return fmt.Errorf("put beat: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	cutoff := s.beatKey(t.Add(-store.BeatRetention).Unix() / 60)
	_, err := s.cli.Txn(ctx).Then(
		clientv3.OpDelete(s.beatKey(0), clientv3.WithRange(cutoff)),
		clientv3.OpPut(s.beatKey(t.Unix()/60), ""),
	).Commit()
	if err != nil {
		return fmt.Errorf("put beat: %w", s.mapErr(err))
	}
	return nil
}

// Beats implements store.Beats with one range read: at most
// store.BeatRetention's 4,320 keys.
func (s *Store) Beats(ctx context.Context, from time.Time) ([]time.Time, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list beats: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.beatKey(from.Unix()/60), clientv3.WithRange(s.prefix+"beats0"), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list beats: %w", s.mapErr(err))
	}
	out := make([]time.Time, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), s.prefix+"beats/"), 10, 64)
		if err == nil {
			out = append(out, time.Unix(m*60, 0).UTC())
		}
	}
	return out, nil
}
