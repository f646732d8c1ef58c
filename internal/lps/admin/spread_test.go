package admin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// TestPlanSpreadsAllSubscriptionCanary: a canary planned on a release
// scoped to every subscription records how many subscriptions its base's
// nodes were seen in over the last day (another base's, and older
// sightings, do not count), so its seats are spread as over a scope that
// lists them; a scope that lists subscriptions records none.
func TestPlanSpreadsAllSubscriptionCanary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const all, listed = "202604.01.1", "202604.01.2"
	publish(t, c, signed(t, priv, all))
	publish(t, c, signed(t, priv, listed))
	var rs []store.Report
	sub := func(i int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", i) }
	for i := range 12 {
		rs = append(rs, store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "b", SubscriptionID: sub(i), Base: "202604.01", Agent: "baked", AgentVersion: "202604.01.0", Time: testNow.Add(-time.Hour)})
	}
	for i := 12; i < 20; i++ { // another base's, and a sighting older than a day
		rs = append(rs, store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "b", SubscriptionID: sub(i), Base: "202605.01", Agent: "baked", AgentVersion: "202605.01.0", Time: testNow.Add(-time.Hour)})
	}
	rs = append(rs, store.Report{VMID: "vm-old", Boot: "b", SubscriptionID: sub(99), Base: "202604.01", Agent: "baked", AgentVersion: "202604.01.0", Time: testNow.Add(-SeenWindow - time.Hour)})
	if _, err := h.store.PutReports(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: all, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	r, _, err := h.store.Release(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Rollout.Plan.SpreadOver; got != 12 {
		t.Errorf("SpreadOver = %d, want the 12 subscriptions base 202604.01 was seen in", got)
	}
	if got := r.SeatsPerSubscription(20); got != 2 {
		t.Errorf("SeatsPerSubscription(20) = %d, want ⌈20/10⌉", got)
	}

	if err := setPct(ctx, c, listed, 0, []string{sub(0), sub(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: listed, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	if r, _, err := h.store.Release(ctx, listed); err != nil || r.Rollout.Plan.SpreadOver != 0 || r.SeatsPerSubscription(20) != 0 {
		t.Errorf("a scope of 2 subscriptions: SpreadOver %d, %v; want none, and no bound", r.Rollout.Plan.SpreadOver, err)
	}
}

// TestSeatDetailNamesTheSubscriptionShare: explain says a node's
// subscription holds its share of a spread canary's seats, rather than
// that it takes a free one next time.
func TestSeatDetailNamesTheSubscriptionShare(t *testing.T) {
	t.Parallel()
	p, err := planFromProto(canaryPlanProto(20))
	if err != nil {
		t.Fatal(err)
	}
	p.SpreadOver = 12
	r := rollout.Release{Version: "202604.01.1", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Draft}}
	if r, err = r.SetPlan(p, testNow); err != nil {
		t.Fatal(err)
	}
	held := []store.Seat{{VMID: "a", SubscriptionID: "SUB-0"}, {VMID: "b", SubscriptionID: "sub-0"}, {VMID: "c", SubscriptionID: "sub-1"}}
	if got := seatDetail(r, rollout.Node{VMID: "x", SubscriptionID: "sub-0"}, held); !strings.Contains(got, "its subscription's nodes hold 2, the most one subscription may") {
		t.Errorf("a node of a subscription at its share: %q", got)
	}
	if got := seatDetail(r, rollout.Node{VMID: "y", SubscriptionID: "sub-1"}, held); !strings.Contains(got, "(3 held): it takes a free one") {
		t.Errorf("a node of a subscription under its share: %q", got)
	}
}
