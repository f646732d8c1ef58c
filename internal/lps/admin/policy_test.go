package admin

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

func canaryPlanProto(nodes int32) *adminv1.Plan {
	return &adminv1.Plan{Steps: []*adminv1.PlanStep{
		{Nodes: nodes, BakeSeconds: 3600, MinReports: nodes},
		{Percent: 50, BakeSeconds: 3600, MinReports: 20},
		{Percent: 100, MinReports: 40},
	}, Margin: 0.05, MaxFailureRate: 0.2}
}

// TestPolicy: lpsd holds every operator's change to its rollout policy,
// whoever asks: a draft starts only with a canary of at least the
// smallest size, no change raises the percentage by more than the largest
// step, no plan step bakes less than the shortest bake; a dry run says so
// too; Status shows the policy.
func TestPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{policy: rollout.Policy{MinCanaryNodes: 10, MaxStepPercent: 50, MinBake: 30 * time.Minute}})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, c, signed(t, priv, v))

	refused := func(what string, err error, says string) {
		t.Helper()
		wantCode(t, what, err, codes.FailedPrecondition)
		if info := errorInfo(err); info.GetReason() != ReasonPolicy {
			t.Errorf("%s: ErrorInfo %v, want %s", what, info, ReasonPolicy)
		}
		if err != nil && !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v; want it to say %q", what, err, says)
		}
	}
	refused("a percentage on a draft", setPct(ctx, c, v, 5, nil, nil), "a canary of at least 10 nodes")
	_, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE, Reason: "r"})
	refused("complete a draft", err, "a step of 100 points")
	_, err = c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(5), Reason: "r"})
	refused("a canary of 5", err, "at least 10 nodes")
	_, err = c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(5), Reason: "r", DryRun: true})
	refused("a dry run of a canary of 5", err, "at least 10 nodes")
	short := canaryPlanProto(10)
	short.Steps[1].BakeSeconds = 60
	_, err = c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: short, Reason: "r"})
	refused("a bake of 1m", err, "shortest bake allowed is 30m")

	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(10), Reason: "canary of 10"}); err != nil {
		t.Fatalf("a plan that complies: %v", err)
	}
	// Without the two-person rule, nobody can leave the canary early.
	_, err = c.SkipStep(ctx, &adminv1.SkipStepRequest{Version: v, Reason: "r"})
	refused("skip the canary", err, "before the autopilot advanced it")

	st, err := c.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p := st.GetPolicy(); p.GetMinCanaryNodes() != 10 || p.GetMaxStepPercent() != 50 || p.GetMinBakeSeconds() != 1800 || p.GetTwoPerson() || !strings.Contains(p.GetSummary(), "at least 10 nodes") {
		t.Errorf("Status.policy = %v", p)
	}
}

// TestTwoPersonRule: leaving a canary early, completing a draft and
// resuming after an automatic halt wait for a second operator. The first
// ask is recorded (audit request-approval, on the record), refused with
// ReasonApprovalRequired and shown by Status; asking again alone changes
// nothing; another actor asking for the same change makes it, with the
// request in the change's audit evidence; a request stands only while the
// release is as it was and for ApprovalTTL.
func TestTwoPersonRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{policy: rollout.Policy{TwoPerson: true}})
	alice, bob := h.ops(t), h.client(t, cred{token: "Bearer " + unnamedToken})
	bobActor := must(ParseTokens([]byte(unnamedToken)))[0].Actor()
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.1"
	publish(t, alice, signed(t, priv, v))
	if _, err := alice.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Plan: canaryPlanProto(10), Reason: "canary"}); err != nil {
		t.Fatal(err)
	}

	waits := func(what string, err error, by string) {
		t.Helper()
		wantCode(t, what, err, codes.FailedPrecondition)
		if info := errorInfo(err); info.GetReason() != ReasonApprovalRequired || info.GetMetadata()["requested_by"] != by {
			t.Errorf("%s: ErrorInfo %v, want %s requested by %s", what, info, ReasonApprovalRequired, by)
		}
	}
	_, err := alice.SkipStep(ctx, &adminv1.SkipStepRequest{Version: v, Reason: "canary nodes look fine"})
	waits("alice skips the canary", err, "token:ops")
	st, err := alice.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a := st.GetReleases()[0].GetRollout().GetApproval()
	if a.GetAction() != ActionSkip || a.GetRequestedBy() != "token:ops" || a.GetReason() != "canary nodes look fine" || !a.GetExpires().AsTime().Equal(testNow.Add(rollout.ApprovalTTL)) {
		t.Errorf("Status approval = %v", a)
	}
	if got := st.GetReleases()[0].GetRollout().GetPlan().GetStep(); got != 0 {
		t.Errorf("the canary moved to step %d on a request", got)
	}
	_, err = alice.SkipStep(ctx, &adminv1.SkipStepRequest{Version: v, Reason: "again"})
	waits("alice asks again", err, "token:ops")
	if err != nil && !strings.Contains(err.Error(), "you asked for it already") {
		t.Errorf("alice asks again: %v", err)
	}
	if _, err := bob.SkipStep(ctx, &adminv1.SkipStepRequest{Version: v, Reason: "second pair of eyes: ok"}); err != nil {
		t.Fatalf("bob approves the skip: %v", err)
	}
	skipped := h.release(t, v)
	if skipped.Rollout.Plan.Step != 1 || skipped.Rollout.Percent != 50 || skipped.Rollout.Approval != nil {
		t.Errorf("after the approval: step %d, %d%%, approval %+v; want step 1 at 50%%, none", skipped.Rollout.Plan.Step, skipped.Rollout.Percent, skipped.Rollout.Approval)
	}
	audit, err := alice.ListAudit(ctx, &adminv1.ListAuditRequest{Target: v})
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, e := range audit.GetEntries() {
		trail = append(trail, e.GetActor()+" "+e.GetAction())
	}
	want := []string{"token:ops publish", "token:ops plan", "token:ops request-approval", bobActor + " skip"}
	if strings.Join(trail, ", ") != strings.Join(want, ", ") {
		t.Errorf("audit = %v, want %v", trail, want)
	}
	if last := audit.GetEntries()[len(audit.GetEntries())-1]; !strings.Contains(last.GetEvidenceJson(), `"actor":"token:ops"`) {
		t.Errorf("the skip's evidence %s does not name the request's actor", last.GetEvidenceJson())
	}

	// The autopilot halts it.
	cur, rev, err := h.store.Release(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	halted, err := cur.Transition(rollout.Halted)
	if err != nil {
		t.Fatal(err)
	}
	halted.Rollout.Reason = "regression"
	if _, err := h.store.PutRelease(ctx, halted, rev, store.AuditEntry{Time: testNow, Actor: "lpsd", Action: "auto-halt", Target: v}, nil); err != nil {
		t.Fatal(err)
	}
	resume := &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_RESUME, Reason: "fixed the cause"}
	_, err = alice.Transition(ctx, resume)
	waits("alice resumes after an automatic halt", err, "token:ops")
	// Past its TTL the request no longer stands: bob's ask is a new one.
	h.ahead.Add(int64(rollout.ApprovalTTL))
	_, err = bob.Transition(ctx, resume)
	waits("bob resumes after alice's request expired", err, bobActor)
	if _, err := alice.Transition(ctx, resume); err != nil {
		t.Fatalf("alice approves bob's resume: %v", err)
	}
	if got := h.release(t, v); got.Rollout.State != rollout.Rolling {
		t.Errorf("after the approved resume: %s, want rolling", got.Rollout.State)
	}

	// A request stands only while the release is as it was asked for.
	const v2 = "202604.01.2"
	publish(t, alice, signed(t, priv, v2))
	_, err = alice.Transition(ctx, &adminv1.TransitionRequest{Version: v2, Action: adminv1.Action_ACTION_COMPLETE, Reason: "r"})
	waits("alice completes a draft", err, "token:ops")
	if _, err := alice.Transition(ctx, &adminv1.TransitionRequest{Version: v2, Action: adminv1.Action_ACTION_HALT, Reason: "changed my mind"}); err != nil {
		t.Fatal(err)
	}
	if got := h.release(t, v2); got.Rollout.Approval != nil {
		t.Errorf("an operator's halt kept the request %+v", got.Rollout.Approval)
	}
}

// release reads v's record from the harness's store.
func (h *harness) release(t *testing.T, v string) rollout.Release {
	t.Helper()
	r, _, err := h.store.Release(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAdvanceWindowShown: the advance window lpsd's autopilot keeps is in
// status's policy, as a field and in the summary's words, alone or beside
// the rest of the policy.
func TestAdvanceWindowShown(t *testing.T) {
	t.Parallel()
	w, err := autopilot.ParseWindow("Mon-Fri 09:00-17:00 Europe/Dublin")
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []rollout.Policy{{}, {MinCanaryNodes: 10}} {
		h := newHarness(t, harnessOpts{policy: policy, window: w})
		st, err := h.ops(t).Status(t.Context(), &adminv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		p := st.GetPolicy()
		if p.GetAdvanceWindow() != "Mon-Fri 09:00-17:00 Europe/Dublin" || !strings.Contains(p.GetSummary(), "plan steps advance only Mon-Fri 09:00-17:00 Europe/Dublin") ||
			strings.HasPrefix(p.GetSummary(), ";") || (policy.MinCanaryNodes > 0) != strings.Contains(p.GetSummary(), "at least 10 nodes") {
			t.Errorf("policy %+v: status policy %v", policy, p)
		}
	}
}
