package lps

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	rel "nodehotfix/internal/release"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// logStore is what serving reads of the store's transparency log: stored
// hashes for proofs and records for the index (store.Log has both).
type logStore interface {
	LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error)
	LogRecords(ctx context.Context, start, end int64) ([][]byte, error)
}

// Bounds of what serving keeps of the log in memory.
const (
	// maxCachedHashes bounds the stored hashes kept (32 bytes each): proofs
	// touch about 2·log2(size) of them, mostly the same ones, so a few
	// thousand serve every node after the first few.
	maxCachedHashes = 1 << 16
	// logReadTimeout bounds one store read of hashes made while answering
	// a node, which waits for at most servedWait in all.
	logReadTimeout = 2 * time.Second
	// logRecordsBatch is how many records an index update reads per call.
	logRecordsBatch = 1000
	// indexBudget bounds one snapshot load's reading of the log: a
	// replica starting on a long log indexes it over several loads, and a
	// slow store never holds up a revocation.
	indexBudget = 10 * time.Second
)

// hashCache reads stored log hashes through a bounded cache. Stored hashes
// never change once written (the log is append-only), so a cached one is
// never stale. Safe for concurrent use.
type hashCache struct {
	st logStore
	mu sync.Mutex
	m  map[int64]tlog.Hash
}

func newHashCache(st logStore) *hashCache {
	return &hashCache{st: st, m: make(map[int64]tlog.Hash)}
}

// reader returns a tlog.HashReader that reads through the cache within ctx.
func (c *hashCache) reader(ctx context.Context) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		var missing []int64
		var at []int
		c.mu.Lock()
		for i, x := range indexes {
			if h, ok := c.m[x]; ok {
				out[i] = h
			} else {
				missing = append(missing, x)
				at = append(at, i)
			}
		}
		c.mu.Unlock()
		if len(missing) == 0 {
			return out, nil
		}
		ctx, cancel := context.WithTimeout(ctx, logReadTimeout)
		defer cancel()
		hs, err := c.st.LogHashes(ctx, missing)
		if err != nil {
			return nil, err
		}
		if len(hs) != len(missing) {
			return nil, fmt.Errorf("read log hashes: %d for %d indexes", len(hs), len(missing))
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.m)+len(hs) > maxCachedHashes {
			// Crude but bounded: start over rather than track use.
			clear(c.m)
		}
		for i, h := range hs {
			out[at[i]] = h
			c.m[missing[i]] = h
		}
		return out, nil
	})
}

// logIndex maps the hash of each release envelope in the log to its
// index: the records a snapshot may serve proofs of. The log only grows,
// so an update reads only the records after the last it read; it keeps
// only release envelopes, so memory grows with the releases ever
// published, not with the log. Safe for concurrent use.
type logIndex struct {
	mu   sync.Mutex
	size int64
	m    map[tlog.Hash]int64
}

// update reads the records from the index's size up to size. It stops at
// ctx's deadline with what it read so far kept: the next update goes on
// from there.
func (x *logIndex) update(ctx context.Context, st logStore, size int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = make(map[tlog.Hash]int64)
	}
	for x.size < size {
		end := min(size, x.size+logRecordsBatch)
		recs, err := st.LogRecords(ctx, x.size, end)
		if err != nil {
			return fmt.Errorf("read log records [%d, %d): %w", x.size, end, err)
		}
		if len(recs) == 0 {
			return fmt.Errorf("read log records [%d, %d): none returned", x.size, end)
		}
		for _, r := range recs {
			if rel.LooksLikeRelease(r) {
				if h := tlog.RecordHash(r); !hasKey(x.m, h) {
					x.m[h] = x.size
				}
			}
			x.size++
		}
	}
	return nil
}

func hasKey(m map[tlog.Hash]int64, h tlog.Hash) bool {
	_, ok := m[h]
	return ok
}

// lookup returns the index of the first record hashing to h.
func (x *logIndex) lookup(h tlog.Hash) (int64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	i, ok := x.m[h]
	return i, ok
}

// servedLog is what one snapshot serves of the transparency log: the kept
// checkpoint, the inclusion proofs of the release envelopes it may serve
// under it, and the key-set chain. Consistency proofs depend on what each node
// declares and are computed on demand through the shared hash cache.
type servedLog struct {
	note   []byte // the kept checkpoint, cosigned; nil when none
	size   int64
	proofs map[tlog.Hash]translog.InclusionProof
	// keySets are the chain's links in version order, without a hole: a
	// link that cannot be read ends the chain served.
	keySets []store.KeySetRecord
	hashes  *hashCache
}

// consistencyWait bounds the store reads of one consistency proof while a
// node waits; past it the node is served no proof (and, if its key set
// requires the log, runs its baked agent this boot).
const consistencyWait = 500 * time.Millisecond

// links returns the chain's links after version have, oldest first.
func (l *servedLog) links(have int64) []json.RawMessage {
	var out []json.RawMessage
	for _, k := range l.keySets {
		if k.Version > have {
			out = append(out, json.RawMessage(k.Envelope))
		}
	}
	return out
}

// bundle returns the log evidence for a node served records (release
// envelopes) that declared a checkpoint of size from: the
// checkpoint, a proof for each record logged under it and, when it can be
// computed in time, a consistency proof from the node's size. nil when
// there is no checkpoint.
func (l *servedLog) bundle(ctx context.Context, records []json.RawMessage, from int64) (json.RawMessage, error) {
	if l.note == nil {
		return nil, nil
	}
	b := translog.Bundle{Checkpoint: l.note, Proofs: make(map[tlog.Hash]translog.InclusionProof, len(records))}
	for _, r := range records {
		h := tlog.RecordHash(r)
		if p, ok := l.proofs[h]; ok {
			b.Proofs[h] = p
		}
	}
	if from > 0 && from < l.size {
		ctx, cancel := context.WithTimeout(ctx, consistencyWait)
		defer cancel()
		if p, err := tlog.ProveTree(l.size, from, l.hashes.reader(ctx)); err == nil {
			b.Consistency = &translog.ConsistencyProof{From: from, Hashes: p}
		}
	}
	return b.Marshal()
}
