package lps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/lpswire"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/uuid"
)

// seatTimeout bounds what a request spends on canary seats: waiting for
// this replica's take in flight for the same release, then the store's. A
// node that runs out is served as if it held no seat; nodes give up after
// 3 s, and attestation and the answer need well under the other 2.
const seatTimeout = time.Second

// Metadata our node client sends with GetComponentConfig (the keys are
// lpswire's, shared with the node client; the reference sends none):
//
//   - lpswire.BaseMetadata: the node's image base, so it is served only that base's
//     release and revocations (rollout.Node.Base);
//   - lpswire.ReportsMetadata "1": the node reports its outcome afterwards (launch),
//     so it may take a canary seat of its base's release: a node that never
//     reports would hold a seat it can only fill with silence;
//   - lpswire.BootMetadata, with lpswire.ReportsMetadata: the kernel boot ID its report will
//     carry, so the service records that it served that boot (store.Served)
//     and the node counts for the release whether its report arrives or not;
//   - lpswire.KeySetMetadata: the newest release key-set version the node verified,
//     so it is served the chain's links after it (a node that sends none
//     is taken to hold version 1, the baked root);
//   - lpswire.LogSizeMetadata: the size of the last log checkpoint the node kept,
//     so it is served a proof that the served checkpoint extends it.

// caller is what a node declared in its request's metadata.
type caller struct {
	base    string // "" if none, or not a base
	reports bool
	boot    string // "" unless it reports and sent a UUID
	// keySet and logSize are 0 when not declared, or not a positive
	// decimal integer.
	keySet, logSize int64
}

// declared reads what the caller declared.
func declared(ctx context.Context) caller {
	var c caller
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(lpswire.BaseMetadata); len(v) == 1 {
		if b, err := hotfix.ParseBase(v[0]); err == nil {
			c.base = b
		}
	}
	r := md.Get(lpswire.ReportsMetadata)
	c.reports = len(r) == 1 && r[0] == "1"
	if v := md.Get(lpswire.BootMetadata); c.reports && len(v) == 1 {
		if _, ok := uuid.Canonical(v[0]); ok {
			c.boot = v[0]
		}
	}
	c.keySet = positive(md.Get(lpswire.KeySetMetadata))
	c.logSize = positive(md.Get(lpswire.LogSizeMetadata))
	return c
}

// positive returns the one value of vs as a positive int64, else 0.
func positive(vs []string) int64 {
	if len(vs) != 1 || len(vs[0]) > 19 {
		return 0
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// seatStore is the store's canary-seat half (store.Store has it).
type seatStore interface {
	TakeSeat(ctx context.Context, version string, seat store.Seat, limit store.SeatLimit) (bool, error)
	HoldsSeat(ctx context.Context, version, vmID string) (bool, error)
	Seats(ctx context.Context, version string) ([]store.Seat, error)
}

// Seat take results, for lpsd_canary_seat_requests_total.
const (
	seatTaken = "taken" // the store gave the node a seat, or it held one
	seatFull  = "full"  // every seat is held by other nodes
	seatError = "error" // the store failed or the request ran out of time
	// seatSubscription: the node's subscription holds its share of the
	// seats (rollout.Release.SeatsPerSubscription).
	seatSubscription = "subscription"
	// seatLate: the store gave the seat after the request stopped waiting,
	// so the node holds a seat but was not served this time. It is served
	// on its next request; a canary with late seats has fewer nodes that
	// ran the hotfix than seats (they report into the control cohort).
	seatLate = "late"
)

// Seats hands out the canary seats of releases at a canary step
// (rollout.PlanStep.Nodes) to the in-scope nodes of their base that ask,
// through the store, which makes them exact across replicas; and it
// remembers the holders it learns of, so a holder stays served on this
// replica through the later steps. The snapshot carries the holders every
// replica had seated when it was built (it is rebuilt on every release
// change and every 30 s); Seats adds those seated here, or learned from the
// store, since.
type Seats struct {
	st     seatStore
	result func(string)

	mu  sync.Mutex
	rel map[string]*seatSet
	rev atomic.Int64 // the snapshot revision rel was last pruned at
}

// seatSet is one release's seats as this replica knows them.
type seatSet struct {
	// take admits one store call taking a seat at a time per release per
	// replica, so replicas, not requests, contend in the store, and a
	// stalled store holds one goroutine per release, not one per request;
	// read does the same for the reads of Holds, which have their own
	// slot so that reports from VMs holding no seat never queue the takes.
	take, read chan struct{}
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
		set = &seatSet{take: make(chan struct{}, 1), read: make(chan struct{}, 1), held: make(map[string]bool)}
		s.rel[version] = set
	}
	return set
}

// Held returns the versions of snap's releases whose canary seat n holds.
// For a node that declared its base (n.Base) and that it reports, it first
// takes a free seat of the release of that base that would be chosen for
// it, if that one is at an open canary step. All of it within seatTimeout;
// a nil Seats, or a failing store, takes none.
func (s *Seats) Held(ctx context.Context, snap *Snapshot, n rollout.Node, reports bool) []string {
	if len(snap.canaries) == 0 {
		// No release serves seat holders: the usual case costs nothing.
		return nil
	}
	s.prune(snap)
	var out []string
	for _, i := range snap.canaries {
		if r := snap.Releases[i]; snap.Seats[r.Version][n.VMID] || s.knows(r.SeatSet(), n.VMID) {
			out = append(out, r.Version)
		}
	}
	if s == nil || n.Base == "" || !reports {
		return out
	}
	r, limit := openCanary(snap, n, out)
	if limit == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, seatTimeout)
	defer cancel()
	seat := store.Seat{VMID: n.VMID, SubscriptionID: n.SubscriptionID}
	if s.take(ctx, r.SeatSet(), seat, store.SeatLimit{Seats: limit, PerSubscription: r.SeatsPerSubscription(limit)}) {
		out = append(out, r.Version)
	}
	return out
}

// openCanary returns the release of base that n would be served if it
// held a seat, and that release's seat count, when that release is at an
// open canary step and n holds none of its seats; else 0. A release of a
// higher patch that already includes n is chosen over any canary.
func openCanary(snap *Snapshot, n rollout.Node, held []string) (rollout.Release, int) {
	var best rollout.Release
	bestPatch := -1
	seated := n
	seated.Seats = append(slices.Clip(held), "")
	for _, r := range snap.Releases {
		v, err := hotfix.ParseVersion(r.Version)
		if err != nil || v.Base() != n.Base || v.Patch() <= bestPatch {
			continue
		}
		// A seat can make only a canary release include n.
		probe := n
		if r.HasCanary() {
			seated.Seats[len(seated.Seats)-1] = r.Version
			probe = seated
		}
		if ok, _ := r.Includes(probe); ok {
			best, bestPatch = r, v.Patch()
		}
	}
	if bestPatch < 0 || slices.Contains(held, best.Version) {
		return best, 0
	}
	return best, best.OpenSeats(n)
}

// prune forgets the releases that no longer serve seat holders, once per
// snapshot revision, so the memory Seats holds is bounded by the canaries
// that run.
func (s *Seats) prune(snap *Snapshot) {
	if s == nil || s.rev.Load() == snap.Revision {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev.Store(snap.Revision)
	live := make(map[string]bool, len(snap.canaries))
	for _, i := range snap.canaries {
		live[snap.Releases[i].SeatSet()] = true
	}
	for v := range s.rel {
		if !live[v] {
			delete(s.rel, v)
		}
	}
}

// Holds reports whether vmID holds a seat of r's canary, as the snapshot
// or this replica knows, else as the store says (within seatTimeout). It
// never takes a seat. An error means the store could not say.
func (s *Seats) Holds(ctx context.Context, snap *Snapshot, r rollout.Release, vmID string) (bool, error) {
	if !r.HasCanary() {
		return false, nil
	}
	if snap.Seats[r.Version][vmID] || s.knows(r.SeatSet(), vmID) {
		return true, nil
	}
	if s == nil {
		return false, nil
	}
	set := s.set(r.SeatSet())
	s.mu.Lock()
	complete := set.fullAt > 0 && set.fullAt >= mostSeats(r)
	s.mu.Unlock()
	if complete {
		// Every seat is held, and this replica learned every holder when
		// the store said so: vmID is none of them.
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, seatTimeout)
	defer cancel()
	held, err := s.call(ctx, set.read, func(ctx context.Context) (bool, error) {
		return s.st.HoldsSeat(ctx, r.SeatSet(), vmID)
	})
	if err != nil {
		s.result(seatError)
		return false, err
	}
	if held {
		s.mu.Lock()
		set.held[vmID] = true
		s.mu.Unlock()
	}
	return held, nil
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

// mostSeats is how many seats r's canary can have had so far: the most
// of its steps up to the current one (a later canary step adds seats).
func mostSeats(r rollout.Release) int {
	p := r.Rollout.Plan
	if p == nil {
		return 0
	}
	n := 0
	for i := 0; i <= p.Step && i < len(p.Steps); i++ {
		n = max(n, p.Steps[i].Nodes)
	}
	return n
}

// call runs f, a store call for one release, once slot (its seatSet's
// take or read) is free, and returns when f does or ctx ends. A call that
// outlives ctx keeps the slot until it returns, so a stalled store never
// has more than one call of each kind per release from this replica.
func (s *Seats) call(ctx context.Context, slot chan struct{}, f func(context.Context) (bool, error)) (bool, error) {
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-slot }()
		ok, err := f(ctx)
		done <- result{ok, err}
	}()
	select {
	case r := <-done:
		return r.ok, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// take asks the store for a seat, unless this replica knows the seats are
// all held at limit.
func (s *Seats) take(ctx context.Context, version string, seat store.Seat, limit store.SeatLimit) bool {
	set := s.set(version)
	s.mu.Lock()
	full := set.fullAt >= limit.Seats
	s.mu.Unlock()
	if full {
		s.result(seatFull)
		return false
	}
	seat.Since = time.Now()
	held, err := s.call(ctx, set.take, func(ctx context.Context) (bool, error) {
		held, err := s.st.TakeSeat(ctx, version, seat, limit)
		if held && ctx.Err() != nil {
			s.mu.Lock()
			set.held[seat.VMID] = true
			s.mu.Unlock()
			s.result(seatLate)
		}
		if err != nil || held {
			return held, err
		}
		// Full: learn every holder before saying so, or a holder seated by
		// another replica would be refused here from now on.
		holders, err := s.st.Seats(ctx, version)
		var ue *store.UnreadableError
		if err != nil && !errors.As(err, &ue) { // a seat whose time cannot be read is still a seat
			return false, fmt.Errorf("list the seats of a full canary: %w", err)
		}
		s.mu.Lock()
		for _, h := range holders {
			set.held[h.VMID] = true
		}
		set.fullAt = max(set.fullAt, limit.Seats)
		s.mu.Unlock()
		return false, nil
	})
	switch {
	case errors.Is(err, store.ErrSubscriptionSeats):
		// Full for this subscription only: the others may still take.
		s.result(seatSubscription)
		return false
	case err != nil:
		s.result(seatError)
		return false
	case held:
		s.mu.Lock()
		set.held[seat.VMID] = true
		s.mu.Unlock()
		s.result(seatTaken)
		return true
	}
	s.result(seatFull)
	return false
}
