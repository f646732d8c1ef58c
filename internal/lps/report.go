package lps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/clip"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/uuid"
)

const (
	// reportGap is the least time between the starts of two report
	// writes of a replica, unless a full batch (reportBatch) waits:
	// reports that arrive within it of the last write share the next one.
	// It bounds the write rate a fleet puts on the store (100 writes per
	// second per replica, more only as full batches) and is all a lone
	// report waits before its write: a launch waits for its report to be
	// stored.
	reportGap = 10 * time.Millisecond
	// reportBatch flushes early once this many reports wait (etcd's default
	// transaction size).
	reportBatch = 128
	// reportQueue bounds the reports waiting for a write; past it a report
	// is refused (ResourceExhausted) rather than queued without bound.
	reportQueue = 4096
	// maxBootsPerVM is how many boots of one vmId this replica accepts
	// within bootWindow: a node provisions once per boot and reboots
	// rarely, so more is a node inventing boot IDs to inflate the counts.
	// A boot older than the window no longer counts, so a long-lived node
	// that reboots daily is never refused.
	maxBootsPerVM = 16
	bootWindow    = 24 * time.Hour
	// bootsTracked bounds the vmIds the boot limit remembers.
	bootsTracked = 65536
	// maxReportText caps each free-text field.
	maxReportText = 256
	// maxReportMS bounds each duration: provisioning has a 15-minute limit.
	maxReportMS = int64(24 * time.Hour / time.Millisecond)
)

// reportWriter is the store method the report service needs.
type reportWriter interface {
	PutReports(ctx context.Context, rs []store.Report) ([]bool, error)
}

// servedWriter is the store method recording what was served.
type servedWriter interface {
	PutServed(ctx context.Context, ss []store.Served) error
}

// reportService implements nodehotfix.node.v1.ReportService.
type reportService struct {
	nodev1.UnimplementedReportServiceServer
	snaps  snapshots
	seats  *Seats
	region string
	m      *Metrics
	log    *slog.Logger
	batch  *batcher[store.Report]
	boots  *bootLimit
	now    func() time.Time
	// replica names this lpsd on each report it stores, whose Time is by
	// its clock (tally.Clocks corrects it by this replica's heartbeat).
	replica string
}

// ReportOutcome validates a report against the caller's attested identity
// and what it was offered, then stores it (keyed by vmId and boot) before
// answering: an acknowledged report is durable.
func (s *reportService) ReportOutcome(ctx context.Context, req *nodev1.ReportOutcomeRequest) (*nodev1.ReportOutcomeResponse, error) {
	id, ok := identityFrom(ctx)
	if !ok {
		return nil, s.refuse(codes.Unauthenticated, "unauthenticated", errors.New("no verified identity"))
	}
	r, err := s.validate(ctx, id, req)
	if err != nil {
		return nil, err
	}
	first, err := s.store(ctx, r)
	if err != nil {
		return nil, err
	}
	s.m.countReport("accepted")
	if !first {
		s.m.countReport("duplicate")
	}
	return &nodev1.ReportOutcomeResponse{First: first}, nil
}

// ReportStarted stores a started report (store.PhaseStarted) as
// ReportOutcome stores an outcome, under the same checks: the boot, the
// baked version, and a hotfix version newer on its base that the node was
// offered. The store keeps it only where the boot has no report, so it
// never replaces an outcome.
func (s *reportService) ReportStarted(ctx context.Context, req *nodev1.ReportStartedRequest) (*nodev1.ReportStartedResponse, error) {
	id, ok := identityFrom(ctx)
	if !ok {
		return nil, s.refuse(codes.Unauthenticated, "unauthenticated", errors.New("no verified identity"))
	}
	r, err := s.validateStarted(ctx, id, req)
	if err != nil {
		return nil, err
	}
	first, err := s.store(ctx, r)
	if err != nil {
		return nil, err
	}
	s.m.countReport("started")
	return &nodev1.ReportStartedResponse{First: first}, nil
}

// store admits a validated report under the per-vmId boot bound and waits
// for its batch's write: the one path outcomes and started reports take.
// An error is the status to answer with, already counted.
func (s *reportService) store(ctx context.Context, r store.Report) (bool, error) {
	if !s.boots.admit(r.VMID, r.Boot, s.now()) {
		return false, s.refuse(codes.ResourceExhausted, "too-many-boots", fmt.Errorf("vmId %s reported more than %d boots in %v", r.VMID, maxBootsPerVM, bootWindow))
	}
	r.Replica = s.replica
	first, err := s.batch.put(ctx, r)
	switch {
	case errors.Is(err, errReportQueueFull):
		return false, s.refuse(codes.ResourceExhausted, "queue-full", err)
	case err != nil && ctx.Err() != nil:
		return false, s.refuse(codes.DeadlineExceeded, "canceled", err)
	case err != nil:
		s.log.Error("store reports", "err", err)
		return false, s.refuse(codes.Unavailable, "store", err)
	}
	return first, nil
}

// validateStarted is validate for a started report.
func (s *reportService) validateStarted(ctx context.Context, id attest.Identity, req *nodev1.ReportStartedRequest) (store.Report, error) {
	bad := func(format string, a ...any) (store.Report, error) {
		return store.Report{}, s.refuse(codes.InvalidArgument, "invalid", fmt.Errorf("started report: "+format, a...))
	}
	if _, ok := uuid.Canonical(req.GetBootId()); !ok {
		return bad("boot_id %q is not a UUID", clipped(req.GetBootId()))
	}
	baked, err := hotfix.ParseVersion(req.GetBakedVersion())
	if err != nil {
		return bad("baked_version: %v", err)
	}
	v, err := hotfix.ParseVersion(req.GetHotfixVersion())
	if err != nil || !hotfix.IsUpgrade(baked, v) {
		return bad("hotfix_version %q is not a newer patch of %s", clipped(req.GetHotfixVersion()), baked)
	}
	for _, ms := range []int64{req.GetCheckHotfixMs(), req.GetDownloadHotfixMs()} {
		if ms < 0 || ms > maxReportMS {
			return bad("a duration of %d ms", ms)
		}
	}
	switch offered, err := s.offered(ctx, id, v.String()); {
	case err != nil:
		return store.Report{}, s.refuse(codes.Unavailable, "store", fmt.Errorf("started report: whether %s holds a canary seat of %s: %w", id.VMID, v, err))
	case !offered:
		return store.Report{}, s.refuse(codes.FailedPrecondition, "not-offered", fmt.Errorf("started report: %s was never offered to vmId %s", v, id.VMID))
	}
	return store.Report{
		VMID: id.VMID, Boot: req.GetBootId(), SubscriptionID: id.SubscriptionID,
		Base: baked.Base(), BakedVersion: baked.String(), Agent: string(hotfix.AgentHotfix), AgentVersion: v.String(),
		HotfixVersion: v.String(), Decision: string(hotfix.ReasonHotfix), Phase: store.PhaseStarted,
		CheckMS: req.GetCheckHotfixMs(), DownloadMS: req.GetDownloadHotfixMs(), Time: s.now(),
	}, nil
}

func (s *reportService) refuse(c codes.Code, reason string, err error) error {
	s.m.countReport(reason)
	return status.Error(c, err.Error())
}

// validate turns a request into a store.Report or refuses it with
// InvalidArgument (malformed) or FailedPrecondition (a hotfix this node was
// never offered).
func (s *reportService) validate(ctx context.Context, id attest.Identity, req *nodev1.ReportOutcomeRequest) (store.Report, error) {
	bad := func(format string, a ...any) (store.Report, error) {
		return store.Report{}, s.refuse(codes.InvalidArgument, "invalid", fmt.Errorf("report: "+format, a...))
	}
	if _, ok := uuid.Canonical(req.GetBootId()); !ok {
		return bad("boot_id %q is not a UUID", clipped(req.GetBootId()))
	}
	baked, err := hotfix.ParseVersion(req.GetBakedVersion())
	if err != nil {
		return bad("baked_version: %v", err)
	}
	agentVersion, err := hotfix.ParseVersion(req.GetAgentVersion())
	if err != nil {
		return bad("agent_version: %v", err)
	}
	r := store.Report{
		VMID: id.VMID, Boot: req.GetBootId(), SubscriptionID: id.SubscriptionID,
		Base: baked.Base(), BakedVersion: baked.String(), AgentVersion: agentVersion.String(),
		Fallback: req.GetFallback(), ExitCode: int(req.GetProvisionExitCode()),
		CheckMS: req.GetCheckHotfixMs(), DownloadMS: req.GetDownloadHotfixMs(), ProvisionMS: req.GetProvisionMs(),
		Time: s.now(),
	}
	for _, f := range []struct {
		name string
		in   string
		out  *string
	}{
		{"decision", req.GetDecision(), &r.Decision},
		{"check_hotfix_outcome", req.GetCheckHotfixOutcome(), &r.CheckHotfix},
		{"download_hotfix_outcome", req.GetDownloadHotfixOutcome(), &r.DownloadHotfix},
		{"route", req.GetRoute(), &r.Route},
		{"fallback_reason", req.GetFallbackReason(), &r.FallbackReason},
	} {
		if len(f.in) > maxReportText || !utf8.ValidString(f.in) {
			return bad("%s: over %d bytes or not UTF-8", f.name, maxReportText)
		}
		*f.out = f.in
	}
	if r.ExitCode < 0 || r.ExitCode > 255 {
		return bad("provision_exit_code %d is not an exit code", r.ExitCode)
	}
	for _, ms := range []int64{r.CheckMS, r.DownloadMS, r.ProvisionMS} {
		if ms < 0 || ms > maxReportMS {
			return bad("a duration of %d ms", ms)
		}
	}
	switch req.GetAgent() {
	case nodev1.Agent_AGENT_BAKED:
		r.Agent = string(hotfix.AgentBaked)
		if agentVersion != baked {
			return bad("the baked agent reports %s, the baked version is %s", agentVersion, baked)
		}
		if r.Fallback && req.GetHotfixVersion() == "" {
			return bad("a fallback without the hotfix it fell back from")
		}
	case nodev1.Agent_AGENT_HOTFIX:
		r.Agent = string(hotfix.AgentHotfix)
		if r.Fallback || req.GetHotfixVersion() != agentVersion.String() {
			return bad("the hotfix agent %s is not the chosen hotfix %q", agentVersion, clipped(req.GetHotfixVersion()))
		}
	default:
		return bad("agent %v", req.GetAgent())
	}
	if hv := req.GetHotfixVersion(); hv != "" {
		v, err := hotfix.ParseVersion(hv)
		if err != nil || !hotfix.IsUpgrade(baked, v) {
			return bad("hotfix_version %q is not a newer patch of %s", clipped(hv), baked)
		}
		r.HotfixVersion = v.String()
		switch offered, err := s.offered(ctx, id, v.String()); {
		case err != nil:
			// A genuine canary node's only report must not be lost to a
			// store blip: Unavailable, which the node logs, not a refusal.
			return store.Report{}, s.refuse(codes.Unavailable, "store", fmt.Errorf("report: whether %s holds a canary seat of %s: %w", id.VMID, v, err))
		case !offered:
			return store.Report{}, s.refuse(codes.FailedPrecondition, "not-offered", fmt.Errorf("report: %s was never offered to vmId %s", v, id.VMID))
		}
	}
	if rv := req.GetRequestedVersion(); rv != "" {
		// Only a release this node was offered can be counted as refused
		// by it: a VM cannot file refusals against a release it never
		// got. Anything else (a custom-data pin, garbage) is dropped, and
		// the report still counts as what ran.
		if v, err := hotfix.ParseVersion(rv); err == nil && v.Base() == r.Base {
			switch offered, err := s.offered(ctx, id, v.String()); {
			case err != nil:
				return store.Report{}, s.refuse(codes.Unavailable, "store", fmt.Errorf("report: whether %s holds a canary seat of %s: %w", id.VMID, v, err))
			case offered:
				r.RequestedVersion = v.String()
			}
		}
	}
	return r, nil
}

// offered reports whether the serving snapshot's release version was ever
// offered to the node; an error when that rests on a canary seat the
// store could not confirm or deny.
func (s *reportService) offered(ctx context.Context, id attest.Identity, version string) (bool, error) {
	snap := s.snaps.Current()
	if snap == nil {
		return false, nil
	}
	// No Now: Offered ignores expiry, since a node served the release
	// before it expired reports on it genuinely.
	n := rollout.Node{VMID: id.VMID, SubscriptionID: id.SubscriptionID, Region: s.region}
	for _, rel := range snap.Releases {
		if rel.Version != version {
			continue
		}
		if rel.Offered(n) {
			return true, nil
		}
		n.Seats = []string{version}
		if !rel.Offered(n) {
			return false, nil
		}
		return s.seats.Holds(ctx, snap, rel, id.VMID)
	}
	return false, nil
}

// clipped shortens a node-supplied string for an error message (on a rune
// boundary).
func clipped(s string) string { return clip.Ellipsis(s, 64) }

// bootLimit remembers, per vmId, the boots this replica accepted reports
// or served records for, and when it first saw each. It holds at most
// bootsTracked vmIds; past that a random one is forgotten, so memory stays
// bounded under a flood of vmIds (each of which needed its own attested
// document).
type bootLimit struct {
	mu    sync.Mutex
	boots map[string]map[string]time.Time
}

func newBootLimit() *bootLimit { return &bootLimit{boots: make(map[string]map[string]time.Time)} }

// admit reports whether a report or served record for (vm, boot) may be
// counted at now: a boot already admitted may, and a new one while vm has
// fewer than maxBootsPerVM boots first seen within bootWindow.
func (l *bootLimit) admit(vm, boot string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := l.boots[vm]
	if _, ok := seen[boot]; ok {
		return true
	}
	if len(seen) >= maxBootsPerVM {
		for b, at := range seen {
			if now.Sub(at) > bootWindow {
				delete(seen, b)
			}
		}
		if len(seen) >= maxBootsPerVM {
			return false
		}
	}
	if seen == nil {
		if len(l.boots) >= bootsTracked {
			// Map iteration order is random enough to pick a victim.
			for k := range l.boots {
				delete(l.boots, k)
				break
			}
		}
		seen = make(map[string]time.Time)
		l.boots[vm] = seen
	}
	seen[boot] = now
	return true
}

// errReportQueueFull is returned by put when reportQueue records wait, or
// maxPendingPerVM of the same vmId's.
var errReportQueueFull = errors.New("too many reports waiting for the store")

// maxPendingPerVM bounds one vmId's records waiting for a write: a node
// has one or two in flight (a started report, then its outcome), so more
// is one VM's repeats, which would otherwise fill the queue while the
// store is slow and have every other node's report refused.
const maxPendingPerVM = 16

// batcher gathers records (reports, served records) and writes them in
// batches: a write starts once reportGap has passed since the last one
// started (at once for a full batch), and takes every record waiting then
// (up to reportBatch). put returns once its record's batch is stored, so
// an acknowledgement means durable.
type batcher[T any] struct {
	write func(context.Context, []T) ([]bool, error)
	vmID  func(T) string // whose record it is, for maxPendingPerVM

	mu      sync.Mutex
	pending []pending[T]
	perVM   map[string]int // pending records by vmID
	// kick asks Run for a write: sent by the record that finds nothing
	// waiting or fills a batch, and by Run itself when a write leaves
	// records behind.
	kick   chan struct{}
	closed bool
	// lastWrite is when the last batch was taken for writing.
	lastWrite time.Time
}

type pending[T any] struct {
	r    T
	done chan reportResult
}

type reportResult struct {
	first bool
	err   error
}

func newReportBatcher(w reportWriter) *batcher[store.Report] {
	var write func(context.Context, []store.Report) ([]bool, error)
	if w != nil {
		write = w.PutReports
	}
	return &batcher[store.Report]{write: write, vmID: func(r store.Report) string { return r.VMID }, perVM: map[string]int{}, kick: make(chan struct{}, 1)}
}

// newServedBatcher batches served records; they have no "first".
func newServedBatcher(w servedWriter) *batcher[store.Served] {
	return &batcher[store.Served]{write: func(ctx context.Context, ss []store.Served) ([]bool, error) {
		return nil, w.PutServed(ctx, ss)
	}, vmID: func(s store.Served) string { return s.VMID }, perVM: map[string]int{}, kick: make(chan struct{}, 1)}
}

// put queues r and waits for its write, or for ctx.
func (b *batcher[T]) put(ctx context.Context, r T) (bool, error) {
	done := make(chan reportResult, 1)
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return false, errors.New("live-patching service is stopping")
	case len(b.pending) >= reportQueue, b.perVM[b.vmID(r)] >= maxPendingPerVM:
		b.mu.Unlock()
		return false, errReportQueueFull
	}
	b.pending = append(b.pending, pending[T]{r: r, done: done})
	b.perVM[b.vmID(r)]++
	// The first record waiting asks for a write, and so does the one that
	// fills a batch, which does not wait out the gap.
	wake := len(b.pending) == 1 || len(b.pending) == reportBatch
	b.mu.Unlock()
	if wake {
		b.wake()
	}
	select {
	case res := <-done:
		return res.first, res.err
	case <-ctx.Done():
		// The record may still be stored; the caller does not wait to know.
		return false, ctx.Err()
	}
}

func (b *batcher[T]) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Run writes batches until ctx ends, then writes what is pending (within
// a bounded time) and refuses new records.
func (b *batcher[T]) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
		case <-b.kick:
		}
		if ctx.Err() != nil {
			b.mu.Lock()
			b.closed = true
			b.mu.Unlock()
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			for b.writeBatch(final) {
			}
			cancel()
			return
		}
		b.mu.Lock()
		wait := time.Until(b.lastWrite.Add(reportGap))
		full := len(b.pending) >= reportBatch
		b.mu.Unlock()
		if wait > 0 && !full {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				continue // to the shutdown, which writes what waits
			}
		}
		// A write once begun is not cut short by the shutdown: its records'
		// callers may still wait (the shutdown's own bound applies).
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		more := b.writeBatch(wctx)
		wcancel()
		if more {
			b.wake()
		}
	}
}

// writeBatch writes up to reportBatch waiting records, answers their
// puts, and reports whether more wait.
func (b *batcher[T]) writeBatch(ctx context.Context) (more bool) {
	b.mu.Lock()
	n := min(len(b.pending), reportBatch)
	batch := b.pending[:n:n]
	b.pending = b.pending[n:]
	for _, p := range batch {
		vm := b.vmID(p.r)
		if b.perVM[vm]--; b.perVM[vm] <= 0 {
			delete(b.perVM, vm)
		}
	}
	if n > 0 {
		b.lastWrite = time.Now()
	}
	more = len(b.pending) > 0
	b.mu.Unlock()
	if n == 0 {
		return more
	}
	rs := make([]T, n)
	for i, p := range batch {
		rs[i] = p.r
	}
	first, err := b.write(ctx, rs)
	for i, p := range batch {
		res := reportResult{err: err}
		if err == nil && i < len(first) {
			res.first = first[i]
		}
		p.done <- res
	}
	b.mu.Lock()
	more = len(b.pending) > 0
	b.mu.Unlock()
	return more
}
