package lps

import (
	"context"
	"sync"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// seatTimeout bounds what a request spends on canary seats: waiting for
// this replica's take in flight for the same release, then the store's.
// A node that runs out is served as if it held no seat; nodes give up
// after 3 s.
const seatTimeout = 500 * time.Millisecond

// seatStore is the store's canary-seat half (store.Store has it).
type seatStore interface {
	TakeSeat(ctx context.Context, version string, seat store.Seat, limit int) (bool, error)
	Seats(ctx context.Context, version string) ([]store.Seat, error)
}

// Seat take results, for lpsd_canary_seats_total.
const (
	seatTaken = "taken" // the store gave the node a seat, or it held one
	seatFull  = "full"  // every seat is held by other nodes
	seatError = "error" // the store failed or the request ran out of time
)

// Seats hands out the canary seats of releases at a canary step
// (rollout.PlanStep.Nodes) to the in-scope nodes that ask, through the
// store, which makes them exact across replicas; and it remembers the
// holders it learns of, so a holder stays served on this replica through
// the later steps. The snapshot carries the holders every replica had seated when it
// was built (it is rebuilt on every release change and every 30 s); Seats
// adds those seated here, or learned from the store, since.
type Seats struct {
	st     seatStore
	result func(string)

	mu  sync.Mutex
	rel map[string]*seatSet
}

// seatSet is one release's seats as this replica knows them.
type seatSet struct {
	// take admits one take at a time per release per replica, so
	// replicas, not requests, contend in the store.
	take chan struct{}
	// held and fullAt are guarded by Seats.mu. fullAt is the largest
	// limit the store refused a seat at; held then lists every holder.
	held   map[string]bool
	fullAt int
}

// NewSeats returns Seats over st; result (may be nil) is called with each
// take's result.
func NewSeats(st seatStore, result func(string)) *Seats {
	if result == nil {
		result = func(string) {}
	}
	return &Seats{st: st, result: result, rel: make(map[string]*seatSet)}
}

func (s *Seats) set(version string) *seatSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.rel[version]
	if set == nil {
		set = &seatSet{take: make(chan struct{}, 1), held: make(map[string]bool)}
		s.rel[version] = set
	}
	return set
}

// Held returns the versions of snap's releases whose canary seat n holds,
// taking a free seat for n of each release at an open canary step. A nil
// Seats, or a failing store, takes none.
func (s *Seats) Held(ctx context.Context, snap *Snapshot, n rollout.Node) []string {
	var out []string
	for _, i := range snap.canaries {
		r := snap.Releases[i]
		if snap.Seats[r.Version][n.VMID] || s.knows(r.Version, n.VMID) {
			out = append(out, r.Version)
			continue
		}
		if limit := r.OpenSeats(n); limit > 0 && s != nil && s.take(ctx, r.Version, n.VMID, limit) {
			out = append(out, r.Version)
		}
	}
	return out
}

// Holds reports whether vmID holds a seat of r's canary, as the snapshot
// or this replica knows, else as the store says (bounded by seatTimeout;
// false on error). It never takes a seat.
func (s *Seats) Holds(ctx context.Context, snap *Snapshot, r rollout.Release, vmID string) bool {
	if !r.HasCanary() {
		return false
	}
	if snap.Seats[r.Version][vmID] || s.knows(r.Version, vmID) {
		return true
	}
	if s == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, seatTimeout)
	defer cancel()
	held, err := s.st.TakeSeat(ctx, r.Version, store.Seat{VMID: vmID}, 0)
	if err != nil {
		s.result(seatError)
		return false
	}
	if held {
		set := s.set(r.Version)
		s.mu.Lock()
		set.held[vmID] = true
		s.mu.Unlock()
	}
	return held
}

// knows reports whether this replica learned that vmID holds a seat.
func (s *Seats) knows(version, vmID string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.rel[version]
	return set != nil && set.held[vmID]
}

// take asks the store for a seat, unless this replica knows the seats are
// all held at limit.
func (s *Seats) take(ctx context.Context, version, vmID string, limit int) bool {
	set := s.set(version)
	s.mu.Lock()
	full := set.fullAt >= limit
	s.mu.Unlock()
	if full {
		s.result(seatFull)
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, seatTimeout)
	defer cancel()
	select {
	case set.take <- struct{}{}:
		defer func() { <-set.take }()
	case <-ctx.Done():
		s.result(seatError)
		return false
	}
	held, err := s.st.TakeSeat(ctx, version, store.Seat{VMID: vmID, Since: time.Now()}, limit)
	if err != nil {
		s.result(seatError)
		return false
	}
	if held {
		s.mu.Lock()
		set.held[vmID] = true
		s.mu.Unlock()
		s.result(seatTaken)
		return true
	}
	// Full: learn every holder before saying so, or a holder seated by
	// another replica would be refused here from now on.
	holders, err := s.st.Seats(ctx, version)
	if err != nil {
		s.result(seatError)
		return false
	}
	s.mu.Lock()
	for _, seat := range holders {
		set.held[seat.VMID] = true
	}
	set.fullAt = max(set.fullAt, limit)
	s.mu.Unlock()
	s.result(seatFull)
	return false
}
