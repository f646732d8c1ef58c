package lpsd

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/internal/store/storetest"
)

// TestIntegrationRetentionOnTheLeader: of two replicas on one etcd, the
// one whose autopilot leads prunes old reports and served records at once;
// the other does not, until it leads.
func TestIntegrationRetentionOnTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	st, err := etcdstore.Open(t.Context(), endpoints, etcdstore.Config{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	putOld := func() {
		t.Helper()
		for i := range 10 {
			r := storetest.Report(fmt.Sprintf("vm-%d", i), "boot-1")
			r.Time = time.Now().Add(-90 * 24 * time.Hour)
			storetest.MustPutReports(t, st, r)
			sv := storetest.Served("202604.01.2", r.VMID, r.Boot)
			sv.Time = r.Time
			if err := st.PutServed(t.Context(), []store.Served{sv}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stored := func() (reports, served int) {
		t.Helper()
		rs, err := st.Reports(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(rs), len(storetest.MustServed(t, st))
	}
	args := func() []string {
		return append(nodeFlags(t, t.TempDir(), 0o600), "--store", "etcd:"+strings.TrimPrefix(endpoints[0], "http://"), "--drain-delay", "0s", "--autopilot-interval", "200ms")
	}
	const lastPrune = "lpsd_retention_last_prune_timestamp_seconds"
	waitPruned := func(r *running) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if v, _ := r.scrape(t, lastPrune); v > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no prune within 15 s:\n%s", r.log.String())
			}
		}
	}

	putOld()
	a := start(t, args()...)
	a.waitMetric(t, "lpsd_autopilot_leader", 1)
	waitPruned(a)
	if r, s := stored(); r != 0 || s != 0 {
		t.Errorf("after the leader's prune: %d reports, %d served records; want none", r, s)
	}
	if v := a.metric(t, `lpsd_retention_pruned_total{kind="report"}`); v != 10 {
		t.Errorf(`the leader's lpsd_retention_pruned_total{kind="report"} = %v, want 10`, v)
	}

	putOld()
	b := start(t, args()...)
	b.waitReady(t)
	// The follower's autopilot runs once it is a candidate of the election.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := cli.Get(t.Context(), etcdstore.DefaultPrefix+"leader/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower's autopilot never campaigned:\n%s", b.log.String())
		}
	}
	if v := b.metric(t, "lpsd_autopilot_leader"); v != 0 {
		t.Fatalf("the second replica leads (%v)", v)
	}
	if v, _ := b.scrape(t, lastPrune); v != 0 {
		t.Errorf("the follower pruned (%s %v)", lastPrune, v)
	}
	if r, s := stored(); r != 10 || s != 10 {
		t.Errorf("while the follower follows: %d reports, %d served records; want 10 of each", r, s)
	}

	if code := a.stop(); code != 0 {
		t.Errorf("leader exit %d", code)
	}
	b.waitMetric(t, "lpsd_autopilot_leader", 1)
	waitPruned(b)
	if r, s := stored(); r != 0 || s != 0 {
		t.Errorf("after the new leader's prune: %d reports, %d served records; want none", r, s)
	}
}

// TestRetentionOnTheOnlyReplica: lpsd on a bbolt file, the only replica,
// prunes at its start.
func TestRetentionOnTheOnlyReplica(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lpsd.db")
	st, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old, recent := storetest.Report("vm-old", "boot-1"), storetest.Report("vm-recent", "boot-1")
	old.Time, recent.Time = time.Now().Add(-90*24*time.Hour), time.Now().Add(-time.Hour)
	storetest.MustPutReports(t, st, old, recent)
	st.Close()

	r := start(t, append(nodeFlags(t, dir, 0o600), "--store", "bolt:"+path, "--drain-delay", "0s")...)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v, _ := r.scrape(t, `lpsd_retention_stored_records{kind="report"}`); v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no prune within 15 s:\n%s", r.log.String())
		}
	}
	if code := r.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, r.log.String())
	}
	if st, err = boltstore.Open(path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs, err := st.Reports(t.Context())
	if err != nil || len(rs) != 1 || rs[0].VMID != "vm-recent" {
		t.Errorf("after lpsd's prune: %v, %v; want the recent report alone", rs, err)
	}
}
