// Package retention bounds the stored history of nodes' outcome reports
// and served records by pruning the oldest.
//
// Every look of the autopilot, status, explain and the dashboard reads
// every stored report and served record, so without a bound a look's
// memory and time grow with the fleet's whole history. Retention deletes
// what is older than MaxAge, then the oldest beyond MaxRecords of each
// kind, but never what a decision still reads:
//
//   - nothing from the last Protected (48 h): a base's baseline reads the
//     last tally.BaselineWindow (24 h) of reports, and a served boot's
//     silence is decided within its plan's silent-after (at most 24 h)
//     plus tally.MaxStretch (24 h) of being served, so a canary's
//     evidence and its silence detection stay whole; when the records of
//     that window alone are more than MaxRecords, they are kept, and
//     Result.OverLimit says so;
//   - no served record whose boot's report it deleted: served records go
//     up to the reports' cutoff (and a minute past it, the clocks' slack
//     of tally), so a node whose report was pruned is never counted
//     silent for want of it; a report whose served record was pruned
//     still counts its node.
//
// A prune also deletes the canary seats of a release's earlier evidence
// windows (rollout.Release.SeatSet: a resume after a halt seats the retry
// afresh), which nothing reads once the release's current window opened,
// and keeps them for Protected after that, for replicas still serving from
// the snapshot before it. A release's current seats are kept for its life:
// its holders stay served.
//
// What a prune deletes is gone: a release whose rollout spans more than
// the kept history is judged on what is kept, and a baseline read from an
// incumbent's whole record reads the kept record.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// Protected is how recent a record is never pruned: the longest
// silent-after a plan may set (24 h) plus tally.MaxStretch, which also
// covers tally.BaselineWindow.
const Protected = tally.UptimeWindow

// clockSlack is how much earlier than its served record a boot's report
// may be stamped (tally's clockSlack): reports are protected this much
// longer, and served records pruned this much past the reports' cutoff.
const clockSlack = time.Minute

// Defaults.
const (
	// DefaultMaxAge keeps a month: longer than a planned rollout's steps
	// take, so a rollout is judged on its whole evidence unless
	// DefaultMaxRecords bites first.
	DefaultMaxAge = 30 * 24 * time.Hour
	// DefaultMaxRecords bounds each kind (reports, served records) so an
	// idle lpsd reading every record stays well inside the shipped 256 MiB
	// memory limit: a look holds about 3 KiB per report and served record,
	// and lpsd idled at 121 MiB VmHWM on bbolt with 20,000 of each
	// (bench/README.md, "Look cost as history grows").
	DefaultMaxRecords = 20_000
	// DefaultInterval is how often the leader prunes after the prune at
	// start: an hour of a fleet's reports is small beside the bound.
	DefaultInterval = time.Hour
	// MaxRecordsLimit bounds MaxRecords: a prune holds that many times
	// (8 bytes each) while it finds the cutoff.
	MaxRecordsLimit = 10_000_000
)

// runTimeout bounds one prune of both kinds: a first prune of a large
// history stops there, keeping what it deleted, and the next run goes on.
const runTimeout = 15 * time.Minute

// Config holds the optional settings; the zero Config prunes nothing.
type Config struct {
	// MaxAge deletes records older than it (never within Protected); 0:
	// none by age.
	MaxAge time.Duration
	// MaxRecords deletes, of each kind, the oldest beyond this many
	// (never within Protected); 0: no bound by count.
	MaxRecords int
	// Interval between prunes; 0 means DefaultInterval.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives each prune and each change of OverLimit; nil discards.
	Log *slog.Logger
	// OnPrune, when set, receives every prune's result (lpsd publishes it
	// as metrics).
	OnPrune func(Result)
}

// Validate returns an error naming what of c cannot be used: an age
// within Protected (the floor would silently override it), a negative
// count or one over MaxRecordsLimit.
func (c Config) Validate() error {
	switch {
	case c.MaxAge < 0 || (c.MaxAge > 0 && c.MaxAge < Protected):
		return fmt.Errorf("max age %v: want 0 (none) or at least %v, the recent history decisions read", c.MaxAge, Protected)
	case c.MaxRecords < 0 || c.MaxRecords > MaxRecordsLimit:
		return fmt.Errorf("max records %d: want 0 (no bound) to %d", c.MaxRecords, MaxRecordsLimit)
	case c.Interval < 0:
		return fmt.Errorf("interval %v: want 0 (the default) or more", c.Interval)
	}
	return nil
}

// Result is one prune of both kinds, and of the seat sets.
type Result struct {
	Time    time.Time
	Reports store.Pruned
	Served  store.Pruned
	// Seats counts seat sets, not seats.
	Seats store.Pruned
}

// Store is what Retention prunes: a store.Pruner that lists the releases,
// whose seat sets it weighs.
type Store interface {
	store.Pruner
	Releases(ctx context.Context) ([]rollout.Release, int64, error)
}

// Retention prunes one store.
type Retention struct {
	st  Store
	cfg Config
	// over is the last OverLimit logged, by kind, so each change is
	// logged once.
	over map[string]bool
}

// New returns a Retention over st.
func New(st Store, cfg Config) *Retention {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Retention{st: st, cfg: cfg, over: map[string]bool{}}
}

// Run prunes at once, calls ready (nil: none) when that first prune is
// over, then prunes every Interval, until ctx ends; a failed prune is
// logged and the next one tries again. Run on one replica at a time
// (lpsd: the one whose autopilot leads), though two at once only do the
// work twice.
func (r *Retention) Run(ctx context.Context, ready func()) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for first := true; ; first = false {
		pctx, cancel := context.WithTimeout(ctx, runTimeout)
		res, err := r.Prune(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.cfg.Log.Warn("prune failed; the next one goes on", "err", err, "reportsDeleted", res.Reports.Deleted, "servedDeleted", res.Served.Deleted)
		default:
			r.cfg.Log.Info("pruned reports, served records and seat sets", "reportsDeleted", res.Reports.Deleted, "reportsStored", res.Reports.Stored,
				"servedDeleted", res.Served.Deleted, "servedStored", res.Served.Stored, "reportsCutoff", res.Reports.Cutoff, "servedCutoff", res.Served.Cutoff,
				"seatSetsDeleted", res.Seats.Deleted, "seatSetsStored", res.Seats.Stored)
		}
		if first && ready != nil {
			ready()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune prunes reports, then served records up to the reports' cutoff
// (the package comment), once, and passes the result to OnPrune unless it
// failed. A failed prune returns what it deleted before the error.
func (r *Retention) Prune(ctx context.Context) (Result, error) {
	now := r.cfg.Now()
	res := Result{Time: now}
	var before time.Time
	if r.cfg.MaxAge > 0 {
		before = now.Add(-r.cfg.MaxAge)
	}
	floor := now.Add(-Protected)
	var err error
	res.Reports, err = r.st.PruneReports(ctx, store.Prune{Before: before, Keep: r.cfg.MaxRecords, Floor: floor.Add(-clockSlack)})
	if err != nil {
		return res, err
	}
	if c := res.Reports.Cutoff; !c.IsZero() && c.Add(clockSlack).After(before) {
		before = c.Add(clockSlack)
	}
	res.Served, err = r.st.PruneServed(ctx, store.Prune{Before: before, Keep: r.cfg.MaxRecords, Floor: floor})
	if err != nil {
		return res, err
	}
	// The seat sets are not history: a failure to prune them is logged
	// and the next prune tries again, and what was pruned above is
	// still published. A release record nobody can read is left out, and
	// its seat sets with it (earlierWindows keeps what no stored release
	// names).
	rels, _, err := r.st.Releases(ctx)
	if ue := (*store.UnreadableError)(nil); err == nil || errors.As(err, &ue) {
		res.Seats, err = r.st.PruneSeats(ctx, earlierWindows(rels, floor))
	}
	if err != nil {
		r.cfg.Log.Warn("seat sets not pruned; the next prune tries again", "err", err, "seatSetsDeleted", res.Seats.Deleted)
	}
	r.logOver("reports", res.Reports.OverKeep, res.Reports.Stored)
	r.logOver("served records", res.Served.OverKeep, res.Served.Stored)
	if r.cfg.OnPrune != nil {
		r.cfg.OnPrune(res)
	}
	return res, nil
}

// earlierWindows selects the seat sets of a release's earlier evidence
// windows, those that seat a window opened before its current one, once
// that one opened before floor. The releases are read before the prune
// runs, so a resume meanwhile opens a window later than any of them: its
// set is kept, as is every set of a release not stored (nothing says it
// is done with), of one with no window, and with a name SeatSet does not
// write.
func earlierWindows(rels []rollout.Release, floor time.Time) func(set string) bool {
	current := make(map[string]time.Time, len(rels))
	for _, r := range rels {
		current[r.Version] = r.Rollout.EvidenceSince
	}
	return func(set string) bool {
		version, window, ok := rollout.ParseSeatSet(set)
		since, stored := current[version]
		return ok && stored && !since.IsZero() && since.Before(floor) && window.Before(since)
	}
}

// logOver logs a change of whether the protected records of kind alone
// exceed MaxRecords.
func (r *Retention) logOver(kind string, over bool, stored int) {
	if over == r.over[kind] {
		return
	}
	r.over[kind] = over
	if over {
		r.cfg.Log.Warn("the records of the protected recent history alone exceed the retention bound; kept, so a look reads more than the bound (raise the memory limit or --retention-records)",
			"kind", kind, "stored", stored, "max", r.cfg.MaxRecords, "protected", Protected)
		return
	}
	r.cfg.Log.Info("the stored records are within the retention bound again", "kind", kind, "stored", stored, "max", r.cfg.MaxRecords)
}
