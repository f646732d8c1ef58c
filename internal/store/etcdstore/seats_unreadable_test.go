package etcdstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
)

// TestIntegrationUnreadableSeatNeverStopsALook: one seat record of an
// old, complete canary release that lpsd cannot decode (another writer of
// the prefix, a bit flip) is still a seat, counted as unreadable, and the
// look goes on: a planned release of another base whose nodes all fail is
// still judged regressing. Before, every assessment failed, so that
// release was never halted.
func TestIntegrationUnreadableSeatNeverStopsALook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	endpoints := etcdtest.Start(t)
	const prefix = "/attackseat/"
	s := mustOpen(t, endpoints, prefix)
	ctx := t.Context()
	t0 := time.Now()

	old := rollout.Release{Version: "202604.01.1", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Complete, Percent: 100, Canary: true}}
	plan := rollout.Plan{Steps: []rollout.PlanStep{{Percent: 10, MinReports: 5}, {Percent: 100, MinReports: 5}}, Margin: 0.05, MaxFailureRate: 0.2}
	bad, err := rollout.Release{Version: "202605.01.1", Base: "202605.01", Rollout: rollout.Rollout{State: rollout.Draft}}.SetPlan(plan, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakeSeat(ctx, old.Version, store.Seat{VMID: "vm-a", SubscriptionID: "s", Since: t0}, store.SeatLimit{Seats: 10}); err != nil {
		t.Fatal(err)
	}
	// Every node of the bad release failed: it must halt.
	var rs []store.Report
	for i := range 20 {
		rs = append(rs, store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "00000000-0000-4000-8000-000000000001", SubscriptionID: "s", Base: bad.Base,
			BakedVersion: "202605.01.0", Agent: "hotfix", AgentVersion: bad.Version, HotfixVersion: bad.Version, ExitCode: 1, Time: t0})
	}
	if _, err := s.PutReports(ctx, rs); err != nil {
		t.Fatal(err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, prefix+"seats/"+old.Version+"/vm/vm-a", "\x00garbage"); err != nil {
		t.Fatal(err)
	}
	f, err := assess.Assess(ctx, s, []rollout.Release{old, bad}, t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("one unreadable seat of a complete release stopped the look: %v", err)
	}
	if got := f.Releases[bad.Version].Verdict.Health; got != regression.Regressing {
		t.Errorf("the failing release judged %q (%s), want %q", got, f.Releases[bad.Version].Verdict.Detail, regression.Regressing)
	}
	if f.Unreadable["seat"] != 1 || f.Releases[old.Version].Counts.Seated != 1 {
		t.Errorf("unreadable %v, seated %d; want 1 seat unreadable and still held", f.Unreadable, f.Releases[old.Version].Counts.Seated)
	}
	seats, err := s.Seats(ctx, old.Version)
	var ue *store.UnreadableError
	if !errors.As(err, &ue) || ue.Kind != "seat" || len(seats) != 1 || seats[0].VMID != "vm-a" || !seats[0].Since.IsZero() {
		t.Errorf("Seats = %+v, %v; want vm-a's seat with no time and an UnreadableError", seats, err)
	}
}
