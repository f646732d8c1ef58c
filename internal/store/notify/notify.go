// Package notify fans coalesced change signals out to in-process watchers.
package notify

import (
	"context"
	"sync"
)

// Hub delivers change signals to subscribers. Each subscriber's channel has
// a buffer of one, so a burst of Notify calls coalesces into one pending
// signal and Notify never blocks on a slow reader. The zero Hub is ready to
// use; it is safe for concurrent use.
type Hub struct {
	mu     sync.Mutex
	subs   map[*sub]struct{}
	closed bool
}

type sub struct {
	ch   chan struct{}
	stop func() bool // unregisters the ctx callback
}

// Subscribe returns a channel that receives a value after each Notify. It is
// closed when ctx is done or the hub is closed; after Close it is returned
// already closed.
func (h *Hub) Subscribe(ctx context.Context) <-chan struct{} {
	s := &sub{ch: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || ctx.Err() != nil {
		close(s.ch)
		return s.ch
	}
	if h.subs == nil {
		h.subs = make(map[*sub]struct{})
	}
	h.subs[s] = struct{}{}
	// The callback takes h.mu, so it runs after this function unlocks.
	s.stop = context.AfterFunc(ctx, func() { h.remove(s) })
	return s.ch
}

// Notify signals every subscriber without blocking.
func (h *Hub) Notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- struct{}{}:
		default: // a signal is already pending
		}
	}
}

// Close closes every subscriber's channel; later Subscribe calls return a
// closed channel. Close is idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		s.stop()
		close(s.ch)
	}
	h.subs = nil
}

func (h *Hub) remove(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}
