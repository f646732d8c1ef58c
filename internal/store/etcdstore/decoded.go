package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"nodehotfix/internal/store/kept"
)

// decoded keeps one prefix's values decoded (Reports, Served), by key and
// ModRevision, so that a list decodes only what changed since the last:
// a look's cost was mostly decoding every kept record.
//
// Between lists a watch of the prefix (the feed) applies every change as
// etcd commits it, so a list reads one key's revision to learn where the
// store is, waits until the feed has applied that far, and copies what it
// holds: no scan of the prefix at all. Without a feed (the first list, a
// watch that ended or was compacted, an etcd whose progress notifications
// cannot be relied on, a feed that did not show it caught up within
// catchUpWait) a list reads the prefix's keys without their values, then
// the values of the keys that changed, both at one revision, and reuses
// the rest; then it starts the feed from that revision.
//
// The entries are exactly the prefix's keys at rev in cluster; a list
// that fails leaves them as they were, still true of that revision. A
// revision below rev, or another cluster's ID (a cluster restored from a
// snapshot behind the same endpoints), drops them: revisions are then
// handed out again, and one key's ModRevision may name another value.
// Lists of one prefix take turns (sem), and one waiting for its turn
// gives up when its context ends.
type decoded[T any] struct {
	prefix string
	decode func([]byte) (T, error)

	sem chan struct{} // one slot: the list running

	mu      sync.Mutex // guards the rest, shared with the feed
	rev     int64      // the revision the entries are of; 0: none
	cluster uint64
	// entries are tagged with the ModRevision of the value decoded, and
	// keep a decode error so the key is reported again.
	entries *kept.Set[T]
	scans   uint64        // the scans begun, marking the entries each found
	feed    *feed         // applying the prefix's changes from rev on; nil: none
	moved   chan struct{} // closed (and replaced) when rev moves or the feed ends
	listed  time.Time     // when the last list began; the feed stops feedIdle after
}

// feed is one watch applying a prefix's changes.
type feed struct {
	ctx  context.Context // the watch's, which names its own gRPC stream
	stop context.CancelFunc
}

// newDecoded returns the decoded values of prefix, listed in cmp order.
func newDecoded[T any](prefix string, decode func([]byte) (T, error), cmp func(a, b T) int) *decoded[T] {
	return &decoded[T]{prefix: prefix, decode: decode, sem: make(chan struct{}, 1), entries: kept.New(cmp), moved: make(chan struct{})}
}

const (
	// maxChangedGets is how many changed keys a list without a feed
	// fetches one by one (in transactions of maxReportsPerTxn gets); with
	// more it reads every value again, in pages, decoding only the
	// changed ones.
	maxChangedGets = 2048
	// catchUpWait bounds how long a list waits for the feed to show it
	// applied every change up to the list's revision (its events, or a
	// progress notification it asks for every progressEvery); past it the
	// list reads the prefix itself, and lists keep no feed for
	// followRetry. A healthy feed shows it in milliseconds.
	catchUpWait   = 2 * time.Second
	progressEvery = 100 * time.Millisecond
	// feedIdle is how long a feed outlives the last list: a replica that
	// stopped listing (no longer the leader, an admin read long ago)
	// stops decoding every write. The entries stay, so the next list
	// still decodes only what changed meanwhile.
	feedIdle = 10 * time.Minute
)

// list returns every value under the prefix, decoded, in cmp order, and
// the decode errors of the keys that could not be (each naming its key,
// in key order), as of one revision at or after the call.
func (c *decoded[T]) list(ctx context.Context, s *Store) ([]T, []error, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-c.sem }()
	c.mu.Lock()
	before := c.rev // the feed never runs ahead of the store
	c.listed = time.Now()
	c.mu.Unlock()
	now, err := s.revisionNow(ctx, c.prefix)
	if err != nil {
		return nil, nil, err
	}
	if out, bad, ok := c.caughtUp(ctx, s, now, before); ok {
		return out, bad, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	c.stopFeed()
	// No feed changes the entries now: read them without the lock.
	at, err := c.read(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	follow := s.followable(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rev, c.cluster = at.rev, at.cluster
	if follow {
		c.startFeed(s)
	}
	out, bad := c.snapshot()
	return out, bad, nil
}

// caughtUp returns the entries once the feed has applied every change up
// to now, and false when there is no feed, the entries are not of now's
// history (another cluster, or a revision below before, what the feed had
// applied before now was read: a cluster restored from a snapshot), or
// the feed did not show it within catchUpWait. The feed being past now is
// the usual case under writes: every write since, and a progress
// notification's revision, the whole store's, move it on.
func (c *decoded[T]) caughtUp(ctx context.Context, s *Store, now readPoint, before int64) ([]T, []error, bool) {
	if now.rev < before {
		return nil, nil, false
	}
	deadline := time.NewTimer(catchUpWait)
	defer deadline.Stop()
	var tick <-chan time.Time
	for {
		c.mu.Lock()
		f := c.feed
		if f == nil || now.cluster != c.cluster {
			c.mu.Unlock()
			return nil, nil, false
		}
		if c.rev >= now.rev {
			out, bad := c.snapshot()
			c.mu.Unlock()
			return out, bad, true
		}
		moved := c.moved
		c.mu.Unlock()
		if tick == nil {
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			tick = t.C
			s.requestProgress(f)
		}
		select {
		case <-moved:
		case <-tick:
			// etcd answers a progress request only while the watch is
			// synced, so ask again until it answers.
			s.requestProgress(f)
		case <-deadline.C:
			s.unfollow()
			return nil, nil, false
		case <-ctx.Done():
			return nil, nil, false
		}
	}
}

// snapshot returns the entries' values and decode errors (the latter in
// key order, so the first reported is the first key a scan finds); c.mu
// held.
func (c *decoded[T]) snapshot() ([]T, []error) {
	out, badKeys := c.entries.List()
	bad := make([]error, len(badKeys))
	for i, k := range badKeys {
		bad[i] = fmt.Errorf("key %q: %w", k, c.entries.Get(k).Err)
	}
	return out, bad
}

// startFeed starts a watch applying the prefix's changes after c.rev;
// c.mu held. It stops with the store.
func (c *decoded[T]) startFeed(s *Store) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	// Its own metadata gives the feed its own gRPC stream, so a progress
	// request waits on this watch alone: etcd answers one only when every
	// watch of the stream is synced.
	ctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(context.Background()), "nodehotfix-feed", c.prefix)
	ctx, cancel := context.WithCancel(ctx)
	f := &feed{ctx: ctx, stop: cancel}
	c.feed = f
	from := c.rev + 1
	go func() {
		defer s.wg.Done()
		defer cancel()
		go s.cancelOnClose(ctx, cancel)
		c.follow(s, f, from)
	}()
}

// stopFeed stops the feed, if any; once it returns the feed changes
// nothing.
func (c *decoded[T]) stopFeed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.feed != nil {
		c.feed.stop()
		c.end()
	}
}

// end drops the feed and wakes those waiting on it; c.mu held.
func (c *decoded[T]) end() {
	c.feed = nil
	close(c.moved)
	c.moved = make(chan struct{})
}

// event is one change the feed applies, decoded.
type event[T any] struct {
	key  string
	gone bool
	e    kept.Entry[T]
}

// follow applies the prefix's changes from revision from on until the
// watch ends (stopped, compacted, canceled, or its member lost the
// leader) or a change or progress notification comes feedIdle after the
// last list; then the next list reads the prefix itself.
func (c *decoded[T]) follow(s *Store, f *feed, from int64) {
	w := s.cli.Watch(f.ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for resp := range w {
		if resp.CompactRevision != 0 || resp.Canceled || resp.Err() != nil {
			if f.ctx.Err() == nil {
				s.log.Info("etcd feed ended; the next list reads the prefix", "prefix", c.prefix, "from", from, "compacted", resp.CompactRevision, "err", resp.Err())
			}
			break
		}
		if resp.Created {
			continue
		}
		// A response's events end at a revision's last (etcd never splits
		// one revision's events, unless asked to fragment); a progress
		// notification says every change up to its header's revision was
		// sent, and etcd sends one only to a watch that is synced.
		rev := resp.Header.Revision
		changes := make([]event[T], len(resp.Events))
		for i, ev := range resp.Events {
			changes[i] = event[T]{key: string(ev.Kv.Key), gone: ev.Type == mvccpb.DELETE}
			if !changes[i].gone {
				changes[i].e = c.entry(ev.Kv, 0)
			}
			rev = ev.Kv.ModRevision
		}
		c.mu.Lock()
		if c.feed != f {
			c.mu.Unlock()
			return
		}
		if time.Since(c.listed) > feedIdle {
			c.end()
			c.mu.Unlock()
			s.log.Info("etcd feed idle; stopped until the next list", "prefix", c.prefix, "idle", feedIdle)
			return
		}
		for _, ch := range changes {
			if ch.gone {
				c.entries.Delete(ch.key)
			} else {
				c.entries.Put(ch.key, ch.e)
			}
		}
		if rev > c.rev {
			c.rev = rev
			close(c.moved)
			c.moved = make(chan struct{})
		}
		c.mu.Unlock()
		from = rev + 1
	}
	c.mu.Lock()
	if c.feed == f {
		c.end()
	}
	c.mu.Unlock()
}

// read brings the entries to the prefix now and returns where it read.
// No feed may change them meanwhile. Each entry stays true of its key's
// value at the entry's ModRevision whatever fails, so a list that fails
// half-way leaves what the next needs; keys gone are forgotten only by a
// read that succeeds.
func (c *decoded[T]) read(ctx context.Context, s *Store) (readPoint, error) {
	var at readPoint
	c.scans++
	mark := c.scans
	if c.rev == 0 {
		return c.readAll(ctx, s, at, mark)
	}
	var changed []string
	err := s.scanAt(ctx, c.prefix, &at, true, func(kv *mvccpb.KeyValue) error {
		k := string(kv.Key)
		if e := c.entries.Get(k); e != nil && e.Tag == uint64(kv.ModRevision) {
			e.Mark = mark
		} else {
			changed = append(changed, k)
		}
		return nil
	})
	switch {
	case err != nil:
		return at, err
	case at.rev < c.rev || at.cluster != c.cluster:
		// Not the history the entries are of: read it all, at the
		// revision the keys were listed at.
		c.entries.Reset()
		return c.readAll(ctx, s, readPoint{rev: at.rev}, mark)
	case len(changed) > maxChangedGets:
		return c.readAll(ctx, s, at, mark)
	}
	for chunk := range slices.Chunk(changed, maxReportsPerTxn) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k, clientv3.WithRev(at.rev))
		}
		tctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		resp, err := s.cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return at, s.mapErr(err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				c.entries.Put(string(kv.Key), c.entry(kv, mark))
			}
		}
	}
	for _, k := range changed {
		if e := c.entries.Get(k); e == nil || e.Mark != mark {
			// At one revision a key listed is there to read.
			return at, fmt.Errorf("key %q listed at revision %d but not read at it", k, at.rev)
		}
	}
	c.entries.DeleteUnmarked(mark)
	return at, nil
}

// readAll reads every value under the prefix in pages at at.rev (0: the
// current revision), decoding those whose entry is not of the same
// ModRevision, and marks what it found with mark.
func (c *decoded[T]) readAll(ctx context.Context, s *Store, at readPoint, mark uint64) (readPoint, error) {
	err := s.scanAt(ctx, c.prefix, &at, false, func(kv *mvccpb.KeyValue) error {
		k := string(kv.Key)
		if e := c.entries.Get(k); e != nil && e.Tag == uint64(kv.ModRevision) {
			e.Mark = mark
		} else {
			c.entries.Put(k, c.entry(kv, mark))
		}
		return nil
	})
	if err != nil {
		return at, err
	}
	c.entries.DeleteUnmarked(mark)
	return at, nil
}

func (c *decoded[T]) entry(kv *mvccpb.KeyValue, mark uint64) kept.Entry[T] {
	v, err := c.decode(kv.Value)
	return kept.Entry[T]{Tag: uint64(kv.ModRevision), Mark: mark, V: v, Err: err}
}

// revisionNow returns the store's current revision and cluster, read (as
// every read here, linearizably) from one key's count, so every write that
// finished before the call is at or below it.
func (s *Store) revisionNow(ctx context.Context, key string) (readPoint, error) {
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return readPoint{}, s.mapErr(err)
	}
	return readPoint{rev: resp.Header.Revision, cluster: resp.Header.ClusterId}, nil
}

// requestProgress asks etcd for a progress notification on f's stream.
func (s *Store) requestProgress(f *feed) {
	if err := s.cli.RequestProgress(f.ctx); err != nil && f.ctx.Err() == nil {
		s.log.Debug("etcd progress request", "err", err)
	}
}

// followable reports whether lists may keep a feed: whether every member
// the client's endpoints reach runs an etcd whose progress notifications
// never run ahead of the events they cover (3.4.31, 3.5.13 or later, the
// versions Kubernetes requires to serve consistent lists from its watch
// cache). A member that does not answer, or one too old, is asked again
// after followRetry, as after a feed that did not catch up (unfollow).
func (s *Store) followable(ctx context.Context) bool {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	if s.follow || time.Now().Before(s.followAgain) {
		return s.follow
	}
	s.followAgain = time.Now().Add(followRetry)
	for _, ep := range s.cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
		resp, err := s.cli.Status(sctx, ep)
		cancel()
		if err != nil {
			s.log.Info("etcd member's version unknown; lists read the keys for now", "endpoint", ep, "err", err, "retry", followRetry)
			return false
		}
		if !progressKeepsOrder(resp.Version) {
			s.log.Warn("etcd member too old for a feed of the lists; they read the keys", "endpoint", ep, "version", resp.Version, "retry", followRetry)
			return false
		}
	}
	s.follow = true
	return true
}

// unfollow stops lists keeping feeds for followRetry: one did not show
// it caught up (an etcd proxy that drops progress requests, a stuck
// member), and a list that waits for that each time costs catchUpWait.
func (s *Store) unfollow() {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	if s.follow {
		s.log.Warn("etcd feed did not catch up; lists read the keys", "wait", catchUpWait, "retry", followRetry)
	}
	s.follow, s.followAgain = false, time.Now().Add(followRetry)
}

// followRetry is how long lists read the keys themselves before trying a
// feed again.
const followRetry = 10 * time.Minute

// progressKeepsOrder reports whether etcd version v sends progress
// notifications only after the events they cover.
func progressKeepsOrder(v string) bool {
	var n [3]int
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) != 3 {
		return false
	}
	for i, p := range parts {
		p, _, _ = strings.Cut(p, "-") // 3.6.0-rc.1
		x, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		n[i] = x
	}
	switch {
	case n[0] != 3:
		return n[0] > 3
	case n[1] == 5:
		return n[2] >= 13
	case n[1] == 4:
		return n[2] >= 31
	}
	return n[1] > 5
}
