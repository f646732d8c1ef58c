package attest

import (
	"container/heap"
	"sync"
	"time"
)

// replayCache counts how often each document was accepted while it can
// still be accepted. It holds at most max entries: expired entries go first,
// and when every entry is live the one closest to expiry is evicted (see the
// package documentation for what that costs). Safe for concurrent use.
type replayCache struct {
	mu      sync.Mutex
	max     int
	entries map[[32]byte]*replayEntry
	byExp   expiryHeap
	seq     uint64
}

type replayEntry struct {
	key     [32]byte
	expires time.Time
	seq     uint64 // insertion order, to break ties between equal expiries
	uses    int
}

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, entries: make(map[[32]byte]*replayEntry)}
}

// use records one more acceptance of the document key, which stops being
// acceptable at expires, and returns how many times it has now been
// accepted, this one included.
func (c *replayCache) use(key [32]byte, expires, now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.byExp) > 0 && !now.Before(c.byExp[0].expires) {
		c.remove(heap.Pop(&c.byExp).(*replayEntry))
	}
	if e, ok := c.entries[key]; ok {
		e.uses++
		return e.uses
	}
	if len(c.byExp) >= c.max {
		c.remove(heap.Pop(&c.byExp).(*replayEntry))
	}
	c.seq++
	e := &replayEntry{key: key, expires: expires, seq: c.seq, uses: 1}
	c.entries[key] = e
	heap.Push(&c.byExp, e)
	return 1
}

func (c *replayCache) remove(e *replayEntry) { delete(c.entries, e.key) }

func (c *replayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// expiryHeap is a min-heap of entries by expiry, then insertion order.
type expiryHeap []*replayEntry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if !h[i].expires.Equal(h[j].expires) {
		return h[i].expires.Before(h[j].expires)
	}
	return h[i].seq < h[j].seq
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(*replayEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
