// Package memstore is an in-memory store.Store for tests and `--store mem:`.
package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/notify"
)

var _ store.Store = (*Store)(nil)

// Store keeps releases, the audit log, reports and the transparency log in
// memory; everything is lost on Close. Revisions come from one store-wide
// counter that every release write increments. Records are copied in and
// out, so callers may modify what they pass and get. Store is safe for
// concurrent use.
type Store struct {
	hub notify.Hub

	mu       sync.Mutex
	closed   bool
	rev      int64
	releases map[string]entry[rollout.Release]
	audit    []store.AuditEntry
	// reports holds values only (a Report has no slices or maps), so
	// storing and returning copies of the struct isolates callers.
	reports map[reportKey]store.Report
	// beats are the marked minutes (Unix minutes).
	beats map[int64]bool
	// points maps a release version to its history points' data by
	// minute (Unix minutes); made on first write.
	points map[string]map[int64][]byte
	// seats maps a release version to its canary seats by holder: when
	// each took its seat, and its subscription if it took it under a
	// per-subscription bound.
	seats map[string]map[string]store.Seat
	// served holds values only, as reports.
	served map[servedKey]store.Served
	// subSeats counts the seats taken under a per-subscription bound.
	subSeats map[subscriptionKey]int
	// configs holds component configurations by ID, made on first write;
	// their writes move rev too.
	configs map[string]entry[rollout.Config]
	// log is the transparency log and the key sets and checkpoint beside it.
	log memLog
	// freeze holds the fleet-wide freeze under freezeKey, made on first
	// write; its writes move rev too.
	freeze map[string]entry[store.Freeze]
}

type subscriptionKey struct{ version, subscription string }

type reportKey struct{ vmID, boot string }

type servedKey struct{ version, vmID, boot string }

// entry is a stored record (a release or a component configuration) and
// its revision.
type entry[T any] struct {
	v   T
	rev int64
}

// New returns an empty Store.
func New() *Store {
	return &Store{releases: make(map[string]entry[rollout.Release]), reports: make(map[reportKey]store.Report), seats: make(map[string]map[string]store.Seat), served: make(map[servedKey]store.Served), subSeats: make(map[subscriptionKey]int)}
}

// Releases implements store.Store.
func (s *Store) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := list(s, s.releases, cloneRelease, rollout.Compare)
	if err != nil {
		return nil, 0, fmt.Errorf("list releases: %w", err)
	}
	return out, s.rev, nil
}

// list returns copies (clone) of every record in records in compare's
// order, or ErrClosed after Close. Releases and Configs share it; the
// caller holds s.mu.
func list[T any](s *Store, records map[string]entry[T], clone func(T) T, compare func(a, b T) int) ([]T, error) {
	if s.closed {
		return nil, store.ErrClosed
	}
	out := make([]T, 0, len(records))
	for _, e := range records {
		out = append(out, clone(e.v))
	}
	slices.SortFunc(out, compare)
	return out, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, version string) (rollout.Release, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := get(s, s.releases, version)
	if err != nil {
		return rollout.Release{}, 0, fmt.Errorf("read release %q: %w", version, err)
	}
	return cloneRelease(e.v), e.rev, nil
}

// get returns the entry under key in records: ErrNotFound when there is
// none, ErrClosed after Close. Release and Config share it; the caller
// holds s.mu.
func get[T any](s *Store, records map[string]entry[T], key string) (entry[T], error) {
	if s.closed {
		return entry[T]{}, store.ErrClosed
	}
	e, ok := records[key]
	if !ok {
		return entry[T]{}, store.ErrNotFound
	}
	return e, nil
}

// PutRelease implements store.Store.
func (s *Store) PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a store.AuditEntry, rec []byte) (int64, error) {
	if err := cmp.Or(r.Validate(), store.ValidateRecord(rec)); err != nil {
		return 0, fmt.Errorf("put release: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("put release %s: %w", r.Version, store.ErrClosed)
	}
	rev, err := put(s, s.releases, r.Version, cloneRelease(r), ifRev, a, rec)
	if err != nil {
		return 0, fmt.Errorf("put release %s %w", r.Version, err)
	}
	return rev, nil
}

// put stores v under key in records, compare-and-swap on ifRev (0: key
// absent), with its audit entry a and log record rec (nil: none); the
// store-wide revision moves to v's. PutRelease and PutConfig share it; the
// caller holds s.mu.
func put[T any](s *Store, records map[string]entry[T], key string, v T, ifRev int64, a store.AuditEntry, rec []byte) (int64, error) {
	if cur := records[key].rev; cur != ifRev {
		return 0, fmt.Errorf("at revision %d (stored %d): %w", ifRev, cur, store.ErrConflict)
	}
	if err := s.log.append(rec); err != nil {
		return 0, err
	}
	s.rev++
	records[key] = entry[T]{v: v, rev: s.rev}
	a.Seq = int64(len(s.audit)) + 1
	s.audit = append(s.audit, cloneAudit(a))
	s.hub.Notify()
	return s.rev, nil
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, after int64, limit int) ([]store.AuditEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("read audit log: %w", store.ErrClosed)
	}
	if limit <= 0 {
		return nil, nil
	}
	// Seq n is at index n-1.
	start := int(min(max(after, 0), int64(len(s.audit))))
	end := start + min(limit, len(s.audit)-start)
	var out []store.AuditEntry
	for _, a := range s.audit[start:end] {
		out = append(out, cloneAudit(a))
	}
	return out, nil
}

// PutReports implements store.Store with one atomic write per call.
func (s *Store) PutReports(ctx context.Context, rs []store.Report) ([]bool, error) {
	for _, r := range rs {
		if err := r.ValidateKey(); err != nil {
			return nil, fmt.Errorf("put reports: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("put reports: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("put reports: %w", err)
	}
	first := make([]bool, len(rs))
	for i, r := range rs {
		k := reportKey{r.VMID, r.Boot}
		_, stored := s.reports[k]
		first[i] = !stored
		if store.MergeReport(stored, r) {
			s.reports[k] = r
		}
	}
	return first, nil
}

// Reports implements store.Store.
func (s *Store) Reports(ctx context.Context) ([]store.Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("list reports: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	out := make([]store.Report, 0, len(s.reports))
	for _, r := range s.reports {
		out = append(out, r)
	}
	slices.SortFunc(out, store.CompareReports)
	return out, nil
}

// TakeSeat implements store.Store.
func (s *Store) TakeSeat(ctx context.Context, version string, seat store.Seat, limit store.SeatLimit) (bool, error) {
	if err := store.ValidateTake(version, seat, limit); err != nil {
		return false, fmt.Errorf("take seat: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, fmt.Errorf("take seat: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("take seat: %w", err)
	}
	held := s.seats[version]
	if _, ok := held[seat.VMID]; ok {
		return true, nil
	}
	if len(held) >= limit.Seats {
		return false, nil
	}
	subKey := subscriptionKey{version, seat.SubscriptionID}
	if limit.PerSubscription > 0 && s.subSeats[subKey] >= limit.PerSubscription {
		return false, fmt.Errorf("take seat: %w", store.ErrSubscriptionSeats)
	}
	if held == nil {
		held = make(map[string]store.Seat)
		s.seats[version] = held
	}
	kept := store.Seat{VMID: seat.VMID, Since: seat.Since}
	if limit.PerSubscription > 0 {
		s.subSeats[subKey]++
		kept.SubscriptionID = seat.SubscriptionID
	}
	held[seat.VMID] = kept
	return true, nil
}

// HoldsSeat implements store.Store.
func (s *Store) HoldsSeat(ctx context.Context, version, vmID string) (bool, error) {
	if err := store.ValidateSeat(version, vmID); err != nil {
		return false, fmt.Errorf("read seat: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, fmt.Errorf("read seat: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("read seat: %w", err)
	}
	_, ok := s.seats[version][vmID]
	return ok, nil
}

// Seats implements store.Store.
func (s *Store) Seats(ctx context.Context, version string) ([]store.Seat, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("list seats: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list seats: %w", err)
	}
	var out []store.Seat
	for _, vm := range slices.Sorted(maps.Keys(s.seats[version])) {
		out = append(out, s.seats[version][vm])
	}
	return out, nil
}

// PutServed implements store.Store.
func (s *Store) PutServed(ctx context.Context, ss []store.Served) error {
	for _, sv := range ss {
		if err := sv.ValidateKey(); err != nil {
			return fmt.Errorf("put served: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put served: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put served: %w", err)
	}
	for _, sv := range ss {
		k := servedKey{sv.Version, sv.VMID, sv.Boot}
		if _, ok := s.served[k]; !ok {
			s.served[k] = sv
		}
	}
	return nil
}

// Served implements store.Store.
func (s *Store) Served(ctx context.Context) ([]store.Served, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("list served: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list served: %w", err)
	}
	out := slices.Collect(maps.Values(s.served))
	slices.SortFunc(out, store.CompareServed)
	return out, nil
}

// Watch implements store.Store.
func (s *Store) Watch(ctx context.Context) <-chan struct{} {
	return s.hub.Subscribe(ctx)
}

// Close drops the contents and closes every Watch channel. Later calls
// return store.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.releases = nil
	s.audit = nil
	s.reports = nil
	s.seats = nil
	s.served = nil
	s.subSeats = nil
	s.configs = nil
	s.points = nil
	s.log = memLog{}
	s.mu.Unlock()
	s.hub.Close()
	return nil
}

func cloneRelease(r rollout.Release) rollout.Release {
	r.Envelope = cloneRaw(r.Envelope)
	r.Rollout = cloneRollout(r.Rollout)
	return r
}

func cloneRollout(ro rollout.Rollout) rollout.Rollout {
	ro.Subscriptions = slices.Clone(ro.Subscriptions)
	ro.Regions = slices.Clone(ro.Regions)
	ro.DeployEnvs = slices.Clone(ro.DeployEnvs)
	if p := ro.Plan; p != nil {
		c := *p
		c.Steps = slices.Clone(p.Steps)
		ro.Plan = &c
	}
	return ro
}

func cloneAudit(a store.AuditEntry) store.AuditEntry {
	a.Before = cloneRaw(a.Before)
	a.After = cloneRaw(a.After)
	a.Evidence = cloneRaw(a.Evidence)
	return a
}

func cloneRaw(m json.RawMessage) json.RawMessage {
	if m == nil {
		return nil
	}
	return slices.Clone(m)
}

var _ store.Beats = (*Store)(nil)

// PutBeat implements store.Beats.
func (s *Store) PutBeat(ctx context.Context, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put beat: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put beat: %w", err)
	}
	if s.beats == nil {
		s.beats = make(map[int64]bool)
	}
	m := t.Unix() / 60
	s.beats[m] = true
	cutoff := t.Add(-store.BeatRetention).Unix() / 60
	for k := range s.beats {
		if k < cutoff {
			delete(s.beats, k)
		}
	}
	return nil
}

// Beats implements store.Beats.
func (s *Store) Beats(ctx context.Context, from time.Time) ([]time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("list beats: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list beats: %w", err)
	}
	first := from.Unix() / 60
	var out []time.Time
	for m := range s.beats {
		if m >= first {
			out = append(out, time.Unix(m*60, 0).UTC())
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out, nil
}

var _ store.Pruner = (*Store)(nil)

// PruneReports implements store.Pruner under one lock.
func (s *Store) PruneReports(ctx context.Context, p store.Prune) (store.Pruned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Pruned{}, fmt.Errorf("prune reports: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return store.Pruned{}, fmt.Errorf("prune reports: %w", err)
	}
	return prune(s.reports, p, func(r store.Report) time.Time { return r.Time }), nil
}

// PruneServed implements store.Pruner under one lock.
func (s *Store) PruneServed(ctx context.Context, p store.Prune) (store.Pruned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Pruned{}, fmt.Errorf("prune served: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return store.Pruned{}, fmt.Errorf("prune served: %w", err)
	}
	return prune(s.served, p, func(sv store.Served) time.Time { return sv.Time }), nil
}

// PruneSeats implements store.Pruner under one lock.
func (s *Store) PruneSeats(ctx context.Context, drop func(set string) bool) (store.Pruned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Pruned{}, fmt.Errorf("prune seats: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return store.Pruned{}, fmt.Errorf("prune seats: %w", err)
	}
	var res store.Pruned
	for set := range s.seats {
		if !drop(set) {
			res.Stored++
			continue
		}
		delete(s.seats, set)
		res.Deleted++
	}
	maps.DeleteFunc(s.subSeats, func(k subscriptionKey, _ int) bool { return s.seats[k.version] == nil })
	return res, nil
}

// prune deletes from records what p selects; the caller holds s.mu.
func prune[K comparable, V any](records map[K]V, p store.Prune, at func(V) time.Time) store.Pruned {
	c := store.NewCutoff(p)
	for _, v := range records {
		c.Add(at(v))
	}
	cut, over := c.Time()
	out := store.Pruned{Cutoff: cut, OverKeep: over}
	for k, v := range records {
		if store.Deletes(cut, at(v)) {
			delete(records, k)
			out.Deleted++
		}
	}
	out.Stored = len(records)
	return out
}
