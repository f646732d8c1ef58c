package lps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

const testBoot = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

// hotfixReport is a valid report from a node that ran relServed's hotfix.
// testReplica is the test server's ReplicaID.
const testReplica = "lpsd-test-1"

func hotfixReport() *nodev1.ReportOutcomeRequest {
	return &nodev1.ReportOutcomeRequest{
		BootId: testBoot, BakedVersion: "202501.15.0", Agent: nodev1.Agent_AGENT_HOTFIX,
		AgentVersion: relServed.Version, HotfixVersion: relServed.Version, Decision: "hotfix",
		CheckHotfixOutcome: "lpsRead", DownloadHotfixOutcome: "staged", Route: "direct",
		CheckHotfixMs: 4, DownloadHotfixMs: 40, ProvisionMs: 90000,
	}
}

func (ts *testServer) report(t *testing.T, token string, r *nodev1.ReportOutcomeRequest) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return lpsclient.Report(ctx, lpsclient.Target{Host: apiHost, Addr: ts.addr, Roots: ts.roots}, token, r)
}

// TestReportOutcomeCountsEachBootOnce: a report is stored under the
// attested vmId; the same boot reported again replaces it and counts once;
// another boot is another report.
func TestReportOutcomeCountsEachBootOnce(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	for i, want := range []bool{true, false, false} {
		first, err := ts.report(t, mintToken(t, cas.good, docOpts{}), hotfixReport())
		if err != nil || first != want {
			t.Fatalf("report %d = %v, %v; want first=%v", i, first, err, want)
		}
	}
	failed := hotfixReport()
	failed.BootId = "8c9e6679-7425-40de-944b-e07fc1f90ae7"
	failed.ProvisionExitCode = 7
	if first, err := ts.report(t, mintToken(t, cas.good, docOpts{}), failed); err != nil || !first {
		t.Fatalf("another boot = %v, %v", first, err)
	}
	control := &nodev1.ReportOutcomeRequest{BootId: "9c9e6679-7425-40de-944b-e07fc1f90ae7", BakedVersion: "202501.15.0", Agent: nodev1.Agent_AGENT_BAKED, AgentVersion: "202501.15.0", Decision: "noHotfixForBase"}
	if _, err := ts.report(t, mintToken(t, cas.good, docOpts{}), control); err != nil {
		t.Fatalf("control report: %v", err)
	}
	reports, err := ts.st.Reports(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := tally.Of([]rollout.Release{relServed}, reports, nil, time.Now())
	// Both boots are stored; the node is one vote, its worst report's.
	if len(reports) != 3 {
		t.Errorf("%d reports stored, want 3 (two boots and the control)", len(reports))
	}
	if c := got.Releases[relServed.Version]; c != (tally.Counts{Failed: 1}) {
		t.Errorf("release counts = %+v, want the node's worst report: 1 failed", c)
	}
	if c := got.Control["202501.15"]; c != (tally.Counts{OK: 1}) {
		t.Errorf("control counts = %+v, want 1 reported, 1 ok", c)
	}
	for _, r := range reports {
		if r.VMID != testVMID || r.SubscriptionID != testSub {
			t.Errorf("stored identity %s/%s, want the attested %s/%s", r.VMID, r.SubscriptionID, testVMID, testSub)
		}
		if r.Replica != testReplica {
			t.Errorf("stored report names replica %q, want %q, whose clock its time is by", r.Replica, testReplica)
		}
	}
}

// TestReportOutcomeRefuses: hostile or broken reports are refused with a
// clear code and nothing is stored.
func TestReportOutcomeRefuses(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	never := release("202501.15.4", rollout.Rollout{State: rollout.Rolling, Percent: 0}, false)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed, never}})
	tests := []struct {
		name   string
		token  func() string
		mutate func(r *nodev1.ReportOutcomeRequest)
		want   codes.Code
	}{
		{"forged document", func() string { return mintToken(t, cas.unpinned, docOpts{}) }, nil, codes.Unauthenticated},
		{"no document", func() string { return "" }, nil, codes.Unauthenticated},
		{"boot not a UUID", nil, func(r *nodev1.ReportOutcomeRequest) { r.BootId = "../../etc" }, codes.InvalidArgument},
		{"baked version malformed", nil, func(r *nodev1.ReportOutcomeRequest) { r.BakedVersion = "dev" }, codes.InvalidArgument},
		{"agent unset", nil, func(r *nodev1.ReportOutcomeRequest) { r.Agent = nodev1.Agent_AGENT_UNSPECIFIED }, codes.InvalidArgument},
		{"hotfix agent not the chosen hotfix", nil, func(r *nodev1.ReportOutcomeRequest) { r.AgentVersion = "202501.15.9" }, codes.InvalidArgument},
		{"hotfix of another base", nil, func(r *nodev1.ReportOutcomeRequest) { r.BakedVersion = "202502.01.0" }, codes.InvalidArgument},
		{"oversized text", nil, func(r *nodev1.ReportOutcomeRequest) { r.FallbackReason = strings.Repeat("x", 300) }, codes.InvalidArgument},
		{"negative duration", nil, func(r *nodev1.ReportOutcomeRequest) { r.ProvisionMs = -1 }, codes.InvalidArgument},
		{"exit code out of range", nil, func(r *nodev1.ReportOutcomeRequest) { r.ProvisionExitCode = 1000 }, codes.InvalidArgument},
		{"never offered", nil, func(r *nodev1.ReportOutcomeRequest) { r.AgentVersion, r.HotfixVersion = never.Version, never.Version }, codes.FailedPrecondition},
		{"unknown release", nil, func(r *nodev1.ReportOutcomeRequest) { r.AgentVersion, r.HotfixVersion = "202501.15.8", "202501.15.8" }, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hotfixReport()
			if tt.mutate != nil {
				tt.mutate(r)
			}
			token := mintToken(t, cas.good, docOpts{})
			if tt.token != nil {
				token = tt.token()
			}
			_, err := ts.report(t, token, r)
			var le *lpsclient.Error
			if err == nil || !asError(err, &le) || le.Code != tt.want {
				t.Errorf("report = %v, want %v", err, tt.want)
			}
		})
	}
	if reports, _ := ts.st.Reports(t.Context()); len(reports) != 0 {
		t.Errorf("%d reports stored from refused calls", len(reports))
	}
}

// TestReportOutcomeRequestedVersion: a node counts as having refused only
// a release lpsd offered it. A baked-agent report naming a release it was
// never offered (0 %: a VM filing refusals against a release it never
// got), one of another base, an unknown version or garbage is stored as
// what ran, without the request, so it counts for no release; one naming
// the release it was served keeps it and counts for that release.
func TestReportOutcomeRequestedVersion(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	never := release("202501.15.4", rollout.Rollout{State: rollout.Rolling, Percent: 0}, false)
	rels := []rollout.Release{relServed, never}
	ts := startServer(t, serverOpts{releases: rels})
	refusal := func(boot, requested string) *nodev1.ReportOutcomeRequest {
		return &nodev1.ReportOutcomeRequest{
			BootId: boot, BakedVersion: "202501.15.0", Agent: nodev1.Agent_AGENT_BAKED, AgentVersion: "202501.15.0",
			RequestedVersion: requested, Decision: "untrusted", CheckHotfixOutcome: "lpsRead", DownloadHotfixOutcome: "untrusted",
		}
	}
	tests := []struct{ boot, requested, want string }{
		{"00000000-0000-4000-8000-000000000001", never.Version, ""},
		{"00000000-0000-4000-8000-000000000002", "202502.01.1", ""},
		{"00000000-0000-4000-8000-000000000003", "202501.15.8", ""},
		{"00000000-0000-4000-8000-000000000004", "not a version", ""},
		{"00000000-0000-4000-8000-000000000005", relServed.Version, relServed.Version},
	}
	for _, tt := range tests {
		if _, err := ts.report(t, mintToken(t, cas.good, docOpts{}), refusal(tt.boot, tt.requested)); err != nil {
			t.Fatalf("report requesting %q: %v", tt.requested, err)
		}
	}
	reports, err := ts.st.Reports(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range reports {
		got[r.Boot] = r.RequestedVersion
	}
	for _, tt := range tests {
		if v, ok := got[tt.boot]; !ok || v != tt.want {
			t.Errorf("report requesting %q stored with requested_version %q (stored: %v), want %q", tt.requested, v, ok, tt.want)
		}
	}
	c := tally.Of(rels, reports, nil, time.Now())
	if n := c.Releases[never.Version]; n.Served() != 0 {
		t.Errorf("the release never offered counts %+v, want no node", n)
	}
	if n := c.Releases[relServed.Version]; n.RefusedIntegrity != 1 || n.Served() != 1 {
		t.Errorf("the served release counts %+v, want the one node that was served it, refusedIntegrity", n)
	}
}

// TestReportOutcomeBootFlood: a node inventing boot IDs is refused past
// maxBootsPerVM, and what it got in counts once per boot.
func TestReportOutcomeBootFlood(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	for i := range maxBootsPerVM + 1 {
		r := hotfixReport()
		r.BootId = fmt.Sprintf("%08d-7425-40de-944b-e07fc1f90ae7", i)
		_, err := ts.report(t, mintToken(t, cas.good, docOpts{}), r)
		if i < maxBootsPerVM && err != nil {
			t.Fatalf("boot %d refused: %v", i, err)
		}
		if i == maxBootsPerVM && status.Code(unwrapStatus(err)) != codes.ResourceExhausted {
			t.Fatalf("boot %d = %v, want ResourceExhausted", i, err)
		}
	}
	if reports, _ := ts.st.Reports(t.Context()); len(reports) != maxBootsPerVM {
		t.Errorf("%d reports stored, want %d", len(reports), maxBootsPerVM)
	}
}

func asError(err error, target **lpsclient.Error) bool {
	le, ok := err.(*lpsclient.Error)
	if ok {
		*target = le
	}
	return ok
}

func unwrapStatus(err error) error {
	if le, ok := err.(*lpsclient.Error); ok {
		return status.Error(le.Code, le.Error())
	}
	return err
}

// TestReportOutcomeReplayedDocument: a document used past the verifier's
// MaxUses is refused on the report path as on GetComponentConfig.
func TestReportOutcomeReplayedDocument(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	token := mintToken(t, cas.good, docOpts{})
	for i := range testMaxUses {
		if _, err := ts.report(t, token, hotfixReport()); err != nil {
			t.Fatalf("use %d refused: %v", i+1, err)
		}
	}
	_, err := ts.report(t, token, hotfixReport())
	var le *lpsclient.Error
	if !asError(err, &le) || le.Code != codes.Unauthenticated {
		t.Fatalf("replayed document = %v, want Unauthenticated", err)
	}
}

// TestReportQueueFull: with the store stalled, at most reportQueue reports
// wait; the next is refused at once with errReportQueueFull (the node is
// told ResourceExhausted and moves on), and a stalled store does not hold
// a refused caller.
func TestReportQueueFull(t *testing.T) {
	t.Parallel()
	b := newReportBatcher(nil) // never run: the store is stalled
	ctx, cancel := context.WithCancel(t.Context())
	waiting := make(chan error, reportQueue)
	for i := range reportQueue {
		go func() {
			_, err := b.put(ctx, store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: testBoot})
			waiting <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.pending)
		b.mu.Unlock()
		if n == reportQueue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reports queued", n, reportQueue)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.put(t.Context(), store.Report{VMID: "one-too-many", Boot: testBoot}); !errors.Is(err, errReportQueueFull) {
		t.Errorf("put with %d waiting = %v, want errReportQueueFull", reportQueue, err)
	}
	cancel()
	for range reportQueue {
		if err := <-waiting; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiting put ended with %v, want its context's end", err)
		}
	}
}

// TestReportBatcherGroupsWhatWaits: the report that finds nothing waiting
// asks for a write at once; reports that arrive before that write share
// it; a write that leaves reports behind says so (Run then writes them,
// reportGap after it started).
func TestReportBatcherGroupsWhatWaits(t *testing.T) {
	t.Parallel()
	w := &countingWriter{}
	b := newReportBatcher(w) // written by hand, not Run
	done := make(chan error, reportBatch+2)
	put := func(vm string) {
		go func() {
			_, err := b.put(t.Context(), store.Report{VMID: vm, Boot: testBoot})
			done <- err
		}()
	}
	waiting := func(n int) {
		t.Helper()
		for {
			b.mu.Lock()
			got := len(b.pending)
			b.mu.Unlock()
			if got == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	put("vm-0")
	select {
	case <-b.kick:
	case <-time.After(10 * time.Second):
		t.Fatal("a report to an idle batcher asked for no write")
	}
	put("vm-1")
	waiting(2)
	if len(b.kick) != 0 {
		t.Error("a report that found another waiting asked for a write of its own")
	}
	if more := b.writeBatch(t.Context()); more || w.writes != 1 {
		t.Fatalf("writeBatch: more %v after %d writes, want the two in one write", more, w.writes)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := range reportBatch + 1 {
		put(fmt.Sprintf("vm-%d", 10+i))
	}
	waiting(reportBatch + 1)
	if more := b.writeBatch(t.Context()); !more {
		t.Error("a full batch's write did not say one report still waits")
	}
	if more := b.writeBatch(t.Context()); more || w.writes != 3 {
		t.Errorf("writeBatch: more %v after %d writes, want 3", more, w.writes)
	}
}

// countingWriter stores nothing and counts its writes.
type countingWriter struct{ writes int }

func (w *countingWriter) PutReports(_ context.Context, rs []store.Report) ([]bool, error) {
	w.writes++
	return make([]bool, len(rs)), nil
}

// ctxWriter refuses a done ctx, as boltstore and etcdstore do.
type ctxWriter struct{}

func (ctxWriter) PutReports(ctx context.Context, rs []store.Report) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("put reports: %w", err)
	}
	return make([]bool, len(rs)), nil
}

// TestReportBatcherShutdownWritesWhatWaits: a report waiting (its write
// asked for) when Run's ctx ends is written by the shutdown under its own
// bounded ctx, never under the ended one. Run once chose between the two
// at random.
func TestReportBatcherShutdownWritesWhatWaits(t *testing.T) {
	t.Parallel()
	for range 50 {
		b := newReportBatcher(ctxWriter{})
		done := make(chan error, 1)
		go func() {
			_, err := b.put(context.Background(), store.Report{VMID: "vm", Boot: testBoot})
			done <- err
		}()
		for len(b.kick) == 0 {
			time.Sleep(time.Millisecond)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		b.Run(ctx)
		if err := <-done; err != nil {
			t.Fatalf("a report waiting at shutdown: %v", err)
		}
	}
}

func (ts *testServer) started(t *testing.T, token string, r *nodev1.ReportStartedRequest) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return lpsclient.Started(ctx, lpsclient.Target{Host: apiHost, Addr: ts.addr, Roots: ts.roots}, token, r)
}

func startedReport() *nodev1.ReportStartedRequest {
	return &nodev1.ReportStartedRequest{BootId: testBoot, BakedVersion: "202501.15.0", HotfixVersion: relServed.Version, CheckHotfixMs: 4, DownloadHotfixMs: 40}
}

// TestReportStarted: a started report is stored under the attested vmId
// and counts as pending, never ok; the boot's outcome supersedes it, and a
// started report that arrives after the outcome (a late resend) changes
// nothing. Hostile or broken ones are refused and nothing is stored.
func TestReportStarted(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	never := release("202501.15.4", rollout.Rollout{State: rollout.Rolling, Percent: 0}, false)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed, never}})
	token := func() string { return mintToken(t, cas.good, docOpts{}) }
	for _, tt := range []struct {
		name   string
		mutate func(r *nodev1.ReportStartedRequest)
		want   codes.Code
	}{
		{"boot not a UUID", func(r *nodev1.ReportStartedRequest) { r.BootId = "../../etc" }, codes.InvalidArgument},
		{"baked version malformed", func(r *nodev1.ReportStartedRequest) { r.BakedVersion = "dev" }, codes.InvalidArgument},
		{"hotfix not newer", func(r *nodev1.ReportStartedRequest) { r.HotfixVersion = r.BakedVersion }, codes.InvalidArgument},
		{"hotfix of another base", func(r *nodev1.ReportStartedRequest) { r.BakedVersion = "202502.01.0" }, codes.InvalidArgument},
		{"negative duration", func(r *nodev1.ReportStartedRequest) { r.DownloadHotfixMs = -1 }, codes.InvalidArgument},
		{"never offered", func(r *nodev1.ReportStartedRequest) { r.HotfixVersion = never.Version }, codes.FailedPrecondition},
	} {
		r := startedReport()
		tt.mutate(r)
		_, err := ts.started(t, token(), r)
		var le *lpsclient.Error
		if err == nil || !asError(err, &le) || le.Code != tt.want {
			t.Errorf("%s: started = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := ts.started(t, mintToken(t, cas.unpinned, docOpts{}), startedReport()); err == nil {
		t.Errorf("started with a forged document accepted")
	}
	if reports, _ := ts.st.Reports(t.Context()); len(reports) != 0 {
		t.Fatalf("%d reports stored from refused started reports", len(reports))
	}

	count := func() tally.Counts {
		t.Helper()
		reports, err := ts.st.Reports(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return tally.Of([]rollout.Release{relServed}, reports, nil, time.Now()).Releases[relServed.Version]
	}
	if first, err := ts.started(t, token(), startedReport()); err != nil || !first {
		t.Fatalf("started = %v, %v; want stored", first, err)
	}
	if c := count(); c != (tally.Counts{Pending: 1}) {
		t.Errorf("after the started report: %+v, want 1 pending (never ok)", c)
	}
	failed := hotfixReport()
	failed.ProvisionExitCode = 3
	if first, err := ts.report(t, token(), failed); err != nil || first {
		t.Fatalf("outcome = %v, %v; want it to replace the started report", first, err)
	}
	if first, err := ts.started(t, token(), startedReport()); err != nil || first {
		t.Fatalf("late started = %v, %v; want acknowledged, not stored", first, err)
	}
	if c := count(); c != (tally.Counts{Failed: 1}) {
		t.Errorf("after the outcome and a late started report: %+v, want the outcome: 1 failed", c)
	}
}
