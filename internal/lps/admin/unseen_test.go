package admin

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Subscriptions of the unseen tests: seen by a report, seen by a served
// record, seen only two days ago, and a slip of the first.
const (
	subReported = "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f"
	subServed   = "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a"
	subStale    = "11111111-2222-4333-8444-555555555555"
	subSlip     = "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5e"
	subNobody   = "99999999-aaaa-4bbb-8ccc-dddddddddddd"
)

// unseenInfo returns the ErrorInfo of an unseen-scope refusal.
func unseenInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonUnseenScope {
			return info
		}
	}
	return nil
}

// TestScopeMatchingNoNodeSeen: SetRollout and SetPlan (a dry run too)
// refuse a scope value that can match no node (a region no live replica
// serves, a subscription no report or served record of the last day has),
// naming each and the nearest seen spelling, and change nothing; with
// allow_unseen they go ahead; seen values, in any case, pass.
func TestScopeMatchingNoNodeSeen(t *testing.T) {
	t.Parallel()
	st := newReplicated(t,
		store.Heartbeat{ID: testReplica, Time: testNow, Place: rollout.Place{Region: "eastus"}},
		store.Heartbeat{ID: "b", Time: testNow, Place: rollout.Place{Region: "westeurope"}})
	ctx := t.Context()
	if _, err := st.PutReports(ctx, []store.Report{
		{VMID: "vm-1", Boot: "b", SubscriptionID: strings.ToUpper(subReported), Time: testNow.Add(-23 * time.Hour)},
		{VMID: "vm-2", Boot: "b", SubscriptionID: subStale, Time: testNow.Add(-25 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutServed(ctx, []store.Served{{Version: "202604.01.9", VMID: "vm-3", Boot: "b", SubscriptionID: subServed, Time: testNow.Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{store: st})
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, c, signed(t, priv, v))

	for _, tt := range []struct {
		name          string
		subs, regions []string
		names         []string // parts of the message
		kind, value   string   // the first one's ErrorInfo
		suggestion    string
	}{
		{name: "region-typo", regions: []string{"eastus", "westeuropee"},
			names: []string{`no live replica serves region "westeuropee" (did you mean "westeurope"?)`, "the replicas serve eastus, westeurope", "--allow-unseen"},
			kind:  "region", value: "westeuropee", suggestion: "westeurope"},
		{name: "region-nobody-serves", regions: []string{"japaneast"},
			names: []string{`region "japaneast"`, "the replicas serve eastus, westeurope"}, kind: "region", value: "japaneast"},
		{name: "subscription-no-node-has", subs: []string{subNobody},
			names: []string{`no node of subscription "` + subNobody + `" was seen in the last 24 h`, "2 subscriptions were"}, kind: "subscription", value: subNobody},
		{name: "subscription-slip", subs: []string{subServed, strings.ToUpper(subSlip)},
			names: []string{`"` + subSlip + `" (did you mean "` + subReported + `"?)`}, kind: "subscription", value: subSlip, suggestion: subReported},
		{name: "subscription-seen-too-long-ago", subs: []string{subStale}, names: []string{`subscription "` + subStale + `"`}, kind: "subscription", value: subStale},
		{name: "both", subs: []string{subNobody}, regions: []string{"westeuropee"}, names: []string{subNobody, "westeuropee"}, kind: "subscription", value: subNobody},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := &adminv1.SetRolloutRequest{Version: v, Percent: 10, Subscriptions: tt.subs, SetSubscriptions: tt.subs != nil, Regions: tt.regions, SetRegions: tt.regions != nil, Reason: "test"}
			_, err := c.SetRollout(ctx, req)
			wantCode(t, tt.name, err, codes.FailedPrecondition)
			msg := status.Convert(err).Message()
			for _, want := range tt.names {
				if !strings.Contains(msg, want) {
					t.Errorf("%q does not say %q", msg, want)
				}
			}
			if info := unseenInfo(err); info == nil || info.GetMetadata()["kind"] != tt.kind || info.GetMetadata()["value"] != tt.value || info.GetMetadata()["suggestion"] != tt.suggestion {
				t.Errorf("ErrorInfo %v, want %s %q suggesting %q", info, tt.kind, tt.value, tt.suggestion)
			}
		})
	}
	if r, _, _ := st.Release(ctx, v); r.Rollout.State != rollout.Draft {
		t.Errorf("a refused scope changed the release: %+v", r.Rollout)
	}
	if entries, _ := st.Audit(ctx, 0, 10); len(entries) != 1 {
		t.Errorf("%d audit entries after refusals, want the publish alone", len(entries))
	}

	// Seen values pass, in any case; so does a change of percentage alone.
	if _, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 5, Subscriptions: []string{strings.ToUpper(subServed), subReported}, SetSubscriptions: true, Regions: []string{"WestEurope"}, SetRegions: true}); err != nil {
		t.Fatalf("a seen scope: %v", err)
	}
	// Forced past the check, the scope stands; a plan on it changes no
	// scope, so it is not checked (it pauses as stalled if it reaches
	// nobody).
	if _, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 5, Regions: []string{"westeuropee"}, SetRegions: true, AllowUnseen: true}); err != nil {
		t.Fatalf("allow_unseen: %v", err)
	}
	if _, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 10}); err != nil {
		t.Errorf("a percentage change alone is not checked: %v", err)
	}
	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{{Percent: 10, BakeSeconds: 60, MinReports: 1}, {Percent: 100, BakeSeconds: 60, MinReports: 2}}, Margin: 0.05, MaxFailureRate: 0.2}
	for _, dry := range []bool{true, false} {
		if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: plan, DryRun: dry, Reason: "the scope was set already"}); err != nil {
			t.Errorf("plan (dry run %v) on a scope set before: %v", dry, err)
		}
	}
}

// TestComponentScopeMatchingNoNodeSeen: a component configuration's
// rollout is refused the same way.
func TestComponentScopeMatchingNoNodeSeen(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	if _, err := c.PublishComponentConfig(t.Context(), &adminv1.PublishComponentConfigRequest{EnvelopeJson: signedComponent(t, priv, "localDNS", 1)}); err != nil {
		t.Fatal(err)
	}
	_, err := c.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: "localDNS@1", Percent: 10, Regions: []string{"eastuss"}, SetRegions: true})
	if info := unseenInfo(err); status.Code(err) != codes.FailedPrecondition || info == nil || info.GetMetadata()["suggestion"] != "eastus" {
		t.Errorf("component rollout on an unseen region: %v (%v)", err, info)
	}
}
