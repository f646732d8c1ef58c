package admin

// Hostile review of the rollout policy and the two-person rule. Each test
// asserts what the docs promise; a failure is a defect.

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

func reviewClients(t *testing.T, p rollout.Policy) (*harness, adminv1.AdminServiceClient, adminv1.AdminServiceClient) {
	h := newHarness(t, harnessOpts{policy: p})
	return h, h.ops(t), h.client(t, cred{token: "Bearer " + unnamedToken})
}

func onePlanStep(pct int32) *adminv1.Plan {
	return &adminv1.Plan{Steps: []*adminv1.PlanStep{{Percent: pct, MinReports: 1}}, Margin: 0.05, MaxFailureRate: 0.2}
}

// Attack: "another actor asking for the same change ... makes it". The request
// records only its action, so a second operator's *different* change of
// the same action is applied as if approved: alice asks for 5% out of
// the canary, bob's 100% is made, and the audit says alice's request
// approved it.
func TestPolicyOnlyTheSameChangeApproves(t *testing.T) {
	t.Parallel()
	h, alice, bob := reviewClients(t, rollout.Policy{TwoPerson: true})
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	if _, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(10), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	err := setPct(ctx, alice, v, 5, nil, nil)
	if info := errorInfo(err); info.GetReason() != ReasonApprovalRequired {
		t.Fatalf("alice 5%%: %v, want APPROVAL_REQUIRED", err)
	}
	err = setPct(ctx, bob, v, 100, nil, nil)
	if got := h.release(t, v); got.Rollout.Percent == 100 {
		t.Errorf("bob's 100%% (err %v) was made as the approval of alice's request for 5%%: the request approves any change of the same action", err)
		if audit, aerr := alice.ListAudit(ctx, &adminv1.ListAuditRequest{Target: v}); aerr == nil {
			last := audit.GetEntries()[len(audit.GetEntries())-1]
			t.Logf("audit: %s %s %q evidence %s", last.GetActor(), last.GetAction(), rollout.DescribeChange(last.GetBeforeJson(), last.GetAfterJson()), last.GetEvidenceJson())
		}
	}

	// The same with plans: alice asks for a bigger canary, bob's one-step
	// plan to 100%% is made instead.
	const v2 = "202604.01.2"
	publish(t, alice, signed(t, priv, v2))
	if _, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v2, Plan: canaryPlanProto(10), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v2, Plan: canaryPlanProto(20), Reason: "a bigger canary"})
	if info := errorInfo(err); info.GetReason() != ReasonApprovalRequired {
		t.Fatalf("alice's bigger canary: %v, want APPROVAL_REQUIRED", err)
	}
	_, err = bob.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v2, Plan: onePlanStep(100), Reason: "approve"})
	if got := h.release(t, v2); got.Rollout.Percent == 100 {
		t.Errorf("bob's plan straight to 100%% (err %v) was made as the approval of alice's bigger canary", err)
	}
}

// Attack: completing "a release no canary ran" waits for a second operator
// (Policy.String: "complete an uncanaried release"), but only a release at
// 0% is held: one operator serves every node in scope by rollout set
// --percent 100, by a one-step plan to 100%, or by 1% then complete.
func TestPolicyUncanariedCompleteWaits(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{TwoPerson: true})
	ctx := t.Context()
	_, priv := newKey(t)
	for i, how := range []struct {
		name string
		do   func(v string) error
	}{
		{"rollout set --percent 100 on a draft", func(v string) error { return setPct(ctx, alice, v, 100, nil, nil) }},
		{"a one-step plan to 100% on a draft", func(v string) error {
			_, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: onePlanStep(100), Reason: "r"})
			return err
		}},
		{"1% then complete", func(v string) error {
			if err := setPct(ctx, alice, v, 1, nil, nil); err != nil {
				return err
			}
			_, err := alice.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE, Reason: "r"})
			return err
		}},
	} {
		v := []string{"202604.01.1", "202604.01.2", "202604.01.3"}[i]
		publish(t, alice, signed(t, priv, v))
		err := how.do(v)
		got := h.release(t, v)
		if got.Rollout.Percent == 100 {
			t.Errorf("%s: one operator serves %s to every node in scope (%s, err %v), no canary ran, no second operator", how.name, v, got.Rollout.State, err)
		}
	}
}

// Attack: the policy reads only the percentage, never the scope: a release
// complete (or at any percentage) in a one-subscription scope is widened
// to the whole fleet in one change by one operator, past
// --policy-min-canary, --policy-max-step and the two-person rule.
func TestPolicyScopeWideningHeld(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{MinCanaryNodes: 10, MaxStepPercent: 20, MinBake: time.Hour, TwoPerson: true})
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	// As the autopilot leaves it after a compliant plan run in subA only.
	cur, rev, err := h.store.Release(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	cur.Rollout = rollout.Rollout{State: rollout.Complete, Percent: 100, Subscriptions: []string{subA}, Canary: true}
	if _, err := h.store.PutRelease(ctx, cur, rev, store.AuditEntry{Time: testNow, Actor: "lpsd", Action: "auto-advance", Target: v}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = alice.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Subscriptions: []string{}, Reason: "everyone", AllowUnseen: true})
	if got := h.release(t, v); len(got.Rollout.Subscriptions) == 0 {
		t.Errorf("one operator widened %s from subscription %s to every subscription while complete (err %v): the policy never looks at the scope", v, subA, err)
	}
}

// Attack: --policy-max-step and --policy-min-bake hold one change and plan
// steps only: one operator takes a release past its canary to 100% in a
// few back-to-back calls, each within the largest step, none waiting a
// bake.
func TestPolicyPaceBetweenRises(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{MaxStepPercent: 20, MinBake: time.Hour})
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	for _, p := range []int32{20, 40, 60, 80, 100} {
		if err := setPct(ctx, alice, v, p, nil, nil); err != nil {
			t.Logf("%d%%: %v", p, err)
			return // the policy held
		}
	}
	if got := h.release(t, v); got.Rollout.Percent == 100 {
		t.Errorf("one operator went 0→100%% in five calls at one instant under max step 20 and min bake 1h")
	}
}

// Attack: "a plan's dry run is refused as the plan would be": a plan that
// waits for a second operator passes its dry run without a word.
func TestPolicyDryRunSaysItWaits(t *testing.T) {
	t.Parallel()
	_, alice, _ := reviewClients(t, rollout.Policy{TwoPerson: true})
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	if _, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(10), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	dry, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(20), Reason: "r", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	_, real := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(20), Reason: "r"})
	if errorInfo(real).GetReason() == ReasonApprovalRequired && dry.GetNeedsApproval() == "" {
		t.Errorf("the dry run does not say the plan waits for a second operator; the plan itself: %v", real)
	}
}

// TestPolicySecondAskReplacesTheRequest: the same actor asking for a
// different change of the same action replaces her request (the standing
// one is the new change), rather than being told she asked already.
func TestPolicySecondAskReplacesTheRequest(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{TwoPerson: true})
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	if _, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(10), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	_ = setPct(ctx, alice, v, 5, nil, nil)
	err := setPct(ctx, alice, v, 50, nil, nil)
	wantCode(t, "alice changes her mind", err, codes.FailedPrecondition)
	if err != nil && strings.Contains(err.Error(), "already") {
		t.Errorf("alice's second, different ask was answered as a repeat: %v", err)
	}
	a := h.release(t, v).Rollout.Approval
	if a == nil || !strings.Contains(a.Change, "percent 0→50") {
		t.Errorf("standing request = %+v, want alice's 50%%", a)
	}
}

// Attack: at a canary, one operator replaces the plan with the same steps and
// ceilings no evidence can break (margin 0.99, max failure rate 1, silent
// and delivery rates 1): no approval is asked, and the autopilot then
// "advances it on its evidence" whatever the canary's nodes report.
func TestPolicyCanaryCeilingsHeld(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{MinCanaryNodes: 10, TwoPerson: true})
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	if _, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(10), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	blind := canaryPlanProto(10)
	blind.Margin, blind.MaxFailureRate, blind.MaxSilentRate, blind.MaxDeliveryRate = 0.99, 1, 1, 1
	_, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: blind, Reason: "r"})
	if p := h.release(t, v).Rollout.Plan; p.MaxFailureRate == 1 {
		t.Errorf("one operator made the running canary unhaltable (margin %v, ceiling %v, err %v) with no second operator", p.Margin, p.MaxFailureRate, err)
	}
}
