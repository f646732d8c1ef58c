package assess

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// Shared is a Source whose evidence (the reports, served records and
// beats, what a look decodes) is read once for the callers that assess at
// the same time: an autopilot look, status, explain, the dashboard's
// refresh and the nodes list cost one or two reads of the store between
// them, not one each, so readers who arrive together cannot pile up
// reads that each decode every kept record.
//
// Every caller still sees every write that finished before it called: it
// gets a read that began after it called. A caller that arrives while a
// read runs waits for the next one, which starts when that one ends and
// serves everyone who arrived meanwhile; so at most one read runs at a
// time and a caller waits for at most two. The read runs on its own
// context, bounded by ReadTimeout, so a caller that gives up does not fail
// the others.
type Shared struct {
	src Source

	mu      sync.Mutex
	running bool
	next    *sharedRead // the read those arriving now wait for
}

// ReadTimeout bounds one shared read of the evidence.
const ReadTimeout = 2 * time.Minute

// sharedRead is one read of the evidence and those waiting for it.
type sharedRead struct {
	done chan struct{}
	// callers counts those who asked for it (guarded by Shared.mu).
	callers int
	ev      evidence
	err     error
}

// evidence is what Assess reads besides the releases and their seats.
type evidence struct {
	reports []store.Report
	served  []store.Served
	// beats are the store's marked minutes from beatsFrom on, and those
	// in which a record was stamped, ascending (ok: the store keeps marks
	// and they were read).
	beats     []time.Time
	beatsFrom time.Time
	beatsOK   bool
	// clocks are the replicas' clock offsets, measured as the evidence
	// was read (store.ReplicaLister's heartbeats; nil: none corrected).
	clocks tally.Clocks
	// skipped are the lists' notes of records nobody could read
	// (*store.UnreadableError), which a look counts and goes on without.
	skipped []error
}

// NewShared returns a Shared reading src.
func NewShared(src Source) *Shared { return &Shared{src: src} }

// Reports, Served and Seats are src's, read alone: Assess reads the
// evidence through evidence instead.
func (s *Shared) Reports(ctx context.Context) ([]store.Report, error) { return s.src.Reports(ctx) }
func (s *Shared) Served(ctx context.Context) ([]store.Served, error)  { return s.src.Served(ctx) }
func (s *Shared) Seats(ctx context.Context, version string) ([]store.Seat, error) {
	return s.src.Seats(ctx, version)
}

// evidence returns a read of the evidence that began after the call.
func (s *Shared) evidence(ctx context.Context) (evidence, error) {
	s.mu.Lock()
	r := s.next
	if r == nil {
		r = &sharedRead{done: make(chan struct{})}
		s.next = r
	}
	r.callers++
	if !s.running {
		s.running, s.next = true, nil
		go s.run(r)
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.ev, r.err
	case <-ctx.Done():
		return evidence{}, ctx.Err()
	}
}

// waiting returns how many callers wait for the read after the running
// one.
func (s *Shared) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		return 0
	}
	return s.next.callers
}

// run makes read r, then the one that gathered its callers meanwhile,
// until none did.
func (s *Shared) run(r *sharedRead) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
		r.ev, r.err = readEvidence(ctx, s.src, time.Now())
		cancel()
		close(r.done)
		s.mu.Lock()
		r, s.next = s.next, nil
		s.running = r != nil
		s.mu.Unlock()
	}
}

// readEvidence reads src's evidence for looks at about now.
func readEvidence(ctx context.Context, src Source, now time.Time) (evidence, error) {
	start := time.Now()
	var ev evidence
	var err error
	ev.reports, err = src.Reports(ctx)
	if err = ev.skip(err); err != nil {
		return evidence{}, fmt.Errorf("list reports: %w", err)
	}
	ev.served, err = src.Served(ctx)
	if err = ev.skip(err); err != nil {
		return evidence{}, fmt.Errorf("list served records: %w", err)
	}
	if rl, ok := src.(store.ReplicaLister); ok {
		// Measured after the records were read, on now's clock (the
		// caller's, advanced by the read), so each age is at least what
		// it was when they were stamped; without them (the store cannot
		// say) the times are read as stamped.
		if hs, err := rl.Replicas(ctx); err == nil {
			ev.clocks = tally.NewClocks(hs, ev.reports, ev.served, now.Add(time.Since(start)))
		}
	}
	if b, ok := src.(store.Beats); ok {
		// A margin before the window, so a look a little after the read
		// still has its whole window.
		ev.beatsFrom = now.Add(-tally.UptimeWindow - ReadTimeout)
		if marks, err := b.Beats(ctx, ev.beatsFrom); err == nil {
			if len(marks) > 0 {
				// Only from the first mark on: without any, no replica
				// marks minutes and silence is wall-clock time, and the
				// minutes before the first count as up
				// (tally.NewUptime), which a record's minute must not
				// turn into an outage.
				marks = append(marks, ev.recordMinutes(marks[0])...)
				slices.SortFunc(marks, time.Time.Compare)
			}
			ev.beats, ev.beatsOK = marks, true
		}
	}
	return ev, nil
}

// recordMinutes returns the minutes from from on in which some replica
// accepted a report or served a reporting node, on the reader's clock:
// lpsd was up then whether or not the replica marks its minutes (one
// older than the marks, mid-upgrade), so those minutes count towards
// silence.
func (ev evidence) recordMinutes(from time.Time) []time.Time {
	set := map[time.Time]bool{}
	add := func(replica string, t time.Time) {
		if t = ev.clocks.At(replica, t); !t.Before(from) {
			set[t.UTC().Truncate(time.Minute)] = true
		}
	}
	for i := range ev.reports {
		add(ev.reports[i].Replica, ev.reports[i].Time)
	}
	for i := range ev.served {
		add(ev.served[i].Replica, ev.served[i].Time)
	}
	return slices.Collect(maps.Keys(set))
}

// uptime is lpsd's uptime at now from the beats read (store.Beats), so
// silence is counted while lpsd was up; nil, wall-clock time, when the
// store has none or they could not be read (silence as if lpsd never
// stopped).
func (ev evidence) uptime(now time.Time) *tally.Uptime {
	if !ev.beatsOK {
		return nil
	}
	from := now.Add(-tally.UptimeWindow)
	marks := ev.beats
	for len(marks) > 0 && marks[0].Before(from.Truncate(time.Minute)) {
		marks = marks[1:]
	}
	return tally.NewUptime(marks, from, now)
}
