package admin

import (
	"strings"
	"testing"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// putRollout stores v's rollout as the autopilot might have left it.
func putRollout(t *testing.T, h *harness, v string, ro rollout.Rollout) {
	t.Helper()
	cur, rev, err := h.store.Release(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	cur.Rollout = ro
	if _, err := h.store.PutRelease(t.Context(), cur, rev, store.AuditEntry{Time: testNow, Actor: "lpsd", Action: "auto-advance", Target: v}, nil); err != nil {
		t.Fatal(err)
	}
}

func transition(t *testing.T, c adminv1.AdminServiceClient, v string, a adminv1.Action) error {
	_, err := c.Transition(t.Context(), &adminv1.TransitionRequest{Version: v, Action: a, Reason: "r"})
	return err
}

// Attack: widening is held only while the release "serves"
// (Check and NeedsApproval both test cur.serving(), false when halted).
// One operator halts a release complete in subA, widens its scope to
// every subscription while halted, and resumes: it is complete at 100 % in
// the whole fleet, past --policy-min-canary and --policy-max-step (which
// no approval relaxes).
func TestPolicyHaltWidenResumeRefused(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{MinCanaryNodes: 10, MaxStepPercent: 20, MinBake: time.Hour})
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	putRollout(t, h, v, rollout.Rollout{State: rollout.Complete, Percent: 100, Subscriptions: []string{subA}, Canary: true})

	// The direct widening is refused, as documented.
	if _, err := alice.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Subscriptions: []string{}, Reason: "r", AllowUnseen: true}); err == nil {
		t.Fatal("direct widening allowed")
	}
	steps := []func() error{
		func() error { return transition(t, alice, v, adminv1.Action_ACTION_HALT) },
		func() error {
			_, err := alice.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Subscriptions: []string{}, Reason: "r", AllowUnseen: true})
			return err
		},
		func() error { return transition(t, alice, v, adminv1.Action_ACTION_RESUME) },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Logf("step %d refused: %v", i, err)
			return
		}
	}
	if got := h.release(t, v); got.Rollout.State == rollout.Complete && len(got.Rollout.Subscriptions) == 0 {
		t.Errorf("one operator: halt, widen while halted, resume: %s complete at 100%% in every subscription (was subA only), under min canary 10 and max step 20", v)
	}
}

// The same under the two-person rule: the second operator approves a
// "resume" whose change text says nothing of the scope, and the max step
// (which no approval relaxes) is not applied at all.
func TestPolicyHaltWidenResumeTwoPerson(t *testing.T) {
	t.Parallel()
	h, alice, bob := reviewClients(t, rollout.Policy{MinCanaryNodes: 10, MaxStepPercent: 20, TwoPerson: true})
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	putRollout(t, h, v, rollout.Rollout{State: rollout.Complete, Percent: 100, Subscriptions: []string{subA}, Canary: true})
	if err := transition(t, alice, v, adminv1.Action_ACTION_HALT); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Subscriptions: []string{}, Reason: "r", AllowUnseen: true}); err != nil {
		t.Logf("widening while halted refused: %v", err)
		return
	}
	_ = transition(t, alice, v, adminv1.Action_ACTION_RESUME)
	req := h.release(t, v).Rollout.Approval
	if err := transition(t, bob, v, adminv1.Action_ACTION_RESUME); err != nil {
		t.Logf("bob's resume refused: %v", err)
		return
	}
	got := h.release(t, v)
	if got.Rollout.State == rollout.Complete && len(got.Rollout.Subscriptions) == 0 {
		change := ""
		if req != nil {
			change = req.Change
		}
		t.Errorf("bob approved a resume described as %q; it served %s at 100%% to every subscription (was subA), a rise from 0 to 100 under max step 20", change, v)
	}
}

// Attack: widening "counts as a rise from 0", but change() sets
// RaisedAt only when the percentage rises, so the pace rule does not see
// it: at 10 % in subA (last rise 2 h ago), one operator widens to every
// subscription (0→10 for the new nodes) and at the same instant raises to
// 20 %: the new scope's nodes went 0→20 at once under max step 10 and min
// bake 1 h.
func TestPolicyWideningIsARise(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{MaxStepPercent: 10, MinBake: time.Hour})
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	putRollout(t, h, v, rollout.Rollout{State: rollout.Rolling, Percent: 10, Subscriptions: []string{subA}, RaisedAt: testNow.Add(-2 * time.Hour)})
	if _, err := alice.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, SetSubscriptions: true, Subscriptions: []string{}, Reason: "r", AllowUnseen: true}); err != nil {
		t.Fatalf("widening at 10%%: %v", err)
	}
	err := setPct(t.Context(), alice, v, 20, nil, nil)
	if err == nil {
		t.Errorf("20%% right after the widening was allowed (RaisedAt %v): the pace rule skipped the widening's rise", h.release(t, v).Rollout.RaisedAt)
	}
}

// Attack: the dry run checks unapproved, the plan itself approved. Under
// the two-person rule and a min bake, a one-step plan to 100 % on an
// uncanaried release at 10 % (raised 10 min ago) is refused by its dry run
// as a policy breach, while the plan itself is recorded as a request a
// second operator can approve.
func TestPolicyDryRunAgreesWithThePlan(t *testing.T) {
	t.Parallel()
	h, alice, bob := reviewClients(t, rollout.Policy{MinBake: time.Hour, TwoPerson: true})
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	putRollout(t, h, v, rollout.Rollout{State: rollout.Rolling, Percent: 10, RaisedAt: testNow.Add(-10 * time.Minute)})
	_, dry := alice.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: onePlanStep(100), Reason: "r", DryRun: true})
	_, real := alice.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: onePlanStep(100), Reason: "r"})
	_, approved := bob.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: onePlanStep(100), Reason: "r"})
	if errorInfo(dry).GetReason() == ReasonPolicy && approved == nil {
		t.Errorf("dry run: %v\nplan: %v\nbob's approval: ok (percent %d): the dry run says the policy refuses a plan a second operator then approves", dry, real, h.release(t, v).Rollout.Percent)
	}
}

// Attack: under the two-person rule alone, "serving every node in scope
// without a canary" waits only at exactly 100: one operator serves 99 %.
func TestPolicyUncanariedRiseWaits(t *testing.T) {
	t.Parallel()
	h, alice, _ := reviewClients(t, rollout.Policy{TwoPerson: true})
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	err := setPct(t.Context(), alice, v, 99, nil, nil)
	if got := h.release(t, v); got.Rollout.Percent == 99 {
		t.Errorf("one operator put uncanaried %s at 99%% (err %v)", v, err)
	}
	_ = strings.TrimSpace
}
