package admin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// TestPlanSpreadsAllSubscriptionCanary: a canary planned on a release
// scoped to every subscription records how many subscriptions its base's
// nodes were seen in over the last day (another base's, and older
// sightings, do not count), so its seats are spread as over a scope that
// lists them; a scope that lists subscriptions records none; a fleet
// whose nodes could not fill the canary under the bound (one large
// subscription beside a few small ones) gets none, and one whose many
// small subscriptions could, beside a squatter's, keeps it.
func TestPlanSpreadsAllSubscriptionCanary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const all, listed, lopsided, squatted = "202604.01.1", "202604.01.2", "202605.01.1", "202606.01.1"
	for _, v := range []string{all, listed, lopsided, squatted} {
		publish(t, c, signed(t, priv, v))
	}
	sub := func(i int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", i) }
	var rs []store.Report
	report := func(vm string, s int, base string, at time.Time) {
		rs = append(rs, store.Report{VMID: vm, Boot: "b", SubscriptionID: sub(s), Base: base, Agent: "baked", AgentVersion: base + ".0", Time: at})
	}
	recent := testNow.Add(-time.Hour)
	for i := range 12 { // two nodes each: the share of a 20-seat canary
		report(fmt.Sprintf("vm-%d-a", i), i, "202604.01", recent)
		report(fmt.Sprintf("vm-%d-b", i), i, "202604.01", recent)
	}
	report("vm-12-a", 12, "202604.01", recent)                  // one node
	report("vm-12-a", 12, "202604.01", recent.Add(time.Minute)) // the same node again
	report("vm-old-a", 99, "202604.01", testNow.Add(-SeenWindow-time.Hour))
	report("vm-old-b", 99, "202604.01", testNow.Add(-SeenWindow-time.Hour))
	for i := range 30 { // base 202605.01: one large subscription, nine of a node each
		report(fmt.Sprintf("vm-big-%d", i), 50, "202605.01", recent)
	}
	for i := range 9 {
		report(fmt.Sprintf("vm-small-%d", i), 60+i, "202605.01", recent)
	}
	for i := range 100 { // base 202606.01: a hundred tenants of a node each, and a squatter
		report(fmt.Sprintf("vm-tenant-%d", i), 100+i, "202606.01", recent)
	}
	for i := range 20 {
		report(fmt.Sprintf("vm-squat-%d", i), 300, "202606.01", recent)
	}
	if _, err := h.store.PutReports(ctx, rs); err != nil {
		t.Fatal(err)
	}
	spread := func(v string) (int, int) {
		t.Helper()
		r, _, err := h.store.Release(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		return r.Rollout.Plan.SpreadOver, r.SeatsPerSubscription(20)
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: all, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	if over, share := spread(all); over != 13 || share != 2 {
		t.Errorf("SpreadOver = %d, SeatsPerSubscription(20) = %d; want the 13 subscriptions base 202604.01 was seen in, and ⌈20/10⌉", over, share)
	}

	if err := setPct(ctx, c, listed, 0, []string{sub(0), sub(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: listed, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	if over, share := spread(listed); over != 0 || share != 0 {
		t.Errorf("a scope of 2 subscriptions: SpreadOver %d, share %d; want none, and no bound", over, share)
	}

	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: lopsided, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	if over, share := spread(lopsided); over != 0 || share != 0 {
		t.Errorf("one subscription of 30 nodes beside nine of one (11 seats fill under a share of 2): SpreadOver %d, share %d; want none, and no bound", over, share)
	}

	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: squatted, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	if over, share := spread(squatted); over != 101 || share != 2 {
		t.Errorf("a hundred subscriptions of a node beside a squatter of 20: SpreadOver %d, share %d; want 101, and ⌈20/10⌉", over, share)
	}
}

// TestAttackScopeWidenedAfterPlanKeepsSpread: a planned canary whose scope
// lists two subscriptions (no bound) widened to every subscription is
// counted then, as SetPlan counts it, so squatters of one subscription
// cannot take its seats by asking for a plan on a narrow scope first,
// however the widening list is spelled (blank entries are every
// subscription too); a scope narrowed to a list again is spread by its
// list. Seats taken while the list had no bound stay taken.
func TestAttackScopeWidenedAfterPlanKeepsSpread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, c, signed(t, priv, v))
	sub := func(i int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", i) }
	var rs []store.Report
	for i := range 12 {
		for _, n := range []string{"a", "b"} {
			rs = append(rs, store.Report{VMID: fmt.Sprintf("vm-%d-%s", i, n), Boot: "b", SubscriptionID: sub(i), Base: "202604.01", Agent: "baked", AgentVersion: "202604.01.0", Time: testNow.Add(-time.Hour)})
		}
	}
	if _, err := h.store.PutReports(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := setPct(ctx, c, v, 0, []string{sub(0), sub(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	read := func() rollout.Release {
		t.Helper()
		r, _, err := h.store.Release(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(); r.SeatsPerSubscription(20) != 0 {
		t.Fatalf("a scope of 2 subscriptions is bounded: %d", r.SeatsPerSubscription(20))
	}
	if _, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Reason: "widen"}); err != nil {
		t.Fatal(err)
	}
	r := read()
	if len(r.Rollout.Subscriptions) != 0 || r.Rollout.Plan.SpreadOver != 12 || r.SeatsPerSubscription(20) != 2 {
		t.Errorf("widened to every subscription: scope %v, SpreadOver %d, share %d; want all, 12, 2", r.Rollout.Subscriptions, r.Rollout.Plan.SpreadOver, r.SeatsPerSubscription(20))
	}
	if err := setPct(ctx, c, v, int32(r.Rollout.Percent), []string{sub(3)}, nil); err != nil {
		t.Fatal(err)
	}
	if r := read(); r.Rollout.Plan.SpreadOver != 0 || r.SeatsPerSubscription(20) != 0 {
		t.Errorf("narrowed to one subscription: SpreadOver %d, share %d; want 0, none", r.Rollout.Plan.SpreadOver, r.SeatsPerSubscription(20))
	}
	// Widened again by a list of blank entries, which is every subscription.
	if _, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Subscriptions: []string{" ", ""}, Reason: "widen"}); err != nil {
		t.Fatal(err)
	}
	if r := read(); len(r.Rollout.Subscriptions) != 0 || r.SeatsPerSubscription(20) != 2 {
		t.Errorf("widened by blank entries: scope %v, share %d; want all, 2", r.Rollout.Subscriptions, r.SeatsPerSubscription(20))
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
	// Seats the store names no subscription of (taken without the bound)
	// are nobody's share, a node asked about without one included.
	unnamed := []store.Seat{{VMID: "a"}, {VMID: "b"}}
	if got := seatDetail(r, rollout.Node{VMID: "z"}, unnamed); !strings.Contains(got, "(2 held): it takes a free one") {
		t.Errorf("a node without a subscription beside seats without one: %q", got)
	}
}

// TestExplainCountsTheSubscriptionShareFromTheStore: explain's seat rule
// reads the seats' subscriptions from the store, which names the one each
// seat was taken under, so a node whose subscription holds its share of a
// spread canary is told so; until 2026-12-04 the store's seat lists
// carried no subscription and explain said such a node would take a free
// seat on its next request, which lpsd then refused it.
func TestExplainCountsTheSubscriptionShareFromTheStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, c, signed(t, priv, v))
	sub := func(i int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", i) }
	var rs []store.Report
	for i := range 12 { // two nodes each: the canary fills under the share
		for _, n := range []string{"a", "b"} {
			rs = append(rs, store.Report{VMID: fmt.Sprintf("vm-%d-%s", i, n), Boot: "b", SubscriptionID: sub(i), Base: "202604.01", Agent: "baked", AgentVersion: "202604.01.0", Time: testNow.Add(-time.Hour)})
		}
	}
	if _, err := h.store.PutReports(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(20), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	r, _, err := h.store.Release(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	share := r.SeatsPerSubscription(20)
	if share != 2 {
		t.Fatalf("share %d, want 2", share)
	}
	for i := range share {
		held, err := h.store.TakeSeat(ctx, r.SeatSet(), store.Seat{VMID: fmt.Sprintf("holder-%d", i), Since: testNow, SubscriptionID: sub(0)}, store.SeatLimit{Seats: 20, PerSubscription: share})
		if err != nil || !held {
			t.Fatalf("TakeSeat = %v, %v", held, err)
		}
	}
	h.reload(t)
	detail := func(subscription string) string {
		t.Helper()
		resp, err := c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-new", SubscriptionId: subscription})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range resp.GetDecisions() {
			for _, rule := range d.GetRules() {
				if d.GetVersion() == v && rule.GetRule() == rollout.RuleCanarySeat {
					return rule.GetDetail()
				}
			}
		}
		t.Fatalf("explain of %s has no canary seat rule: %v", v, resp)
		return ""
	}
	if got := detail(sub(0)); !strings.Contains(got, "its subscription's nodes hold 2, the most one subscription may") {
		t.Errorf("a node of the subscription at its share: %q", got)
	}
	if got := detail(sub(1)); !strings.Contains(got, "(2 held): it takes a free one") {
		t.Errorf("a node of another subscription: %q", got)
	}
}

// TestNodeCountedByItsSeatNamesItsSubscription: the nodes list shows the
// subscription the store names for a node counted by its canary seat
// alone, so `lpsctl nodes --subscription` finds it; none for a seat taken
// without the bound.
func TestNodeCountedByItsSeatNamesItsSubscription(t *testing.T) {
	t.Parallel()
	r := rollout.Release{Version: "202604.01.1", Base: "202604.01"}
	for sub, want := range map[string]string{"sub-a": "sub-a", "": ""} {
		n := tally.Node{VMID: "vm-1", Outcome: tally.Pending, Seat: &store.Seat{VMID: "vm-1", SubscriptionID: sub, Since: testNow}}
		if got := nodeProto(r, n); got.GetSubscriptionId() != want || !strings.Contains(got.GetReason(), "holds a canary seat") {
			t.Errorf("nodeProto of a seat under %q = %v, want subscription %q", sub, got, want)
		}
	}
}
