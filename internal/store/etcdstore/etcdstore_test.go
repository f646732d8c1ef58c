package etcdstore_test

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	etcdutlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/etcdstore/etcdembed"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storetest"
)

func mustOpen(t *testing.T, endpoints []string, prefix string) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.Open(t.Context(), endpoints, etcdstore.Config{Prefix: prefix, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("Open(%v) = %v", endpoints, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestIntegrationStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	endpoints := etcdtest.Start(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) store.Store {
		return mustOpen(t, endpoints, fmt.Sprintf("/storetest/%d/", n.Add(1)))
	})
}

func TestIntegrationFreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	endpoints := etcdtest.Start(t)
	var n atomic.Int64
	storetest.RunFreeze(t, func(t *testing.T) store.Store {
		return mustOpen(t, endpoints, fmt.Sprintf("/freezetest/%d/", n.Add(1)))
	})
}

// TestIntegrationRestore runs storetest.RunRestore with a backup made as
// docs/transparency-log.md tells operators: a snapshot of the running
// cluster (etcdctl snapshot save), then, with lpsd and etcd stopped, the
// snapshot restored into a new data directory (etcdutl snapshot restore)
// and etcd started on it.
func TestIntegrationRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	var cluster *etcdembed.Cluster // the cluster the current store is on
	snapshotPath := filepath.Join(t.TempDir(), "etcd.db")
	storetest.RunRestore(t,
		func(t *testing.T) store.Store {
			cluster = etcdtest.StartCluster(t, 1)
			return mustOpen(t, cluster.Endpoints(), "")
		},
		func(t *testing.T, s store.Store) (store.Store, func(*testing.T, store.Store) store.Store) {
			// etcdctl snapshot save does this, while lpsd writes on.
			cfg := clientv3.Config{Endpoints: []string{cluster.Members[0].Endpoint}, DialTimeout: 5 * time.Second}
			if _, err := snapshot.SaveWithVersion(t.Context(), zap.NewNop(), cfg, snapshotPath); err != nil {
				t.Fatalf("snapshot save: %v", err)
			}
			restore := func(t *testing.T, current store.Store) store.Store {
				if err := current.Close(); err != nil { // lpsd stopped
					t.Fatal(err)
				}
				cluster.Stop()
				c, err := etcdembed.StartRestored(t.TempDir(), 1, etcdembed.Options{NoFsync: true}, func(b etcdembed.Bootstrap) error {
					return etcdutlsnapshot.NewV3(zap.NewNop()).Restore(etcdutlsnapshot.RestoreConfig{
						SnapshotPath:        snapshotPath,
						Name:                b.Name,
						OutputDataDir:       b.DataDir,
						PeerURLs:            []string{b.PeerURL},
						InitialCluster:      b.InitialCluster,
						InitialClusterToken: b.InitialClusterToken,
					})
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Stop)
				cluster = c
				return mustOpen(t, c.Endpoints(), "")
			}
			return s, restore
		})
}

// TestIntegrationReplicasConverge checks that two lpsd replicas on one etcd
// see each other's writes through Watch, and share one audit sequence.
func TestIntegrationReplicasConverge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	c := etcdtest.StartCluster(t, 3)
	a := mustOpen(t, c.Endpoints()[:2], "")
	b := mustOpen(t, c.Endpoints()[2:], "")
	checkConverge(t, a, b)
	checkReportsShared(t, a, b)

	// Losing a member (maybe a's, maybe the leader) must not stop a's watch.
	wa := a.Watch(t.Context())
	// Stop is graceful: it waits up to etcd's request timeout (about 7s)
	// for client streams such as a's watch to end.
	c.Members[0].Stop()
	v := "202607.01.1"
	deadline := time.Now().Add(storetest.WaitTimeout)
	for {
		_, err := b.PutRelease(t.Context(), storetest.Release(v), 0, storetest.Entry("publish", v), nil)
		if err == nil {
			break
		}
		// A write may fail during the election, even after it applied;
		// the retry of an applied write conflicts.
		if errors.Is(err, store.ErrConflict) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PutRelease after losing a member = %v", err)
		}
		select { // retry backoff
		case <-t.Context().Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	for {
		storetest.WaitSignal(t, wa)
		if _, _, err := a.Release(t.Context(), v); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica a did not see a write after losing a member")
		}
	}
}

func checkConverge(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	wa, wb := a.Watch(ctx), b.Watch(ctx)

	r := storetest.Release("202604.01.1")
	rev := storetest.MustPut(t, a, r, 0)
	storetest.WaitSignal(t, wb)
	if _, got, err := b.Release(ctx, r.Version); err != nil || got != rev {
		t.Fatalf("replica b: Release = revision %d, %v; want %d", got, err, rev)
	}

	r.Rollout.Percent = 30
	rev2, err := b.PutRelease(ctx, r, rev, storetest.Entry("rollout-set", r.Version), nil)
	if err != nil {
		t.Fatalf("replica b: PutRelease = %v", err)
	}
	storetest.WaitSignal(t, wa) // a's own write may have signalled first
	deadline := time.Now().Add(storetest.WaitTimeout)
	for {
		got, gotRev, err := a.Release(ctx, r.Version)
		if err != nil {
			t.Fatalf("replica a: Release = %v", err)
		}
		if gotRev == rev2 && got.Rollout.Percent == 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica a did not see b's write within %v", storetest.WaitTimeout)
		}
		storetest.WaitSignal(t, wa)
	}
	if _, err := a.PutRelease(ctx, r, rev, storetest.Entry("pause", r.Version), nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("replica a: stale PutRelease = %v, want ErrConflict", err)
	}

	// Writes to different releases from both replicas at once all succeed,
	// each with its own audit Seq.
	const perReplica = 5
	var wg sync.WaitGroup
	for i, s := range []store.Store{a, b} {
		wg.Go(func() {
			for j := range perReplica {
				v := fmt.Sprintf("202605.0%d.%d", i+1, j+1)
				if _, err := s.PutRelease(ctx, storetest.Release(v), 0, storetest.Entry("publish", v), nil); err != nil {
					t.Errorf("PutRelease(%s) = %v", v, err)
				}
			}
		})
	}
	wg.Wait()
	audit, err := b.Audit(ctx, 0, 100)
	if err != nil {
		t.Fatalf("Audit = %v", err)
	}
	if len(audit) != 2+2*perReplica {
		t.Errorf("audit has %d entries, want %d", len(audit), 2+2*perReplica)
	}
	for i := 1; i < len(audit); i++ {
		if audit[i].Seq <= audit[i-1].Seq {
			t.Errorf("audit Seq %d after %d, want strictly increasing", audit[i].Seq, audit[i-1].Seq)
		}
	}
}

// checkReportsShared checks that replicas count a (vmId, boot) once,
// whichever of them it reports to.
func checkReportsShared(t *testing.T, a, b store.Store) {
	r := storetest.Report("vm-a", "boot-1")
	if first := storetest.MustPutReports(t, a, r); !first[0] {
		t.Errorf("replica a: PutReports(new) first = false, want true")
	}
	r.ExitCode = 0
	if first := storetest.MustPutReports(t, b, r, storetest.Report("vm-b", "boot-1")); first[0] || !first[1] {
		t.Errorf("replica b: PutReports(a's key, new) first = %v, want [false true]", first)
	}
	want := []store.Report{r, storetest.Report("vm-b", "boot-1")}
	if diff := cmp.Diff(want, storetest.MustReports(t, a)); diff != "" {
		t.Errorf("replica a: Reports, want b's writes (-want +got):\n%s", diff)
	}
}

func TestOpenUnreachableFailsFast(t *testing.T) {
	t.Parallel()
	const dialTimeout = 300 * time.Millisecond
	start := time.Now()
	s, err := etcdstore.Open(t.Context(), []string{"http://127.0.0.1:1"}, etcdstore.Config{DialTimeout: dialTimeout})
	if err == nil {
		s.Close()
		t.Fatal("Open(unreachable) = nil error")
	}
	if d := time.Since(start); d > 10*dialTimeout {
		t.Errorf("Open(unreachable) took %v, want about %v", d, dialTimeout)
	}
}

// TestIntegrationPruneReplicas: two replicas prune the same reports at
// once while a third replaces some of them with new ones: every old
// report is deleted exactly once between them, and no replaced one is.
func TestIntegrationPruneReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	endpoints := etcdtest.Start(t)
	a, b, w := mustOpen(t, endpoints, "/prune/"), mustOpen(t, endpoints, "/prune/"), mustOpen(t, endpoints, "/prune/")
	t0 := time.Date(2026, 4, 2, 10, 0, 0, 0, time.UTC)
	const n = 1500
	var old []store.Report
	for i := range n {
		r := storetest.Report(fmt.Sprintf("vm-%04d", i), "boot-1")
		r.Time = t0
		old = append(old, r)
	}
	storetest.MustPutReports(t, w, old...)
	var replaced []store.Report
	for i := 0; i < n; i += 10 {
		r := old[i]
		r.Time = t0.Add(48 * time.Hour)
		replaced = append(replaced, r)
	}
	cut := store.Prune{Before: t0.Add(time.Hour)}
	var wg sync.WaitGroup
	deleted := make([]int, 2)
	errs := make([]error, 3)
	for i, p := range []*etcdstore.Store{a, b} {
		wg.Go(func() {
			got, err := p.PruneReports(t.Context(), cut)
			deleted[i], errs[i] = got.Deleted, err
		})
	}
	wg.Go(func() { _, errs[2] = w.PutReports(t.Context(), replaced) })
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("prune or put: %v", err)
		}
	}
	// A replaced report deleted before its replacement was put is back.
	got, err := w.Reports(t.Context())
	if err != nil {
		t.Fatalf("Reports = %v", err)
	}
	for _, r := range got {
		if !r.Time.Equal(replaced[0].Time) {
			t.Errorf("report %s of %v stayed, want only the replaced ones", r.VMID, r.Time)
		}
	}
	if len(got) != len(replaced) {
		t.Errorf("%d reports stayed, want the %d replaced", len(got), len(replaced))
	}
	if sum, max := deleted[0]+deleted[1], n; sum > max || sum < n-len(replaced) {
		t.Errorf("the replicas deleted %d + %d, want between %d and %d in all, each report once", deleted[0], deleted[1], n-len(replaced), max)
	}
}
