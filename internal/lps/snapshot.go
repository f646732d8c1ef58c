// Package lps is the live-patching service: it answers nodes'
// GetComponentConfig calls from an in-memory snapshot of the store.
package lps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// resyncInterval re-reads the store even without a watch signal, bounding
// staleness if a signal is ever lost.
const resyncInterval = 30 * time.Second

// Snapshot is an immutable view of the releases. Never modify one.
type Snapshot struct {
	// Releases carry NotAfter (rollout.Release.WithNotAfter), so selection
	// refuses expired ones.
	Releases []rollout.Release
	// Revision is the store revision the snapshot reflects.
	Revision int64
	// Built is when it was loaded.
	Built time.Time
	// Seats maps the version of each release with a canary that may serve
	// its seat holders (rolling or paused) to the holders' vmIds.
	Seats map[string]map[string]bool
	// canaries indexes those releases in Releases.
	canaries []int
	// Configs are the component configurations, each with NotAfter set;
	// served holds each one's served form by ID (rollout.Config.Served),
	// built once per load; a configuration whose envelope does not decode
	// has none and is never served.
	Configs []rollout.Config
	served  map[string][]byte
	// relRev and cfgRev are the revisions Releases and Configs gave; a
	// backend may count them apart (Revision is the higher).
	relRev, cfgRev int64
	// log is the trust evidence served with releases (the key-set chain,
	// the kept checkpoint and the proofs under it); nil while there is
	// neither a link nor a checkpoint.
	log *servedLog
}

// withConfigs returns snap with the component configurations cs, read at
// cfgRev.
func (snap *Snapshot) withConfigs(cs []rollout.Config, cfgRev int64) *Snapshot {
	snap.relRev, snap.cfgRev = snap.Revision, cfgRev
	snap.Revision = max(snap.Revision, cfgRev)
	snap.Configs = cs
	snap.served = make(map[string][]byte, len(cs))
	for i, c := range cs {
		cs[i] = c.WithNotAfter()
		if body, err := c.Served(); err == nil {
			snap.served[c.ID()] = body
		}
	}
	return snap
}

// seatSet returns the SeatSet of snap's release version, "" if none.
func (snap *Snapshot) seatSet(version string) string {
	for _, r := range snap.Releases {
		if r.Version == version {
			return r.SeatSet()
		}
	}
	return ""
}

// HasComponent reports whether any configuration of component is
// published, whatever its rollout.
func (snap *Snapshot) HasComponent(component string) bool {
	return slices.ContainsFunc(snap.Configs, func(c rollout.Config) bool { return c.Component == component })
}

// newSnapshot returns the snapshot of rels at rev, with seats the holders
// of their canaries' seats.
func newSnapshot(rels []rollout.Release, rev int64, seats map[string]map[string]bool, built time.Time) *Snapshot {
	snap := &Snapshot{Releases: rels, Revision: rev, Built: built, Seats: seats}
	for i, r := range rels {
		if servesSeats(r) {
			snap.canaries = append(snap.canaries, i)
		}
	}
	return snap
}

// unreadableAsRevoked returns a revoked release for each key that is a
// version; any other key could never have been served.
func unreadableAsRevoked(keys []string) []rollout.Release {
	var out []rollout.Release
	for _, k := range keys {
		v, err := hotfix.ParseVersion(k)
		if err != nil {
			continue
		}
		out = append(out, rollout.Release{Version: v.String(), Base: v.Base(), Revoked: true, Rollout: rollout.Rollout{State: rollout.Halted}})
	}
	return out
}

// servesSeats reports whether r serves its canary seats' holders now.
func servesSeats(r rollout.Release) bool {
	return r.HasCanary() && !r.Revoked && (r.Rollout.State == rollout.Rolling || r.Rollout.State == rollout.Paused)
}

// Snapshotter keeps the current Snapshot fresh. Requests read it with
// Current, which never blocks and never touches the store.
type Snapshotter struct {
	store   store.Store
	log     *slog.Logger
	onError func(error)
	cur     atomic.Pointer[Snapshot]
	// index and hashes are the log's, kept across loads: the log only
	// grows, so each load reads only what is new.
	index  logIndex
	hashes *hashCache
}

// NewSnapshotter returns a Snapshotter for s. onError (may be nil) is called
// for every failed store read, for metrics.
func NewSnapshotter(s store.Store, log *slog.Logger, onError func(error)) *Snapshotter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onError == nil {
		onError = func(error) {}
	}
	return &Snapshotter{store: s, log: log, onError: onError, hashes: newHashCache(s)}
}

// Current returns the latest snapshot, or nil before the first Load.
func (s *Snapshotter) Current() *Snapshot { return s.cur.Load() }

// Load reads the store once and publishes the result. A store that panics
// (a damaged file its backend did not catch) is an error, counted like any
// failed read, and the previous snapshot keeps serving.
func (s *Snapshotter) Load(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("load snapshot: the store failed: %v", p)
			s.onError(err)
		}
	}()
	rels, rev, err := s.store.Releases(ctx)
	var ue *store.UnreadableError
	switch {
	case errors.As(err, &ue):
		// A record nobody can read may be a revoked release's: serve its
		// version as revoked (nodes drop and refuse it) rather than stop
		// loading, which would keep serving whatever the last snapshot
		// had, or never become ready.
		s.onError(err)
		rels = append(rels, unreadableAsRevoked(ue.Keys)...)
		slices.SortFunc(rels, rollout.Compare)
		s.log.Error("snapshot: release records cannot be read; their versions are served as revoked until they are rewritten or restored", "versions", ue.Keys, "err", err)
	case err != nil:
		s.onError(err)
		return fmt.Errorf("load snapshot: %w", err)
	}
	for i := range rels {
		// Records stored before releases carried their expiry get it from
		// the envelope here, once per load, not per request.
		rels[i] = rels[i].WithNotAfter()
	}
	configs, cfgRev, err := s.store.Configs(ctx)
	if err != nil {
		s.onError(err)
		return fmt.Errorf("load snapshot: %w", err)
	}
	seats := make(map[string]map[string]bool)
	held := 0
	old := s.cur.Load()
	for _, r := range rels {
		if !servesSeats(r) {
			continue
		}
		vms, err := s.store.Seats(ctx, r.SeatSet())
		var ue *store.UnreadableError
		if errors.As(err, &ue) {
			// A seat whose time cannot be read is still a seat: its
			// holder is its key (the autopilot's looks log and count
			// them).
			s.log.Debug("snapshot: canary seats with unreadable times", "version", r.Version, "count", ue.Count, "first", ue.First)
			err = nil
		}
		if err != nil {
			// Seats must not hold up the releases (a revocation, say): keep
			// the holders known so far, and count the failure.
			s.onError(err)
			s.log.Warn("snapshot: canary seats not read; keeping the holders known so far", "version", r.Version, "err", err)
			// Only holders of the same seats: after a resume's fresh
			// set, the halted attempt's holders are no longer seated.
			if old != nil && old.Seats[r.Version] != nil && old.seatSet(r.Version) == r.SeatSet() {
				seats[r.Version] = old.Seats[r.Version]
				held += len(old.Seats[r.Version])
			}
			continue
		}
		seats[r.Version] = make(map[string]bool, len(vms))
		for _, seat := range vms {
			seats[r.Version][seat.VMID] = true
		}
		held += len(vms)
	}
	lg, err := s.loadLog(ctx, rels)
	if err != nil {
		// The log must not hold up the releases (a revocation, say): keep
		// serving the evidence known so far, which nodes check themselves.
		s.onError(err)
		s.log.Warn("snapshot: transparency log not read; keeping the evidence known so far", "err", err)
		if old != nil {
			lg = old.log
		}
	}
	// Seats only grow, so equal counts are equal seats.
	// A backend may count the two revisions apart: both must be unchanged.
	if old != nil && old.relRev == rev && old.cfgRev == cfgRev && rev+cfgRev != 0 && sameCounts(old.Seats, seats) && sameLog(old.log, lg) {
		return nil
	}
	snap := newSnapshot(rels, rev, seats, time.Now()).withConfigs(configs, cfgRev)
	snap.log = lg
	s.cur.Store(snap)
	s.log.Info("snapshot updated", "revision", snap.Revision, "releases", len(rels), "canary_seats", held, "component_configs", len(configs))
	return nil
}

// loadLog reads the key-set chain and the kept checkpoint, and proves each
// release envelope logged under the checkpoint. nil, nil when
// there is neither a link nor a checkpoint.
func (s *Snapshotter) loadLog(ctx context.Context, rels []rollout.Release) (*servedLog, error) {
	kss, err := s.store.KeySets(ctx)
	var ue *store.UnreadableError
	if err != nil && !errors.As(err, &ue) {
		return nil, fmt.Errorf("read key sets: %w", err)
	}
	// A hole in the chain ends it: a link after it cannot verify.
	for i := 1; i < len(kss); i++ {
		if kss[i].Version != kss[i-1].Version+1 {
			kss = kss[:i]
			break
		}
	}
	size, note, err := s.store.Checkpoint(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// No log key, or no checkpoint yet: the chain is served alone.
		if len(kss) == 0 {
			return nil, nil
		}
		return &servedLog{keySets: kss, hashes: s.hashes}, nil
	case err != nil:
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	ictx, cancel := context.WithTimeout(ctx, indexBudget)
	err = s.index.update(ictx, s.store, size)
	cancel()
	if err != nil {
		return nil, err
	}
	lg := &servedLog{note: note, size: size, keySets: kss, hashes: s.hashes, proofs: make(map[tlog.Hash]translog.InclusionProof)}
	hr := s.hashes.reader(ctx)
	prove := func(rec []byte) error {
		h := tlog.RecordHash(rec)
		i, ok := s.index.lookup(h)
		if !ok || i >= size {
			return nil // not logged yet under this checkpoint
		}
		p, err := tlog.ProveRecord(size, i, hr)
		if err != nil {
			return fmt.Errorf("prove record %d in tree size %d: %w", i, size, err)
		}
		lg.proofs[h] = translog.InclusionProof{Index: i, Hashes: p}
		return nil
	}
	for _, r := range rels {
		if r.Revoked || len(r.Envelope) == 0 {
			continue
		}
		if err := prove(r.Envelope); err != nil {
			return nil, err
		}
	}
	return lg, nil
}

// sameLog reports whether a and b serve the same evidence.
func sameLog(a, b *servedLog) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.size == b.size && bytes.Equal(a.note, b.note) && len(a.keySets) == len(b.keySets) && len(a.proofs) == len(b.proofs)
}

func sameCounts(a, b map[string]map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for v, vms := range a {
		if len(b[v]) != len(vms) {
			return false
		}
	}
	return true
}

// Run reloads on every store change signal and periodically, until ctx is
// done. A failed reload keeps serving the previous snapshot.
func (s *Snapshotter) Run(ctx context.Context) error {
	changes := s.store.Watch(ctx)
	tick := time.NewTicker(resyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-changes:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				// The watch ended (store closed or backend restart);
				// re-establish it after a pause, so a closed store does
				// not spin this loop, and resync.
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
				changes = s.store.Watch(ctx)
			}
		case <-tick.C:
		}
		if err := s.Load(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("snapshot reload failed; serving the previous one", "err", err)
		}
	}
}
