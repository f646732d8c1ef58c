// Package storetest is the conformance suite every store.Store backend
// passes.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// WaitTimeout bounds every wait for a Watch signal or channel close. It is
// generous because shared backends deliver signals over the network, and
// CI runs with -race on two cores.
const WaitTimeout = 15 * time.Second

// Run runs the conformance suite against the backend that open returns. Each
// call of open must return a new, empty store that no other call shares
// (for a shared server, a fresh key prefix). The suite closes every store it
// opens; open may register its own clean-up too, since Close is idempotent.
// Subtests run in parallel. The store-wide revision is only required to
// grow, so stores sharing one etcd revision space pass.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"round-trip", testRoundTrip},
		{"not-found", testNotFound},
		{"create-only", testCreateOnly},
		{"compare-and-swap", testCompareAndSwap},
		{"revision-per-record", testRevisionPerRecord},
		{"concurrent-writers", testConcurrentWriters},
		{"concurrent-creators", testConcurrentCreators},
		{"releases-order", testReleasesOrder},
		{"invalid-release", testInvalidRelease},
		{"audit-atomic", testAuditAtomic},
		{"audit-paging", testAuditPaging},
		{"isolation", testIsolation},
		{"watch-signals", testWatchSignals},
		{"watch-cancel", testWatchCancel},
		{"reports-first", testReportsFirst},
		{"reports-within-call", testReportsWithinCall},
		{"reports-invalid", testReportsInvalid},
		{"reports-order", testReportsOrder},
		{"reports-not-releases", testReportsNotReleases},
		{"reports-large-call", testReportsLargeCall},
		{"reports-cancel", testReportsCancel},
		{"reports-started", testReportsStarted},
		{"beats", testBeats},
		{"history", testHistory},
		{"seats", testSeats},
		{"seats-concurrent", testSeatsConcurrent},
		{"seats-invalid", testSeatsInvalid},
		{"seats-not-releases", testSeatsNotReleases},
		{"seats-per-subscription", testSeatsPerSubscription},
		{"served", testServed},
		{"served-large-call", testServedLargeCall},
		{"served-invalid", testServedInvalid},
		{"configs-round-trip", testConfigsRoundTrip},
		{"configs-compare-and-swap", testConfigsCompareAndSwap},
		{"configs-watch", testConfigsWatch},
		{"configs-apart-from-releases", testConfigsApart},
		{"close", testClose},
	}
	for _, tt := range slices.Concat(tests, logTests, pruneTests) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tt.fn(t, s)
		})
	}
}

// Release returns a valid draft release of version (YYYYMM.DD.PATCH) whose
// envelope has insignificant whitespace, so byte-exact storage shows.
func Release(version string) rollout.Release {
	return rollout.Release{
		Version:     version,
		Base:        version[:9],
		Envelope:    json.RawMessage(`{ "payload": "` + version + `",  "sig": "c2ln" }`),
		Rollout:     rollout.Rollout{State: rollout.Draft},
		PublishedAt: time.Date(2026, 4, 1, 12, 30, 45, 123456789, time.UTC),
		UpdatedAt:   time.Date(2026, 4, 1, 12, 30, 45, 123456789, time.UTC),
	}
}

// Entry returns an audit entry for a change of target.
func Entry(action, target string) store.AuditEntry {
	return store.AuditEntry{
		Time:   time.Date(2026, 4, 2, 8, 0, 0, 987654321, time.UTC),
		Actor:  "operator@example",
		Action: action,
		Target: target,
		After:  json.RawMessage(`{"version": "` + target + `"}`),
	}
}

// MustPut writes r with PutRelease and fails the test on error.
func MustPut(t testing.TB, s store.Store, r rollout.Release, ifRev int64) int64 {
	t.Helper()
	rev, err := s.PutRelease(t.Context(), r, ifRev, Entry("publish", r.Version), nil)
	if err != nil {
		t.Fatalf("PutRelease(%s, %d) = %v", r.Version, ifRev, err)
	}
	return rev
}

// QuietWait is how long a test watches for a signal that must not come. A
// due signal arrives far sooner on every backend, so a wrong one would show.
const QuietWait = 500 * time.Millisecond

// Report returns a report for (vmID, boot) with every field set.
func Report(vmID, boot string) store.Report {
	return store.Report{
		VMID:           vmID,
		Boot:           boot,
		SubscriptionID: "sub-a",
		Base:           "202604.01",
		BakedVersion:   "1.4.0",
		Agent:          "hotfix",
		AgentVersion:   "1.4.2",
		HotfixVersion:  "202604.01.2",
		Decision:       "run-hotfix",
		CheckHotfix:    "ok",
		DownloadHotfix: "verified",
		Route:          "direct",
		Fallback:       true,
		FallbackReason: "launch-timeout",
		ExitCode:       2,
		CheckMS:        15,
		DownloadMS:     420,
		ProvisionMS:    61000,
		Time:           time.Date(2026, 4, 3, 9, 15, 0, 123456789, time.UTC),
		Replica:        "lpsd-1",
	}
}

// MustPutReports writes rs with PutReports and fails the test on error.
func MustPutReports(t testing.TB, s store.Store, rs ...store.Report) []bool {
	t.Helper()
	first, err := s.PutReports(t.Context(), rs)
	if err != nil {
		t.Fatalf("PutReports(%d reports) = %v", len(rs), err)
	}
	if len(first) != len(rs) {
		t.Fatalf("PutReports(%d reports) returned %d flags", len(rs), len(first))
	}
	return first
}

// MustReports reads every report and fails the test on error.
func MustReports(t testing.TB, s store.Store) []store.Report {
	t.Helper()
	got, err := s.Reports(t.Context())
	if err != nil {
		t.Fatalf("Reports = %v", err)
	}
	return got
}

// WaitSignal waits up to WaitTimeout for a value on ch.
func WaitSignal(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want a signal")
		}
	case <-time.After(WaitTimeout):
		t.Fatalf("no watch signal within %v", WaitTimeout)
	}
}

// WaitClosed waits up to WaitTimeout for ch to be closed, discarding
// pending signals.
func WaitClosed(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	deadline := time.After(WaitTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("watch channel not closed within %v", WaitTimeout)
		}
	}
}

// equateRecords compares times by instant and treats nil and empty slices
// as equal, as a JSON round trip does; byte slices still compare exactly.
var equateRecords = cmp.Options{cmpopts.EquateEmpty()}

func allAudit(t *testing.T, s store.Store) []store.AuditEntry {
	t.Helper()
	got, err := s.Audit(t.Context(), 0, 1000)
	if err != nil {
		t.Fatalf("Audit(0, 1000) = %v", err)
	}
	return got
}

func testRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := Release("202604.01.3")
	want.Rollout = rollout.Rollout{
		State:         rollout.Rolling,
		Percent:       25,
		Subscriptions: []string{"0a1b2c3d-0000-4000-8000-00000000000a", "0a1b2c3d-0000-4000-8000-00000000000b"},
		Regions:       []string{"westeurope"},
	}
	want.Revoked = true
	want.PublishedAt = time.Date(2026, 4, 1, 12, 0, 0, 1, time.FixedZone("UTC+2", 2*3600))
	want.UpdatedAt = time.Date(2026, 4, 3, 1, 2, 3, 999999999, time.UTC)
	want.NotAfter = time.Date(2026, 5, 3, 0, 0, 0, 0, time.UTC)
	entry := Entry("publish", want.Version)
	entry.Reason = "INC-1234: fix the kubelet flag \u201cfor real\u201d"
	entry.Before = json.RawMessage("null")
	entry.After = json.RawMessage("{\n  \"spaced\" : true }")

	rev, err := s.PutRelease(ctx, want, 0, entry, nil)
	if err != nil {
		t.Fatalf("PutRelease = %v", err)
	}
	if rev <= 0 {
		t.Errorf("PutRelease revision = %d, want > 0", rev)
	}
	got, gotRev, err := s.Release(ctx, want.Version)
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	if gotRev != rev {
		t.Errorf("Release revision = %d, want %d", gotRev, rev)
	}
	if diff := cmp.Diff(want, got, equateRecords); diff != "" {
		t.Errorf("Release mismatch (-want +got):\n%s", diff)
	}
	if string(got.Envelope) != string(want.Envelope) {
		t.Errorf("Envelope = %q, want the exact bytes %q", got.Envelope, want.Envelope)
	}

	list, listRev, err := s.Releases(ctx)
	if err != nil {
		t.Fatalf("Releases = %v", err)
	}
	if diff := cmp.Diff([]rollout.Release{want}, list, equateRecords); diff != "" {
		t.Errorf("Releases mismatch (-want +got):\n%s", diff)
	}
	if listRev < rev {
		t.Errorf("Releases revision = %d, want >= %d", listRev, rev)
	}

	audit := allAudit(t, s)
	if len(audit) != 1 {
		t.Fatalf("Audit returned %d entries, want 1", len(audit))
	}
	if audit[0].Seq <= 0 {
		t.Errorf("audit Seq = %d, want > 0", audit[0].Seq)
	}
	entry.Seq = audit[0].Seq
	if diff := cmp.Diff(entry, audit[0]); diff != "" {
		t.Errorf("audit entry mismatch (-want +got):\n%s", diff)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	_, _, err := s.Release(t.Context(), "202604.01.1")
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Release(missing) = %v, want ErrNotFound", err)
	}
	MustPut(t, s, Release("202604.01.2"), 0)
	if _, _, err := s.Release(t.Context(), "202604.01.1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Release(missing) beside another = %v, want ErrNotFound", err)
	}
}

func testCreateOnly(t *testing.T, s store.Store) {
	r := Release("202604.01.1")
	rev := MustPut(t, s, r, 0)
	r2 := r
	r2.Rollout.Percent = 50
	if _, err := s.PutRelease(t.Context(), r2, 0, Entry("publish", r.Version), nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutRelease(existing, ifRev 0) = %v, want ErrConflict", err)
	}
	got, gotRev, err := s.Release(t.Context(), r.Version)
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	if gotRev != rev || got.Rollout.Percent != 0 {
		t.Errorf("after a refused create: revision %d percent %d, want %d and 0", gotRev, got.Rollout.Percent, rev)
	}
}

func testCompareAndSwap(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := Release("202604.01.1")
	if _, err := s.PutRelease(ctx, r, 7, Entry("rollout-set", r.Version), nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutRelease(missing, ifRev 7) = %v, want ErrConflict", err)
	}
	rev1 := MustPut(t, s, r, 0)

	r.Rollout.State, r.Rollout.Percent = rollout.Rolling, 10
	rev2, err := s.PutRelease(ctx, r, rev1, Entry("rollout-set", r.Version), nil)
	if err != nil {
		t.Fatalf("PutRelease(current rev) = %v", err)
	}
	if rev2 <= rev1 {
		t.Errorf("revision after update = %d, want > %d", rev2, rev1)
	}

	r.Rollout.Percent = 20
	for _, stale := range []int64{rev1, rev2 + 1000, -1} {
		if _, err := s.PutRelease(ctx, r, stale, Entry("rollout-set", r.Version), nil); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutRelease(ifRev %d, stored %d) = %v, want ErrConflict", stale, rev2, err)
		}
	}
	got, gotRev, err := s.Release(ctx, r.Version)
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	if gotRev != rev2 || got.Rollout.Percent != 10 {
		t.Errorf("after refused updates: revision %d percent %d, want %d and 10", gotRev, got.Rollout.Percent, rev2)
	}

	rev3, err := s.PutRelease(ctx, r, rev2, Entry("rollout-set", r.Version), nil)
	if err != nil {
		t.Fatalf("PutRelease(current rev) = %v", err)
	}
	if rev3 <= rev2 {
		t.Errorf("revision after second update = %d, want > %d", rev3, rev2)
	}
}

func testRevisionPerRecord(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := Release("202604.01.1"), Release("202604.01.2")
	revA := MustPut(t, s, a, 0)
	revB := MustPut(t, s, b, 0)
	a.Rollout.Percent = 5
	if _, err := s.PutRelease(ctx, a, revA, Entry("rollout-set", a.Version), nil); err != nil {
		t.Fatalf("PutRelease(a) = %v", err)
	}
	if _, gotRev, err := s.Release(ctx, b.Version); err != nil || gotRev != revB {
		t.Errorf("Release(b) after a write to a = revision %d, %v; want %d, nil", gotRev, err, revB)
	}
	b.Rollout.Percent = 5
	if _, err := s.PutRelease(ctx, b, revB, Entry("rollout-set", b.Version), nil); err != nil {
		t.Errorf("PutRelease(b, its own revision) after a write to a = %v, want nil", err)
	}
}

// race runs n writers of f released together and returns their errors.
func race(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// checkOneWinner fails unless exactly one error is nil and the rest are
// ErrConflict.
func checkOneWinner(t *testing.T, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("writer %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	return winner
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers = 8
	r := Release("202604.01.1")
	rev := MustPut(t, s, r, 0)
	before := len(allAudit(t, s))
	errs := race(writers, func(i int) error {
		w := r
		w.Rollout.Percent = i + 1
		_, err := s.PutRelease(t.Context(), w, rev, Entry("rollout-set", fmt.Sprint(i)), nil)
		return err
	})
	winner := checkOneWinner(t, errs)
	got, _, err := s.Release(t.Context(), r.Version)
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	if got.Rollout.Percent != winner+1 {
		t.Errorf("stored percent = %d, want the winner's %d", got.Rollout.Percent, winner+1)
	}
	audit := allAudit(t, s)
	if len(audit) != before+1 {
		t.Fatalf("audit grew by %d entries, want 1", len(audit)-before)
	}
	if last := audit[len(audit)-1]; last.Target != fmt.Sprint(winner) {
		t.Errorf("last audit entry target = %q, want the winner's %q", last.Target, fmt.Sprint(winner))
	}
}

func testConcurrentCreators(t *testing.T, s store.Store) {
	const writers = 8
	errs := race(writers, func(i int) error {
		r := Release("202604.01.1")
		r.Rollout.Percent = i
		_, err := s.PutRelease(t.Context(), r, 0, Entry("publish", r.Version), nil)
		return err
	})
	winner := checkOneWinner(t, errs)
	got, _, err := s.Release(t.Context(), "202604.01.1")
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	if got.Rollout.Percent != winner {
		t.Errorf("stored percent = %d, want the winner's %d", got.Rollout.Percent, winner)
	}
	if n := len(allAudit(t, s)); n != 1 {
		t.Errorf("audit has %d entries, want 1", n)
	}
}

func testReleasesOrder(t *testing.T, s store.Store) {
	ctx := t.Context()
	list, prev, err := s.Releases(ctx)
	if err != nil {
		t.Fatalf("Releases(empty) = %v", err)
	}
	if len(list) != 0 || prev < 0 {
		t.Errorf("Releases(empty) = %d releases at revision %d, want none at >= 0", len(list), prev)
	}
	versions := []string{"202604.01.10", "202604.01.9", "202512.31.1", "202604.01.2", "202604.02.1"}
	for _, v := range versions {
		putRev := MustPut(t, s, Release(v), 0)
		_, rev, err := s.Releases(ctx)
		if err != nil {
			t.Fatalf("Releases = %v", err)
		}
		if rev <= prev || rev < putRev {
			t.Errorf("Releases revision after writing %s = %d, want > %d and >= %d", v, rev, prev, putRev)
		}
		prev = rev
	}
	list, _, err = s.Releases(ctx)
	if err != nil {
		t.Fatalf("Releases = %v", err)
	}
	var got []string
	for _, r := range list {
		got = append(got, r.Version)
	}
	want := []string{"202512.31.1", "202604.01.2", "202604.01.9", "202604.01.10", "202604.02.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Releases order (-want +got):\n%s", diff)
	}
}

func testInvalidRelease(t *testing.T, s store.Store) {
	ctx := t.Context()
	existing := Release("202604.01.1")
	rev := MustPut(t, s, existing, 0)
	tests := []struct {
		name   string
		modify func(r *rollout.Release)
		ifRev  int64
	}{
		{"bad-version", func(r *rollout.Release) { r.Version, r.Base = "dev", "" }, 0},
		{"non-canonical", func(r *rollout.Release) { r.Version = "202604.01.01" }, 0},
		{"base-mismatch", func(r *rollout.Release) { r.Base = "202604.02" }, rev},
		{"no-envelope", func(r *rollout.Release) { r.Envelope = nil }, rev},
		{"bad-state", func(r *rollout.Release) { r.Rollout.State = "deleted" }, rev},
		{"bad-percent", func(r *rollout.Release) { r.Rollout.Percent = 101 }, rev},
	}
	for _, tt := range tests {
		r := Release("202604.01.1")
		tt.modify(&r)
		_, err := s.PutRelease(ctx, r, tt.ifRev, Entry("publish", r.Version), nil)
		if err == nil {
			t.Errorf("%s: PutRelease = nil, want an error", tt.name)
		}
		if errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: PutRelease = %v, want a validation error, not ErrConflict", tt.name, err)
		}
	}
	list, _, err := s.Releases(ctx)
	if err != nil {
		t.Fatalf("Releases = %v", err)
	}
	if diff := cmp.Diff([]rollout.Release{existing}, list, equateRecords); diff != "" {
		t.Errorf("store changed by invalid writes (-want +got):\n%s", diff)
	}
	// The store-wide revision of a shared backend moves with other
	// tenants' writes; the record's own revision must not.
	if _, gotRev, err := s.Release(ctx, existing.Version); err != nil || gotRev != rev {
		t.Errorf("Release after invalid writes = revision %d, %v; want %d", gotRev, err, rev)
	}
	if n := len(allAudit(t, s)); n != 1 {
		t.Errorf("audit has %d entries after invalid writes, want 1", n)
	}
}

func testAuditAtomic(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := Release("202604.01.1")
	rev := MustPut(t, s, r, 0)
	if _, err := s.PutRelease(ctx, r, rev+100, Entry("pause", r.Version), nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutRelease(stale) = %v, want ErrConflict", err)
	}
	if _, err := s.PutRelease(ctx, r, 0, Entry("publish", r.Version), nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutRelease(existing, 0) = %v, want ErrConflict", err)
	}
	audit := allAudit(t, s)
	if len(audit) != 1 || audit[0].Action != "publish" {
		t.Errorf("audit after refused writes = %+v, want only the publish", audit)
	}
}

func testAuditPaging(t *testing.T, s store.Store) {
	ctx := t.Context()
	var want []store.AuditEntry
	revs := map[string]int64{}
	for i, v := range []string{"202604.01.1", "202604.01.2", "202604.01.1", "202604.01.3", "202604.01.1"} {
		r := Release(v)
		r.Rollout.Percent = i
		e := Entry(fmt.Sprintf("action-%d", i), v)
		rev, err := s.PutRelease(ctx, r, revs[v], e, nil)
		if err != nil {
			t.Fatalf("PutRelease(%s, %d) = %v", v, revs[v], err)
		}
		revs[v] = rev
		want = append(want, e)
	}
	all := allAudit(t, s)
	if len(all) != len(want) {
		t.Fatalf("Audit returned %d entries, want %d", len(all), len(want))
	}
	for i := range all {
		if i > 0 && all[i].Seq <= all[i-1].Seq {
			t.Errorf("audit Seq %d after %d, want strictly increasing", all[i].Seq, all[i-1].Seq)
		}
		want[i].Seq = all[i].Seq
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("Audit mismatch (-want +got):\n%s", diff)
	}

	var paged []store.AuditEntry
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatal("paging does not end")
		}
		page, err := s.Audit(ctx, after, 2)
		if err != nil {
			t.Fatalf("Audit(%d, 2) = %v", after, err)
		}
		if len(page) > 2 {
			t.Fatalf("Audit(%d, 2) returned %d entries", after, len(page))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Seq
	}
	if diff := cmp.Diff(want, paged); diff != "" {
		t.Errorf("paged Audit mismatch (-want +got):\n%s", diff)
	}
	if got, err := s.Audit(ctx, all[2].Seq, 1); err != nil || len(got) != 1 || got[0].Seq != all[3].Seq {
		t.Errorf("Audit(%d, 1) = %+v, %v; want entry %d", all[2].Seq, got, err, all[3].Seq)
	}
	if got, err := s.Audit(ctx, 0, 0); err != nil || len(got) != 0 {
		t.Errorf("Audit(0, 0) = %d entries, %v; want none", len(got), err)
	}
}

func testIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := Release("202604.01.1")
	r.Rollout.Subscriptions = []string{"sub-a"}
	want := Release("202604.01.1")
	want.Rollout.Subscriptions = []string{"sub-a"}
	MustPut(t, s, r, 0)
	r.Envelope[0] = 'X'
	r.Rollout.Subscriptions[0] = "changed"

	got, _, err := s.Release(ctx, r.Version)
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	got.Envelope[0] = 'Y'
	got.Rollout.Subscriptions[0] = "changed"
	list, _, err := s.Releases(ctx)
	if err != nil {
		t.Fatalf("Releases = %v", err)
	}
	list[0].Envelope[0] = 'Z'

	again, _, err := s.Release(ctx, r.Version)
	if err != nil {
		t.Fatalf("Release = %v", err)
	}
	if diff := cmp.Diff(want, again, equateRecords); diff != "" {
		t.Errorf("stored record changed through caller's slices (-want +got):\n%s", diff)
	}
}

func testWatchSignals(t *testing.T, s store.Store) {
	w := s.Watch(t.Context())
	rev := MustPut(t, s, Release("202604.01.1"), 0)
	WaitSignal(t, w)

	r := Release("202604.01.1")
	r.Rollout.Percent = 10
	if _, err := s.PutRelease(t.Context(), r, rev, Entry("rollout-set", r.Version), nil); err != nil {
		t.Fatalf("PutRelease = %v", err)
	}
	// A signal is a hint to re-read: the latest write must be visible by
	// the time one arrives, which may be the first one's if they coalesced.
	deadline := time.Now().Add(WaitTimeout)
	for {
		got, _, err := s.Release(t.Context(), r.Version)
		if err != nil {
			t.Fatalf("Release = %v", err)
		}
		if got.Rollout.Percent == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("update not visible within %v", WaitTimeout)
		}
		WaitSignal(t, w)
	}
}

func testWatchCancel(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	w := s.Watch(ctx)
	other := s.Watch(t.Context())
	cancel()
	WaitClosed(t, w)

	MustPut(t, s, Release("202604.01.1"), 0)
	WaitSignal(t, other)
}

func testClose(t *testing.T, s store.Store) {
	ctx := t.Context()
	rev := MustPut(t, s, Release("202604.01.1"), 0)
	w := s.Watch(ctx)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	WaitClosed(t, w)

	if _, _, err := s.Releases(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Releases after Close = %v, want ErrClosed", err)
	}
	if _, _, err := s.Release(ctx, "202604.01.1"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	if _, err := s.PutRelease(ctx, Release("202604.01.1"), rev, Entry("pause", "202604.01.1"), nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("PutRelease after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Audit(ctx, 0, 10); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Audit after Close = %v, want ErrClosed", err)
	}
	if _, err := s.PutReports(ctx, []store.Report{Report("vm-1", "boot-1")}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("PutReports after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Reports(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Reports after Close = %v, want ErrClosed", err)
	}
	if _, err := s.TakeSeat(ctx, "202604.01.1", store.Seat{VMID: "vm-1"}, store.SeatLimit{Seats: 1}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("TakeSeat after Close = %v, want ErrClosed", err)
	}
	if _, err := s.HoldsSeat(ctx, "202604.01.1", "vm-1"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("HoldsSeat after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Seats(ctx, "202604.01.1"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Seats after Close = %v, want ErrClosed", err)
	}
	if err := s.PutServed(ctx, []store.Served{Served("202604.01.1", "vm-1", "boot-1")}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("PutServed after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Served(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Served after Close = %v, want ErrClosed", err)
	}
	WaitClosed(t, s.Watch(ctx))
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func testReportsFirst(t *testing.T, s store.Store) {
	if first := MustPutReports(t, s); len(first) != 0 {
		t.Errorf("PutReports(none) = %v, want no flags", first)
	}
	if got := MustReports(t, s); len(got) != 0 {
		t.Errorf("Reports(empty) = %+v, want none", got)
	}

	a, b := Report("vm-a", "boot-1"), Report("vm-b", "boot-1")
	if diff := cmp.Diff([]bool{true, true}, MustPutReports(t, s, a, b)); diff != "" {
		t.Errorf("PutReports(a, b) on an empty store: first flags (-want +got):\n%s", diff)
	}
	a2 := a
	a2.ExitCode, a2.Fallback, a2.FallbackReason = 0, false, ""
	a2.Time = a.Time.Add(time.Minute)
	c := Report("vm-a", "boot-2") // same VM, new boot: a new key
	if diff := cmp.Diff([]bool{false, true}, MustPutReports(t, s, a2, c)); diff != "" {
		t.Errorf("PutReports(a again, c): first flags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Report{a2, c, b}, MustReports(t, s)); diff != "" {
		t.Errorf("Reports (-want +got):\n%s", diff)
	}
}

func testReportsWithinCall(t *testing.T, s store.Store) {
	old := Report("vm-old", "boot-1")
	MustPutReports(t, s, old)

	x1, x2, y := Report("vm-x", "boot-1"), Report("vm-x", "boot-1"), Report("vm-y", "boot-1")
	x2.ExitCode = 7
	old2, old3 := old, old
	old2.ExitCode, old3.ExitCode = 8, 9
	first := MustPutReports(t, s, x1, old2, y, x2, old3)
	if diff := cmp.Diff([]bool{true, false, true, false, false}, first); diff != "" {
		t.Errorf("PutReports(x, old, y, x, old): first flags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Report{old3, x2, y}, MustReports(t, s)); diff != "" {
		t.Errorf("Reports after duplicates in one call, want the later ones (-want +got):\n%s", diff)
	}
}

// Started returns a started report for (vmID, boot).
func Started(vmID, boot string) store.Report {
	r := Report(vmID, boot)
	r.Phase, r.Fallback, r.FallbackReason, r.ExitCode, r.ProvisionMS = store.PhaseStarted, false, "", 0, 0
	return r
}

// testReportsStarted: a started report is stored where its key has none,
// an outcome replaces it, and it never replaces an outcome, stored or
// earlier in the same call; a later outcome in a call wins over a started
// report before it.
func testReportsStarted(t *testing.T, s store.Store) {
	a, b := Started("vm-a", "boot-1"), Report("vm-b", "boot-1")
	MustPutReports(t, s, b)
	late := Started("vm-b", "boot-1")
	if diff := cmp.Diff([]bool{true, false}, MustPutReports(t, s, a, late)); diff != "" {
		t.Errorf("PutReports(started a, started after b's outcome): first flags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Report{a, b}, MustReports(t, s)); diff != "" {
		t.Errorf("Reports: want a started, b's outcome kept (-want +got):\n%s", diff)
	}
	aOut := Report("vm-a", "boot-1")
	if diff := cmp.Diff([]bool{false}, MustPutReports(t, s, aOut)); diff != "" {
		t.Errorf("PutReports(a's outcome): first flags (-want +got):\n%s", diff)
	}
	c, cOut, d, dOut := Started("vm-c", "boot-1"), Report("vm-c", "boot-1"), Started("vm-d", "boot-1"), Report("vm-d", "boot-1")
	again := Started("vm-c", "boot-1")
	again.Time = again.Time.Add(time.Minute)
	if diff := cmp.Diff([]bool{true, false, true, false}, MustPutReports(t, s, c, cOut, dOut, d)); diff != "" {
		t.Errorf("PutReports(started c, c's outcome, d's outcome, started d): first flags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false}, MustPutReports(t, s, again)); diff != "" {
		t.Errorf("PutReports(started c again): first flags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Report{aOut, b, cOut, dOut}, MustReports(t, s)); diff != "" {
		t.Errorf("Reports: want every outcome, no started report over one (-want +got):\n%s", diff)
	}
}

// testBeats: a store with store.Beats marks minutes once however often
// they beat, lists them from a minute on, and forgets marks past
// store.BeatRetention.
func testBeats(t *testing.T, s store.Store) {
	b, ok := s.(store.Beats)
	if !ok {
		t.Skip("no store.Beats")
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{t0.Add(10 * time.Second), t0.Add(50 * time.Second), t0.Add(2*time.Minute + time.Second)} {
		if err := b.PutBeat(t.Context(), at); err != nil {
			t.Fatal(err)
		}
	}
	list := func(from time.Time) []time.Time {
		t.Helper()
		got, err := b.Beats(t.Context(), from)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if diff := cmp.Diff([]time.Time{t0, t0.Add(2 * time.Minute)}, list(t0.Add(-time.Hour))); diff != "" {
		t.Errorf("Beats (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Time{t0.Add(2 * time.Minute)}, list(t0.Add(time.Minute))); diff != "" {
		t.Errorf("Beats from a later minute (-want +got):\n%s", diff)
	}
	late := t0.Add(store.BeatRetention + time.Minute)
	if err := b.PutBeat(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]time.Time{t0.Add(2 * time.Minute), late}, list(time.Time{})); diff != "" {
		t.Errorf("Beats after retention (-want +got):\n%s", diff)
	}
}

func testReportsInvalid(t *testing.T, s store.Store) {
	stored := Report("vm-a", "boot-1")
	MustPutReports(t, s, stored)
	tests := []struct {
		name     string
		vm, boot string
	}{
		{"empty-vm", "", "boot-1"},
		{"empty-boot", "vm-a", ""},
		{"slash-vm", "vm/a", "boot-1"},
		{"slash-boot", "vm-a", "boot/1"},
	}
	for _, tt := range tests {
		changed := stored
		changed.ExitCode = 99
		// Valid reports before and after the bad one, one of them replacing
		// a stored key, must not be written either.
		rs := []store.Report{changed, Report("vm-new", "boot-1"), Report(tt.vm, tt.boot), Report("vm-z", "boot-1")}
		first, err := s.PutReports(t.Context(), rs)
		if !errors.Is(err, store.ErrInvalidReport) {
			t.Errorf("%s: PutReports = %v, %v; want ErrInvalidReport", tt.name, first, err)
		}
	}
	if diff := cmp.Diff([]store.Report{stored}, MustReports(t, s)); diff != "" {
		t.Errorf("store changed by refused calls (-want +got):\n%s", diff)
	}
}

func testReportsOrder(t *testing.T, s store.Store) {
	// "-" and "." sort before "/", so joined keys in byte order would put
	// vm-a-1 before vm-a.
	keys := [][2]string{
		{"vm-b", "boot-1"}, {"vm-a.2", "boot-1"}, {"vm-a", "boot-2"}, {"vm-a-1", "boot-1"},
		{"vm-a", "boot-10"}, {"vm-a", "boot-1"}, {"VM-C", "boot-1"},
	}
	var rs []store.Report
	for _, k := range keys {
		rs = append(rs, Report(k[0], k[1]))
	}
	MustPutReports(t, s, rs[:3]...)
	MustPutReports(t, s, rs[3:]...)
	var got [][2]string
	for _, r := range MustReports(t, s) {
		got = append(got, [2]string{r.VMID, r.Boot})
	}
	want := [][2]string{
		{"VM-C", "boot-1"}, {"vm-a", "boot-1"}, {"vm-a", "boot-10"}, {"vm-a", "boot-2"},
		{"vm-a-1", "boot-1"}, {"vm-a.2", "boot-1"}, {"vm-b", "boot-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Reports order (-want +got):\n%s", diff)
	}
}

func testReportsNotReleases(t *testing.T, s store.Store) {
	ctx := t.Context()
	rev := MustPut(t, s, Release("202604.01.1"), 0)
	_, listRev, err := s.Releases(ctx)
	if err != nil {
		t.Fatalf("Releases = %v", err)
	}
	w := s.Watch(ctx)

	MustPutReports(t, s, Report("vm-a", "boot-1"), Report("vm-b", "boot-1"))
	MustPutReports(t, s, Report("vm-a", "boot-1"))
	if _, got, err := s.Releases(ctx); err != nil || got != listRev {
		t.Errorf("Releases revision after reports = %d, %v; want %d unchanged", got, err, listRev)
	}
	if _, got, err := s.Release(ctx, "202604.01.1"); err != nil || got != rev {
		t.Errorf("Release revision after reports = %d, %v; want %d unchanged", got, err, rev)
	}
	if n := len(allAudit(t, s)); n != 1 {
		t.Errorf("audit has %d entries after reports, want the publish only", n)
	}
	select {
	case _, ok := <-w:
		t.Errorf("Watch signalled (open %v) after report writes only, want nothing", ok)
	case <-time.After(QuietWait):
	}
	// The watch is live: a release write still signals.
	MustPut(t, s, Release("202604.01.2"), 0)
	WaitSignal(t, w)
}

func testReportsLargeCall(t *testing.T, s store.Store) {
	const n = 300 // more than one etcd transaction of 128
	rs := make([]store.Report, n)
	for i := range rs {
		rs[i] = Report(fmt.Sprintf("vm-%04d", i), "boot-1")
	}
	for i, f := range MustPutReports(t, s, rs...) {
		if !f {
			t.Fatalf("PutReports(%d new): report %d not new", n, i)
		}
	}
	if diff := cmp.Diff(rs, MustReports(t, s)); diff != "" {
		t.Fatalf("Reports after %d new (-want +got):\n%s", n, diff)
	}
	for i := range rs {
		rs[i].ExitCode = i
	}
	for i, f := range MustPutReports(t, s, rs...) {
		if f {
			t.Fatalf("PutReports(%d stored): report %d new", n, i)
		}
	}
	if diff := cmp.Diff(rs, MustReports(t, s)); diff != "" {
		t.Errorf("Reports after %d replaced (-want +got):\n%s", n, diff)
	}
}

func testReportsCancel(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.PutReports(ctx, []store.Report{Report("vm-a", "boot-1")}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutReports(canceled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Reports(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Reports(canceled ctx) = %v, want context.Canceled", err)
	}
	if got := MustReports(t, s); len(got) != 0 {
		t.Errorf("Reports after a canceled PutReports = %+v, want none", got)
	}
}

// seatTime is when the suite's seats are taken: nanoseconds, so a backend
// that rounds shows.
var seatTime = time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)

// MustTakeSeat takes a seat at seatTime or fails the test.
func MustTakeSeat(t testing.TB, s store.Store, version, vmID string, limit int) bool {
	t.Helper()
	held, err := s.TakeSeat(t.Context(), version, store.Seat{VMID: vmID, Since: seatTime}, store.SeatLimit{Seats: limit})
	if err != nil {
		t.Fatalf("TakeSeat(%s, %s, %d) = %v", version, vmID, limit, err)
	}
	return held
}

// MustHoldsSeat reads whether vmID holds a seat or fails the test.
func MustHoldsSeat(t testing.TB, s store.Store, version, vmID string) bool {
	t.Helper()
	held, err := s.HoldsSeat(t.Context(), version, vmID)
	if err != nil {
		t.Fatalf("HoldsSeat(%s, %s) = %v", version, vmID, err)
	}
	return held
}

// MustSeats lists the holders of seats or fails the test.
func MustSeats(t testing.TB, s store.Store, version string) []string {
	t.Helper()
	got, err := s.Seats(t.Context(), version)
	if err != nil {
		t.Fatalf("Seats(%s) = %v", version, err)
	}
	var vms []string
	for _, seat := range got {
		vms = append(vms, seat.VMID)
	}
	return vms
}

func testSeats(t *testing.T, s store.Store) {
	const v = "202604.01.1"
	if got := MustSeats(t, s, v); len(got) != 0 {
		t.Errorf("Seats on an empty store = %v, want none", got)
	}
	for _, vm := range []string{"vm-c", "vm-a", "vm-b"} {
		if !MustTakeSeat(t, s, v, vm, 3) {
			t.Errorf("TakeSeat(%s) with a free seat = false", vm)
		}
	}
	if MustTakeSeat(t, s, v, "vm-d", 3) {
		t.Error("TakeSeat(vm-d) with all 3 seats taken = true")
	}
	if !MustTakeSeat(t, s, v, "vm-a", 3) || !MustHoldsSeat(t, s, v, "vm-a") {
		t.Error("a holder taking again, or read, = false")
	}
	if MustHoldsSeat(t, s, v, "vm-d") || MustHoldsSeat(t, s, "202604.01.2", "vm-a") {
		t.Error("HoldsSeat = true for a vmId without a seat of that release")
	}
	if MustTakeSeat(t, s, v, "vm-d", 0) || MustHoldsSeat(t, s, v, "vm-d") {
		t.Error("limit 0 gave vm-d a seat")
	}
	// A later step's larger canary: held seats count against it.
	if !MustTakeSeat(t, s, v, "vm-d", 4) || MustTakeSeat(t, s, v, "vm-e", 4) {
		t.Error("limit 4 after 3 held: want one more seat, then none")
	}
	if diff := cmp.Diff([]string{"vm-a", "vm-b", "vm-c", "vm-d"}, MustSeats(t, s, v)); diff != "" {
		t.Errorf("Seats (-want +got):\n%s", diff)
	}
	// A holder taking again keeps the time it first took its seat.
	if _, err := s.TakeSeat(t.Context(), v, store.Seat{VMID: "vm-a", Since: seatTime.Add(time.Hour)}, store.SeatLimit{Seats: 4}); err != nil {
		t.Fatal(err)
	}
	seats, err := s.Seats(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	for _, seat := range seats {
		if !seat.Since.Equal(seatTime) {
			t.Errorf("seat of %s taken at %v, stored as %v", seat.VMID, seatTime, seat.Since)
		}
	}
	// Seats are per release, and "vm-a.2" sorts after "vm-a" whatever the
	// key encoding.
	if !MustTakeSeat(t, s, "202604.01.2", "vm-a.2", 2) || !MustTakeSeat(t, s, "202604.01.2", "vm-a", 2) {
		t.Error("another release's seats not taken")
	}
	if diff := cmp.Diff([]string{"vm-a", "vm-a.2"}, MustSeats(t, s, "202604.01.2")); diff != "" {
		t.Errorf("Seats of the other release (-want +got):\n%s", diff)
	}
}

// testSeatsConcurrent: racing takers, each through its own call, never
// seat more vmIds than the limit, and a vmId racing itself holds one seat.
func testSeatsConcurrent(t *testing.T, s store.Store) {
	const v, limit, takers = "202604.01.1", 5, 24
	var mu sync.Mutex
	var won []string
	errs := race(takers, func(i int) error {
		vm := fmt.Sprintf("vm-%02d", i)
		held, err := s.TakeSeat(t.Context(), v, store.Seat{VMID: vm, Since: seatTime}, store.SeatLimit{Seats: limit})
		if held {
			mu.Lock()
			won = append(won, vm)
			mu.Unlock()
		}
		return err
	})
	for _, err := range errs {
		if err != nil {
			t.Fatalf("TakeSeat: %v", err)
		}
	}
	got := MustSeats(t, s, v)
	if len(got) != limit {
		t.Fatalf("%d takers for %d seats: %d seated %v", takers, limit, len(got), got)
	}
	slices.Sort(won)
	if diff := cmp.Diff(got, won); diff != "" {
		t.Errorf("the takers told true are not the seated ones (-seated +told):\n%s", diff)
	}

	errs = race(takers, func(int) error {
		held, err := s.TakeSeat(t.Context(), "202604.01.2", store.Seat{VMID: "vm-same", Since: seatTime}, store.SeatLimit{Seats: limit})
		if err == nil && !held {
			err = errors.New("a vmId racing itself for a free seat was refused")
		}
		return err
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := MustSeats(t, s, "202604.01.2"); len(got) != 1 {
		t.Errorf("one vmId racing itself holds %v", got)
	}
}

func testSeatsInvalid(t *testing.T, s store.Store) {
	for _, k := range [][2]string{{"", "vm-a"}, {"202604.01.1", ""}, {"202604/01", "vm-a"}, {"202604.01.1", "vm/a"}} {
		if held, err := s.TakeSeat(t.Context(), k[0], store.Seat{VMID: k[1], Since: seatTime}, store.SeatLimit{Seats: 5}); !errors.Is(err, store.ErrInvalidSeat) || held {
			t.Errorf("TakeSeat(%q, %q) = %v, %v; want ErrInvalidSeat", k[0], k[1], held, err)
		}
		if held, err := s.HoldsSeat(t.Context(), k[0], k[1]); !errors.Is(err, store.ErrInvalidSeat) || held {
			t.Errorf("HoldsSeat(%q, %q) = %v, %v; want ErrInvalidSeat", k[0], k[1], held, err)
		}
	}
	if got := MustSeats(t, s, "202604.01.1"); len(got) != 0 {
		t.Errorf("refused takes left seats %v", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.TakeSeat(ctx, "202604.01.1", store.Seat{VMID: "vm-a"}, store.SeatLimit{Seats: 5}); !errors.Is(err, context.Canceled) {
		t.Errorf("TakeSeat(canceled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.HoldsSeat(ctx, "202604.01.1", "vm-a"); !errors.Is(err, context.Canceled) {
		t.Errorf("HoldsSeat(canceled ctx) = %v, want context.Canceled", err)
	}
}

func testSeatsNotReleases(t *testing.T, s store.Store) {
	ctx := t.Context()
	MustPut(t, s, Release("202604.01.1"), 0)
	_, rev, err := s.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := s.Watch(ctx)
	MustTakeSeat(t, s, "202604.01.1", "vm-a", 2)
	if _, got, err := s.Releases(ctx); err != nil || got != rev {
		t.Errorf("Releases revision after a seat = %d, %v; want %d unchanged", got, err, rev)
	}
	select {
	case _, ok := <-w:
		t.Errorf("Watch signalled (open %v) after a seat only, want nothing", ok)
	case <-time.After(QuietWait):
	}
}

// Served returns a served record of version to (vmID, boot).
func Served(version, vmID, boot string) store.Served {
	return store.Served{
		Version: version, VMID: vmID, Boot: boot, Base: "202604.01", SubscriptionID: "sub-1",
		Time: time.Date(2026, 4, 2, 10, 0, 0, 0, time.UTC), Replica: "lpsd-1",
	}
}

// MustServed returns every served record of s.
func MustServed(t testing.TB, s store.Store) []store.Served {
	t.Helper()
	out, err := s.Served(t.Context())
	if err != nil {
		t.Fatalf("Served = %v", err)
	}
	return out
}

func testServed(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got := MustServed(t, s); len(got) != 0 {
		t.Fatalf("Served of an empty store = %v", got)
	}
	a, b := Served("202604.01.2", "vm-b", "boot-1"), Served("202604.01.1", "vm-a", "boot-2")
	c := Served("202604.01.1", "vm-a", "boot-1")
	if err := s.PutServed(ctx, []store.Served{a, b, c}); err != nil {
		t.Fatalf("PutServed = %v", err)
	}
	// Served again later, in one call and in another: the first time stays,
	// so asking again never moves a boot's silence deadline.
	again := c
	again.Time = c.Time.Add(time.Hour)
	if err := s.PutServed(ctx, []store.Served{again}); err != nil {
		t.Fatalf("PutServed again = %v", err)
	}
	d := Served("202604.01.1", "vm-c", "boot-1")
	later := d
	later.Time = d.Time.Add(time.Minute)
	if err := s.PutServed(ctx, []store.Served{d, later}); err != nil {
		t.Fatalf("PutServed with a key twice = %v", err)
	}
	want := []store.Served{c, b, d, a}
	if diff := cmp.Diff(want, MustServed(t, s)); diff != "" {
		t.Errorf("Served (-want +got):\n%s", diff)
	}
	// Served records are not releases.
	if _, rev, err := s.Releases(ctx); err != nil || rev != 0 {
		t.Errorf("Releases after PutServed = rev %d, %v; want 0", rev, err)
	}
}

func testServedLargeCall(t *testing.T, s store.Store) {
	const n = 300 // more than one etcd transaction
	ss := make([]store.Served, n)
	for i := range ss {
		ss[i] = Served("202604.01.1", fmt.Sprintf("vm-%04d", i), "boot-1")
	}
	if err := s.PutServed(t.Context(), ss); err != nil {
		t.Fatalf("PutServed(%d) = %v", n, err)
	}
	if diff := cmp.Diff(ss, MustServed(t, s)); diff != "" {
		t.Errorf("Served after %d (-want +got):\n%s", n, diff)
	}
}

func testServedInvalid(t *testing.T, s store.Store) {
	good := Served("202604.01.1", "vm-1", "boot-1")
	for _, bad := range []store.Served{
		Served("", "vm-1", "boot-1"), Served("202604.01.1", "", "boot-1"), Served("202604.01.1", "vm-1", ""),
		Served("202604.01.1", "vm/1", "boot-1"), Served("202604.01.1", "vm-1", "boot/1"), Served("2026/04.01.1", "vm-1", "boot-1"),
	} {
		if err := s.PutServed(t.Context(), []store.Served{good, bad}); !errors.Is(err, store.ErrInvalidServed) {
			t.Errorf("PutServed(%+v) = %v, want ErrInvalidServed", bad, err)
		}
	}
	if got := MustServed(t, s); len(got) != 0 {
		t.Errorf("Served after refused calls = %v, want none", got)
	}
}

// testSeatsPerSubscription: under a per-subscription bound, one
// subscription's vmIds hold at most that many seats, however many race
// for them, and the others still get theirs.
func testSeatsPerSubscription(t *testing.T, s store.Store) {
	const v = "202604.01.1"
	limit := store.SeatLimit{Seats: 6, PerSubscription: 2}
	take := func(vm, sub string) (bool, error) {
		return s.TakeSeat(t.Context(), v, store.Seat{VMID: vm, Since: seatTime, SubscriptionID: sub}, limit)
	}
	errs := race(8, func(i int) error {
		held, err := take(fmt.Sprintf("squat-%d", i), "sub-squat")
		if err == nil && !held {
			return errors.New("refused without ErrSubscriptionSeats while seats were free")
		}
		return err
	})
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrSubscriptionSeats):
			t.Fatalf("TakeSeat in a full subscription = %v, want ErrSubscriptionSeats", err)
		}
	}
	if won != 2 {
		t.Fatalf("%d of 8 racing vmIds of one subscription took seats, want its bound, 2", won)
	}
	for i, sub := range []string{"sub-a", "sub-a", "sub-b", "sub-c"} {
		if held, err := take(fmt.Sprintf("vm-%d", i), sub); err != nil || !held {
			t.Fatalf("TakeSeat(vm-%d of %s) = %v, %v; want a seat", i, sub, held, err)
		}
	}
	// Full: 6 held. A vmId of a subscription under its bound is refused as
	// full, not as its subscription's.
	if held, err := take("vm-late", "sub-d"); held || err != nil {
		t.Errorf("TakeSeat with every seat held = %v, %v; want false, nil", held, err)
	}
	// A holder keeps its seat whatever the bound.
	if held, err := take("vm-0", "sub-a"); !held || err != nil {
		t.Errorf("TakeSeat of a holder = %v, %v; want true", held, err)
	}
	if got := MustSeats(t, s, v); len(got) != 6 {
		t.Errorf("Seats = %v, want 6", got)
	}
	if _, err := s.TakeSeat(t.Context(), v, store.Seat{VMID: "vm-x"}, limit); !errors.Is(err, store.ErrInvalidSeat) {
		t.Errorf("TakeSeat under a bound without a subscription = %v, want ErrInvalidSeat", err)
	}
	// Seats names the subscription each seat was taken under (explain
	// counts a subscription's share with it); none for a seat taken
	// without a bound.
	const free = "202604.01.2"
	if held, err := s.TakeSeat(t.Context(), free, store.Seat{VMID: "vm-free", Since: seatTime, SubscriptionID: "sub-a"}, store.SeatLimit{Seats: 1}); err != nil || !held {
		t.Fatalf("TakeSeat without a bound = %v, %v", held, err)
	}
	subs := map[string]string{}
	for _, set := range []string{v, free} {
		seats, err := s.Seats(t.Context(), set)
		if err != nil {
			t.Fatal(err)
		}
		for _, seat := range seats {
			subs[seat.VMID] = seat.SubscriptionID
		}
	}
	want := map[string]string{"vm-0": "sub-a", "vm-1": "sub-a", "vm-2": "sub-b", "vm-3": "sub-c", "vm-free": ""}
	for i := range 8 {
		if sub, ok := subs[fmt.Sprintf("squat-%d", i)]; ok {
			want[fmt.Sprintf("squat-%d", i)] = "sub-squat"
			if sub != "sub-squat" {
				t.Errorf("squat-%d's seat under subscription %q, want sub-squat", i, sub)
			}
		}
	}
	if diff := cmp.Diff(want, subs); diff != "" {
		t.Errorf("Seats' subscriptions (-want +got):\n%s", diff)
	}
}
