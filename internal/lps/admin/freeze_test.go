package admin

import (
	"testing"

	"google.golang.org/grpc/codes"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

// TestFreeze: while every rollout is frozen, nothing starts or advances
// (rollout set, plan, skip, resume, complete are refused, naming the
// freeze and how to thaw it); publishing, a dry run, pause, halt and
// revoke go on; the freeze is audited, shown by Status, compare-and-swap
// on its revision, and a second freeze changes nothing.
func TestFreeze(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
		publish(t, c, signed(t, priv, v))
	}
	if err := setPct(ctx, c, "202604.01.1", 10, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := setPct(ctx, c, "202604.01.3", 10, nil, nil); err != nil {
		t.Fatal(err)
	}

	_, err := c.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: true})
	wantCode(t, "a freeze without a reason", err, codes.InvalidArgument)
	_, err = h.client(t, cred{token: "Bearer " + readerToken}).SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: true, Reason: "r"})
	wantCode(t, "a reader freezing", err, codes.PermissionDenied)
	frozen, err := c.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: true, Reason: "INC 42: holiday change freeze"})
	if err != nil || !frozen.GetFreeze().GetFrozen() || frozen.GetFreeze().GetRevision() == 0 || frozen.GetFreeze().GetActor() != "token:ops" || frozen.GetUnchanged() {
		t.Fatalf("SetFreeze = %v, %v; want frozen by token:ops at a revision", frozen, err)
	}
	again, err := c.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: true, Reason: "again"})
	if err != nil || !again.GetUnchanged() || again.GetFreeze().GetReason() != "INC 42: holiday change freeze" {
		t.Errorf("SetFreeze again = %v, %v; want unchanged, the first freeze kept", again, err)
	}

	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{{Percent: 1, BakeSeconds: 1800, MinReports: 20}, {Percent: 100, BakeSeconds: 3600, MinReports: 100}}, Margin: 0.05, MaxFailureRate: 0.2}
	refused := map[string]error{}
	refused["rollout set"] = setPct(ctx, c, "202604.01.1", 50, nil, nil)
	_, refused["plan"] = c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: "202604.01.2", Plan: plan, Reason: "r"})
	_, refused["skip"] = c.SkipStep(ctx, &adminv1.SkipStepRequest{Version: "202604.01.1", Reason: "r"})
	_, refused["complete"] = c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.1", Action: adminv1.Action_ACTION_COMPLETE, Reason: "r"})
	for what, err := range refused {
		wantCode(t, what+" while frozen", err, codes.FailedPrecondition)
		if info := errorInfo(err); info.GetReason() != ReasonFrozen || info.GetMetadata()["actor"] != "token:ops" {
			t.Errorf("%s while frozen: ErrorInfo %v, want %s by token:ops", what, info, ReasonFrozen)
		}
	}
	if _, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: "202604.01.2", Plan: plan, DryRun: true}); err != nil {
		t.Errorf("plan --dry-run while frozen = %v, want the dry run", err)
	}
	publish(t, c, signed(t, priv, "202604.01.4"))
	if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.1", Action: adminv1.Action_ACTION_PAUSE, Reason: "r"}); err != nil {
		t.Errorf("pause while frozen = %v, want done", err)
	}
	_, err = c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.1", Action: adminv1.Action_ACTION_RESUME, Reason: "r"})
	wantCode(t, "resume while frozen", err, codes.FailedPrecondition)
	if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.3", Action: adminv1.Action_ACTION_HALT, Reason: "r"}); err != nil {
		t.Errorf("halt while frozen = %v, want done", err)
	}
	if _, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.3", Reason: "r"}); err != nil {
		t.Errorf("revoke while frozen = %v, want done", err)
	}
	st, err := c.Status(ctx, &adminv1.StatusRequest{})
	if err != nil || !st.GetFreeze().GetFrozen() || st.GetFreeze().GetRevision() != frozen.GetFreeze().GetRevision() {
		t.Errorf("Status.freeze = %v, %v; want the freeze", st.GetFreeze(), err)
	}

	_, err = c.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: false, Reason: "thaw", IfRevision: frozen.GetFreeze().GetRevision() - 1})
	wantCode(t, "unfreeze at a stale revision", err, codes.Aborted)
	thawed, err := c.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: false, Reason: "INC 42: freeze over", IfRevision: frozen.GetFreeze().GetRevision()})
	if err != nil || thawed.GetFreeze().GetFrozen() || thawed.GetFreeze().GetRevision() <= frozen.GetFreeze().GetRevision() {
		t.Fatalf("unfreeze = %v, %v; want thawed at a newer revision", thawed, err)
	}
	if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.1", Action: adminv1.Action_ACTION_RESUME, Reason: "r"}); err != nil {
		t.Errorf("resume after the thaw = %v, want done", err)
	}
	if err := setPct(ctx, c, "202604.01.1", 50, nil, nil); err != nil {
		t.Errorf("rollout set after the thaw = %v, want done", err)
	}
	audit, err := c.ListAudit(ctx, &adminv1.ListAuditRequest{Target: FreezeTarget})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit.GetEntries() {
		actions = append(actions, e.GetAction())
	}
	if len(actions) != 2 || actions[0] != ActionFreeze || actions[1] != ActionUnfreeze {
		t.Errorf("audit of %q = %v, want [%s %s]", FreezeTarget, actions, ActionFreeze, ActionUnfreeze)
	}
}
