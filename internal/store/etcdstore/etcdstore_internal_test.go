package etcdstore

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storetest"
)

// TestIntegrationWatchCompaction resumes a watch from a revision that has
// been compacted, as after a long disconnection: the watch must signal (the
// consumer resyncs) and go on reporting changes.
func TestIntegrationWatchCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	s, err := Open(t.Context(), etcdtest.Start(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	first := storetest.MustPut(t, s, storetest.Release("202604.01.1"), 0)
	second := storetest.MustPut(t, s, storetest.Release("202604.01.2"), 0)
	if _, err := s.cli.Compact(t.Context(), second, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact(%d) = %v", second, err)
	}

	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		s.watch(t.Context(), out, first, s.releasesPrefix())
	}()
	storetest.WaitSignal(t, out)

	// Drain what the resumed watch replays, then a new write must arrive.
	for range len(out) {
		<-out
	}
	storetest.MustPut(t, s, storetest.Release("202604.01.3"), 0)
	storetest.WaitSignal(t, out)

	s.Close()
	storetest.WaitClosed(t, out)
	<-done
}

// TestIntegrationAuditNeverOverwritten resets the audit-seq counter under a
// log that has entries: a write must fail rather than replace an entry.
func TestIntegrationAuditNeverOverwritten(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	s, err := Open(t.Context(), etcdtest.Start(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	storetest.MustPut(t, s, storetest.Release("202604.01.1"), 0)
	if _, err := s.cli.Delete(t.Context(), s.seqKey()); err != nil {
		t.Fatal(err)
	}

	r := storetest.Release("202604.01.2")
	if _, err := s.PutRelease(t.Context(), r, 0, storetest.Entry("publish", r.Version), nil); err == nil {
		t.Error("PutRelease with the audit counter reset = nil error, want a refusal")
	}
	audit, err := s.Audit(t.Context(), 0, 10)
	if err != nil || len(audit) != 1 || audit[0].Target != "202604.01.1" {
		t.Errorf("Audit = %+v, %v; want the one original entry", audit, err)
	}
	if _, _, err := s.Release(t.Context(), r.Version); err == nil {
		t.Error("the refused release was stored")
	}
}

// TestIntegrationReportsFleet stores a large fleet's reports in calls of the
// size lpsd batches, then lists them across several range pages.
func TestIntegrationReportsFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	s, err := Open(t.Context(), etcdtest.Start(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	const n, batch = 20_000, 2000
	want := make([]store.Report, n)
	for i := range want {
		want[i] = storetest.Report(fmt.Sprintf("vm-%06d", i), "boot-1")
	}
	for i := 0; i < n; i += batch {
		storetest.MustPutReports(t, s, want[i:i+batch]...)
	}
	got := storetest.MustReports(t, s)
	if len(got) != n {
		t.Fatalf("Reports = %d reports, want %d (pages of %d)", len(got), n, reportsPageSize)
	}
	for i := range got {
		if got[i].VMID != want[i].VMID {
			t.Fatalf("Reports[%d] = %s, want %s", i, got[i].VMID, want[i].VMID)
		}
	}
	resp, err := s.cli.Get(t.Context(), s.reportsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != n {
		t.Errorf("report keys in etcd = %v, %v; want %d", resp, err, n)
	}
}
