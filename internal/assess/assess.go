// Package assess reads the fleet's evidence once and judges every planned
// release on it: the one assessment the autopilot acts on and that status,
// explain and the dashboard show, so what an operator reads is what the
// autopilot decided on.
package assess

import (
	"context"
	"errors"
	"fmt"
	"time"

	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// Source is the evidence a store holds (store.Store is one).
type Source interface {
	Reports(ctx context.Context) ([]store.Report, error)
	Served(ctx context.Context) ([]store.Served, error)
	Seats(ctx context.Context, version string) ([]store.Seat, error)
}

// Release is one release's assessment.
type Release struct {
	// Counts are its nodes by outcome, Seated included.
	Counts tally.Counts
	// Planned says it has a plan, so Verdict is set.
	Planned bool
	Verdict regression.Verdict
}

// Fleet is every release's assessment at one time.
type Fleet struct {
	Now time.Time
	// Records are the releases assessed, as they were read.
	Records  []rollout.Release
	Tally    tally.Tally
	Releases map[string]Release
	// Unreadable counts, by kind ("report", "served record"), the records
	// the store could not decode, which were left out; Skipped is the
	// first one's error, for the log.
	Unreadable map[string]int
	Skipped    []error
	// Clocks are the corrections the records' times were read with
	// (tally.NewClocks, from the replicas' heartbeats at the read).
	Clocks tally.Clocks
}

// Assess counts the evidence for rels at now and judges those with a plan
// against their baselines. The evidence is src's, read for this call; a
// *Shared src shares the read with the callers assessing at the same time.
func Assess(ctx context.Context, src Source, rels []rollout.Release, now time.Time) (Fleet, error) {
	var ev evidence
	var err error
	if sh, ok := src.(*Shared); ok {
		ev, err = sh.evidence(ctx)
	} else {
		ev, err = readEvidence(ctx, src, now)
	}
	if err != nil {
		return Fleet{}, err
	}
	f := Fleet{Now: now, Records: rels, Releases: make(map[string]Release, len(rels)), Unreadable: map[string]int{}, Clocks: ev.clocks}
	for _, e := range ev.skipped {
		f.skip(e)
	}
	seats := map[string][]store.Seat{}
	for _, r := range rels {
		if !r.HasCanary() {
			continue
		}
		held, err := src.Seats(ctx, r.SeatSet())
		if ev.skip(err) != nil {
			return Fleet{}, fmt.Errorf("list canary seats of %s: %w", r.Version, err)
		}
		f.skip(err) // a seat whose time cannot be read is still a seat
		seats[r.Version] = held
	}
	f.Tally = tally.OfUptime(rels, ev.reports, ev.served, seats, now, ev.uptime(now), ev.clocks)
	for _, r := range rels {
		a := Release{Counts: f.Tally.Releases[r.Version]}
		if r.HasCanary() {
			a.Counts.Seated = uint64(len(seats[r.Version]))
		}
		if p := r.Rollout.Plan; p != nil {
			a.Planned = true
			a.Verdict = regression.Judge(a.Counts, f.Tally.Baseline(rels, r, need(a.Counts, *p)), *p)
		}
		f.Releases[r.Version] = a
	}
	return f, nil
}

// skip takes an *store.UnreadableError in, so one record nobody can read
// never stops a look, and returns any other error.
func (ev *evidence) skip(err error) error {
	var ue *store.UnreadableError
	if !errors.As(err, &ue) {
		return err
	}
	ev.skipped = append(ev.skipped, ue)
	return nil
}

// skip counts an *store.UnreadableError's records as left out.
func (f *Fleet) skip(err error) {
	var ue *store.UnreadableError
	if errors.As(err, &ue) {
		f.Unreadable[ue.Kind] += ue.Count
		f.Skipped = append(f.Skipped, ue)
	}
}

// need is how many judged nodes a baseline must have within its window
// for plan p's current step: a canary's baseline must be at least the
// canary's size, any other at least the plan's floor.
func need(c tally.Counts, p rollout.Plan) uint64 {
	floor := uint64(p.Floor())
	if p.Current().Canary() {
		return max(floor, c.Judged())
	}
	return floor
}
