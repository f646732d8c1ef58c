package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storecodec"
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

// TestIntegrationListsDecodeOnlyWhatChanged: Reports and Served decode
// only the keys written since their last list and reuse the rest, and
// still list exactly what is stored: new, replaced and deleted keys,
// a key nobody can decode (reported, by key, every time until it is
// rewritten), more changes than are fetched one by one, and a list that
// failed (the next reads every value again); with the feed applying the
// changes between lists, and with lists that read the keys themselves (an
// etcd too old for a feed).
func TestIntegrationListsDecodeOnlyWhatChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	for _, feed := range []bool{true, false} {
		t.Run(fmt.Sprintf("feed=%v", feed), func(t *testing.T) {
			t.Parallel()
			s := openEmbedded(t)
			if !feed {
				noFeed(s)
			}
			listsDecodeOnlyWhatChanged(t, s)
			s.reports.mu.Lock()
			following := s.reports.feed != nil
			s.reports.mu.Unlock()
			if following != feed {
				t.Errorf("a feed running after the lists: %v, want %v", following, feed)
			}
		})
	}
}

func listsDecodeOnlyWhatChanged(t *testing.T, s *Store) {
	ctx := t.Context()
	var decoded atomic.Int64 // the feed decodes on its own goroutine
	s.reports.decode = func(b []byte) (store.Report, error) {
		decoded.Add(1)
		return storecodec.DecodeReport(b)
	}
	// since returns how many values were decoded since mark's call.
	mark := func() func() int64 {
		n := decoded.Load()
		return func() int64 { return decoded.Load() - n }
	}
	want := map[string]int{}
	check := func(name string, bad int) {
		t.Helper()
		rs, err := s.Reports(ctx)
		var ue *store.UnreadableError
		switch {
		case bad == 0 && err != nil:
			t.Fatalf("%s: Reports = %v", name, err)
		case bad > 0 && (!errors.As(err, &ue) || ue.Count != bad):
			t.Fatalf("%s: Reports error %v, want %d unreadable", name, err, bad)
		}
		got := map[string]int{}
		for _, r := range rs {
			got[r.VMID+"/"+r.Boot] = r.ExitCode
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: listed %d reports, want %d (%v)", name, len(got), len(want), err)
		}
		if !slices.IsSortedFunc(rs, store.CompareReports) {
			t.Errorf("%s: not in (VMID, Boot) order", name)
		}
	}
	put := func(vm string, exit int) {
		t.Helper()
		r := storetest.Report(vm, "b")
		r.ExitCode = exit
		storetest.MustPutReports(t, s, r)
		want[vm+"/b"] = exit
	}
	for i := range 3 {
		put(fmt.Sprintf("vm-%d", i), 0)
	}
	check("first", 0)
	since := mark()
	put("vm-3", 0) // new
	put("vm-1", 7) // replaced
	if _, err := s.cli.Delete(ctx, s.reportsPrefix()+"vm-2/b"); err != nil {
		t.Fatal(err)
	}
	delete(want, "vm-2/b")
	if _, err := s.cli.Put(ctx, s.reportsPrefix()+"vm-9/b", "{not json"); err != nil {
		t.Fatal(err)
	}
	check("changed", 1)
	if n := since(); n != 3 { // vm-3, vm-1 and vm-9, not vm-0
		t.Errorf("the list after 3 keys changed decoded %d values, want 3", n)
	}
	since = mark()
	check("unchanged, the bad key still reported", 1)
	if n := since(); n != 0 {
		t.Errorf("the list after nothing changed decoded %d values, want none", n)
	}
	put("vm-9", 0) // rewritten: readable
	check("rewritten", 0)

	var many []store.Report
	for i := range maxChangedGets + 10 {
		r := storetest.Report(fmt.Sprintf("bulk-%05d", i), "b")
		many = append(many, r)
		want[r.VMID+"/b"] = r.ExitCode
	}
	since = mark()
	storetest.MustPutReports(t, s, many...)
	put("vm-0", 3) // replaced beside them
	check("more changes than fetched one by one", 0)
	if n := since(); n != maxChangedGets+11 {
		t.Errorf("the list after %d keys changed decoded %d values", maxChangedGets+11, n)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Reports(canceled); err == nil {
		t.Fatal("Reports on a canceled context succeeded")
	}
	put("vm-after", 0)
	check("after a failed list", 0)

	sv := storetest.Served("202604.01.1", "vm-1", "b")
	if err := s.PutServed(ctx, []store.Served{sv}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := s.Served(ctx); err != nil || len(got) != 1 || got[0] != sv {
			t.Fatalf("Served = %v, %v; want the one record", got, err)
		}
	}
}

// BenchmarkReportsList: listing 20,000 stored reports with nothing kept
// (as every list did before lists kept what they decoded) against a list
// after 1 % of them changed, on an embedded etcd.
//
//	go test -run '^$' -bench BenchmarkReportsList -benchtime 10x ./internal/store/etcdstore/
func BenchmarkReportsList(b *testing.B) {
	ctx := b.Context()
	s, err := Open(ctx, etcdtest.Start(b), Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	storetest.BenchmarkReportsList(b, s, func() { // no list runs
		s.reports.stopFeed()
		s.reports.rev = 0
		s.reports.entries.Reset()
	})
}

// TestIntegrationScanReadsOneRevision: a scan's pages are all read at the
// first page's revision, so a key written while it runs is not listed,
// however the pages fall (a response's header carries the current
// revision, not the one read at).
func TestIntegrationScanReadsOneRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s := openEmbedded(t)
	var rs []store.Report
	for i := range 2*reportsPageSize + 10 { // three pages
		rs = append(rs, storetest.Report(fmt.Sprintf("vm-%05d", i), "b"))
	}
	storetest.MustPutReports(t, s, rs...)
	var at readPoint
	n, wrote := 0, false
	err := s.scanAt(ctx, s.reportsPrefix(), &at, true, func(*mvccpb.KeyValue) error {
		n++
		if !wrote {
			wrote = true
			storetest.MustPutReports(t, s, storetest.Report("vm-99999", "b")) // sorts on the last page
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(rs) {
		t.Errorf("listed %d keys, want the %d there when the scan began", n, len(rs))
	}
}

// hookKV calls after after each Get it passes on.
type hookKV struct {
	clientv3.KV
	after func(clientv3.Op)
}

func (h hookKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := h.KV.Get(ctx, key, opts...)
	h.after(clientv3.OpGet(key, opts...))
	return resp, err
}

// TestIntegrationListReadsOneRevision: a value written between a list's
// listing of the keys and its fetch of the changed values is not what it
// returns: both are read at one revision.
func TestIntegrationListReadsOneRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s := openEmbedded(t)
	noFeed(s) // lists read the keys themselves
	exit := func(vm string, code int) store.Report {
		r := storetest.Report(vm, "b")
		r.ExitCode = code
		return r
	}
	storetest.MustPutReports(t, s, exit("vm-0", 0), exit("vm-1", 0))
	if _, err := s.Reports(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.MustPutReports(t, s, exit("vm-1", 1)) // changed: fetched by the next list
	kv, fired := s.cli.KV, false
	s.cli.KV = hookKV{KV: kv, after: func(op clientv3.Op) {
		if fired || !op.IsKeysOnly() {
			return
		}
		fired = true
		b, err := storecodec.EncodeReport(exit("vm-1", 2))
		if err == nil {
			_, err = kv.Put(context.Background(), s.reportsPrefix()+"vm-1/b", string(b))
		}
		if err != nil {
			t.Error(err)
		}
	}}
	rs, err := s.Reports(ctx)
	s.cli.KV = kv
	if err != nil || !fired {
		t.Fatalf("Reports = %v (the write between fired: %v)", err, fired)
	}
	for _, r := range rs {
		if r.VMID == "vm-1" && r.ExitCode != 1 {
			t.Errorf("vm-1's exit code %d, want 1: the value at the keys' revision", r.ExitCode)
		}
	}
}

// TestIntegrationListAfterRestore: behind the same endpoints, a cluster
// restored from a snapshot hands revisions out again, so one key's
// ModRevision may name another value; the list reads what that cluster
// holds, not what it kept from the other.
func TestIntegrationListAfterRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded etcds")
	}
	t.Parallel()
	ctx := t.Context()
	s, restored := openEmbedded(t), openEmbedded(t)
	put := func(st *Store, code int) int64 {
		t.Helper()
		r := storetest.Report("vm-0", "b")
		r.ExitCode = code
		b, err := storecodec.EncodeReport(r)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := st.cli.Put(ctx, st.reportsPrefix()+"vm-0/b", string(b))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	// Both clusters at one revision, then the same key at the same
	// ModRevision with different values.
	pad := func(st *Store) int64 {
		resp, err := st.cli.Put(ctx, "pad", "x")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	a, b := pad(s), pad(restored)
	for a < b {
		a = pad(s)
	}
	for b < a {
		b = pad(restored)
	}
	if ma, mb := put(s, 0), put(restored, 5); ma != mb {
		t.Fatalf("ModRevisions %d and %d differ", ma, mb)
	}
	if rs, err := s.Reports(ctx); err != nil || len(rs) != 1 || rs[0].ExitCode != 0 {
		t.Fatalf("Reports = %v, %v", rs, err)
	}
	kv := s.cli.KV
	s.cli.KV = restored.cli.KV
	rs, err := s.Reports(ctx)
	s.cli.KV = kv
	if err != nil || len(rs) != 1 || rs[0].ExitCode != 5 {
		t.Errorf("after the restore Reports = %+v, %v; want the restored cluster's exit code 5", rs, err)
	}
}

// TestIntegrationListWaitsWithinItsContext: a list waiting for another's
// turn gives up when its context ends, and its failure leaves what the
// other kept, so the next list still decodes only what changed.
func TestIntegrationListWaitsWithinItsContext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s := openEmbedded(t)
	storetest.MustPutReports(t, s, storetest.Report("vm-0", "b"))
	if _, err := s.Reports(ctx); err != nil {
		t.Fatal(err)
	}
	s.reports.sem <- struct{}{} // another list's turn
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.Reports(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a list waiting past its deadline = %v, want DeadlineExceeded", err)
	}
	<-s.reports.sem
	var decodes int
	s.reports.decode = func(b []byte) (store.Report, error) {
		decodes++
		return storecodec.DecodeReport(b)
	}
	canceled, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := s.Reports(canceled); err == nil {
		t.Fatal("a list on a canceled context succeeded")
	}
	if rs, err := s.Reports(ctx); err != nil || len(rs) != 1 || decodes != 0 {
		t.Errorf("after two failed lists: %d reports, %v, %d decoded; want 1 and nothing decoded again", len(rs), err, decodes)
	}
}

// TestIntegrationPointsReadOneRevision: a history read whose pages are
// thinned by keys that are no points reads every page at the first page's
// revision, so a point written meanwhile is not returned in place of one
// that was there.
func TestIntegrationPointsReadOneRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s := openEmbedded(t)
	const v = "202604.01.1"
	// The last two are no points (13 digits), sorting between the two.
	for _, k := range []string{s.pointKey(v, 100), s.pointKey(v, 200), s.pointsPrefix(v) + "0000000001800", s.pointsPrefix(v) + "0000000001600"} {
		if _, err := s.cli.Put(ctx, k, "{}"); err != nil {
			t.Fatal(err)
		}
	}
	// Three pages: 200 and a non-point, the other non-point, then 100;
	// minute 150 is written after the first, sorting where 100 does.
	kv, gets, fired := s.cli.KV, 0, false
	s.cli.KV = hookKV{KV: kv, after: func(clientv3.Op) {
		if gets++; gets == 1 {
			fired = true
			if _, err := kv.Put(context.Background(), s.pointKey(v, 150), "{}"); err != nil {
				t.Error(err)
			}
		}
	}}
	ps, err := s.Points(ctx, v, 2)
	s.cli.KV = kv
	if err != nil || !fired {
		t.Fatalf("Points = %v (the write between fired: %v)", err, fired)
	}
	var minutes []int64
	for _, p := range ps {
		minutes = append(minutes, p.Time.Unix()/60)
	}
	if !slices.Equal(minutes, []int64{100, 200}) {
		t.Errorf("points at minutes %v, want [100 200]: those there when the read began", minutes)
	}
}

// noFeed makes s's lists read the keys themselves, as with an etcd too
// old for a feed.
func noFeed(s *Store) {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	s.follow, s.followAgain = false, time.Now().Add(time.Hour)
}

// openEmbedded opens a Store on a new embedded etcd, closed at the test's
// end.
func openEmbedded(t *testing.T) *Store {
	t.Helper()
	return openOn(t, etcdtest.Start(t))
}

// openOn opens a Store on the etcd at eps, closed at the test's end.
func openOn(t *testing.T, eps []string) *Store {
	t.Helper()
	s, err := Open(t.Context(), eps, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestIntegrationFeedListsEveryWriteBefore: with the feed, a list returns
// every write another replica finished before it was called (puts,
// replacements, deletes), and reads no range of the prefix to do so, only
// one key's revision; the feed's events arrive late, so a list that did
// not wait for them would miss the writes.
func TestIntegrationFeedListsEveryWriteBefore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	eps := etcdtest.Start(t)
	reader, writer := openOn(t, eps), openOn(t, eps)
	reader.cli.Watcher = slowWatcher{reader.cli.Watcher}
	want := map[string]int{}
	list := func(round int) {
		t.Helper()
		rs, err := reader.Reports(ctx)
		if err != nil {
			t.Fatalf("round %d: Reports = %v", round, err)
		}
		got := map[string]int{}
		for _, r := range rs {
			got[r.VMID] = r.ExitCode
		}
		if !maps.Equal(got, want) {
			t.Fatalf("round %d: listed %d reports, want %d", round, len(got), len(want))
		}
	}
	list(-1) // reads the prefix and starts the feed
	var scans atomic.Int64
	kv := reader.cli.KV
	reader.cli.KV = hookKV{KV: kv, after: func(op clientv3.Op) {
		if !op.IsCountOnly() {
			scans.Add(1)
		}
	}}
	defer func() { reader.cli.KV = kv }()
	for round := range 40 {
		var rs []store.Report
		for i := range round % 7 {
			r := storetest.Report(fmt.Sprintf("vm-%03d", (round*5+i)%60), "b")
			r.ExitCode = round
			rs = append(rs, r)
			want[r.VMID] = round
		}
		storetest.MustPutReports(t, writer, rs...)
		if round%3 == 0 {
			for vm := range want {
				if _, err := writer.cli.Delete(ctx, writer.reportsPrefix()+vm+"/b"); err != nil {
					t.Fatal(err)
				}
				delete(want, vm)
				break
			}
		}
		list(round)
	}
	if n := scans.Load(); n != 0 {
		t.Errorf("the lists with a feed read %d ranges of the prefix, want none", n)
	}
}

// followed is a store on an embedded etcd holding one report, listed once,
// with the feed that list started and the channel that closes when the
// feed moves or ends.
func followed(t *testing.T) (*Store, *feed, chan struct{}) {
	t.Helper()
	s := openEmbedded(t)
	storetest.MustPutReports(t, s, storetest.Report("vm-0", "b"))
	if _, err := s.Reports(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.reports.mu.Lock()
	f, moved := s.reports.feed, s.reports.moved
	s.reports.mu.Unlock()
	if f == nil {
		t.Fatal("no feed after the first list")
	}
	return s, f, moved
}

// TestIntegrationFeedEnds: when the feed's watch ends (compacted, its
// member lost the leader, canceled), the next list reads the prefix
// itself, lists what is stored and starts a new feed.
func TestIntegrationFeedEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s, first, ended := followed(t)
	first.stop() // as when the watch ends on its own
	<-ended
	storetest.MustPutReports(t, s, storetest.Report("vm-1", "b"))
	if rs, err := s.Reports(ctx); err != nil || len(rs) != 2 {
		t.Fatalf("after the feed ended Reports = %d reports, %v; want 2", len(rs), err)
	}
	s.reports.mu.Lock()
	next := s.reports.feed
	s.reports.mu.Unlock()
	if next == nil || next == first {
		t.Errorf("the list after the feed ended started no new feed")
	}
	storetest.MustPutReports(t, s, storetest.Report("vm-2", "b"))
	if rs, err := s.Reports(ctx); err != nil || len(rs) != 3 {
		t.Fatalf("with the new feed Reports = %d reports, %v; want 3", len(rs), err)
	}
}

// TestIntegrationIdleFeedStops: a feed whose last list was feedIdle ago
// stops at the next change instead of decoding every write for as long as
// the replica runs; the next list still returns every write, the one that
// met the idle feed too, and starts a feed again.
func TestIntegrationIdleFeedStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s, first, ended := followed(t)
	s.reports.mu.Lock()
	s.reports.listed = time.Now().Add(-feedIdle - time.Minute)
	s.reports.mu.Unlock()
	storetest.MustPutReports(t, s, storetest.Report("vm-1", "b"))
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("an idle feed kept following a write")
	}
	s.reports.mu.Lock()
	stopped := s.reports.feed == nil
	s.reports.mu.Unlock()
	if !stopped {
		t.Fatal("the idle feed did not stop at the write")
	}
	if rs, err := s.Reports(ctx); err != nil || len(rs) != 2 {
		t.Fatalf("after the idle feed stopped Reports = %d reports, %v; want 2", len(rs), err)
	}
	s.reports.mu.Lock()
	next := s.reports.feed
	s.reports.mu.Unlock()
	if next == nil || next == first {
		t.Error("the list after the idle stop started no new feed")
	}
}

// slowWatcher's watches deliver each response 30 ms late.
type slowWatcher struct{ clientv3.Watcher }

func (w slowWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for resp := range in {
			time.Sleep(30 * time.Millisecond)
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// stuckWatcher's watches deliver nothing until they are canceled.
type stuckWatcher struct{ clientv3.Watcher }

func (stuckWatcher) Watch(ctx context.Context, _ string, _ ...clientv3.OpOption) clientv3.WatchChan {
	ch := make(chan clientv3.WatchResponse)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

// TestIntegrationFeedThatFallsBehind: a feed that does not show it caught
// up within catchUpWait (a stuck watch) does not hold the list: it reads
// the prefix itself and lists what is stored, and the lists after it read
// the keys themselves for followRetry rather than wait for a feed again.
func TestIntegrationFeedThatFallsBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	ctx := t.Context()
	s := openEmbedded(t)
	s.cli.Watcher = stuckWatcher{s.cli.Watcher} // before any feed reads it
	storetest.MustPutReports(t, s, storetest.Report("vm-0", "b"))
	if _, err := s.Reports(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.MustPutReports(t, s, storetest.Report("vm-1", "b"))
	rs, err := s.Reports(ctx)
	if err != nil || len(rs) != 2 {
		t.Fatalf("with a stuck feed Reports = %d reports, %v; want 2", len(rs), err)
	}
	s.reports.mu.Lock()
	following := s.reports.feed != nil
	s.reports.mu.Unlock()
	if following {
		t.Error("after a feed that did not catch up, lists still keep one: each would wait for it")
	}
}

func TestProgressKeepsOrder(t *testing.T) {
	for v, want := range map[string]bool{
		"3.7.3": true, "3.6.0": true, "3.6.0-rc.1": true, "v3.5.13": true, "3.5.21": true,
		"3.5.12": false, "3.5.0": false, "3.4.31": true, "3.4.30": false, "3.3.27": false,
		"4.0.0": true, "2.3.8": false, "": false, "3.5": false, "3.x.1": false,
	} {
		if got := progressKeepsOrder(v); got != want {
			t.Errorf("progressKeepsOrder(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestIntegrationSeatsWithAGapInTheirSlots: a set whose slots have a gap
// (one deleted by hand, or a take that raced a delete of the set: a
// hostile review left one holder on slot 2 of an emptied set, and every
// later take then claimed slot 2 again, 64 times, and failed) hands out
// its free seats from the lowest free slot, and never more than its
// limit.
func TestIntegrationSeatsWithAGapInTheirSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	s := openEmbedded(t)
	ctx := t.Context()
	const set = "202604.01.1"
	limit := store.SeatLimit{Seats: 3, PerSubscription: 3}
	take := func(vm string) (bool, error) {
		return s.TakeSeat(ctx, set, store.Seat{VMID: vm, Since: time.Now(), SubscriptionID: "sub-a"}, limit)
	}
	for _, vm := range []string{"vm-a", "vm-b", "vm-c"} {
		if held, err := take(vm); err != nil || !held {
			t.Fatalf("TakeSeat(%s) = %v, %v", vm, held, err)
		}
	}
	// Leave vm-c alone on slot 2, as the race left it.
	for _, k := range []string{"vm/vm-a", "vm/vm-b", "n/00000", "n/00001", "sub/sub-a/00000", "sub/sub-a/00001"} {
		if _, err := s.cli.Delete(ctx, s.seatsPrefix(set)+k); err != nil {
			t.Fatal(err)
		}
	}
	for _, vm := range []string{"vm-d", "vm-e"} {
		if held, err := take(vm); err != nil || !held {
			t.Errorf("TakeSeat(%s) in a set holding 1 of 3 with a gap = %v, %v; want a seat", vm, held, err)
		}
	}
	if held, err := take("vm-f"); held || err != nil {
		t.Errorf("TakeSeat of a fourth vmId = %v, %v; want the set full", held, err)
	}
	seats, err := s.Seats(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	var vms []string
	for _, st := range seats {
		vms = append(vms, st.VMID)
	}
	if !slices.Equal(vms, []string{"vm-c", "vm-d", "vm-e"}) {
		t.Errorf("Seats = %v, want vm-c, vm-d, vm-e", vms)
	}
}

// TestIntegrationSeatsIgnoreOddSubscriptionKeys: a key under a set's
// sub/ that TakeSeat does not write (another writer of the prefix, damage)
// names nobody's subscription.
func TestIntegrationSeatsIgnoreOddSubscriptionKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	s := openEmbedded(t)
	ctx := t.Context()
	const set = "202604.01.1"
	if held, err := s.TakeSeat(ctx, set, store.Seat{VMID: "vm-free", Since: time.Now()}, store.SeatLimit{Seats: 2}); err != nil || !held {
		t.Fatalf("TakeSeat = %v, %v", held, err)
	}
	for _, k := range []string{"sub/sub-a/00000/extra", "sub/", "sub/sub-b", "sub//00000", "sub/sub-c/x1"} {
		if _, err := s.cli.Put(ctx, s.seatsPrefix(set)+k, "vm-free"); err != nil {
			t.Fatal(err)
		}
	}
	seats, err := s.Seats(ctx, set)
	if err != nil || len(seats) != 1 || seats[0].SubscriptionID != "" {
		t.Errorf("Seats = %+v, %v; want vm-free with no subscription", seats, err)
	}
}
