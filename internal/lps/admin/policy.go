package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// ActionRequestApproval is the audit action of a change that waits for a
// second operator under the two-person rule: its Evidence names the action
// asked for and why it waits (requestEvidence).
const ActionRequestApproval = "request-approval"

// ErrorInfo reasons of the rollout policy.
const (
	// ReasonPolicy: a change the rollout policy (lpsd --policy-*) refuses
	// whoever asks. Metadata: none; the message names the rule.
	ReasonPolicy = "POLICY"
	// ReasonApprovalRequired: a change that waits for a second operator
	// (lpsd --policy-two-person). Metadata: "action", "requested_by" and
	// "expires" (RFC 3339) of the standing request.
	ReasonApprovalRequired = "APPROVAL_REQUIRED"
)

// requestEvidence is the Evidence of a request-approval audit entry.
type requestEvidence struct {
	Action string `json:"action"`
	Change string `json:"change"`
	Why    string `json:"why"`
	// Replaced names another operator's request this one replaced.
	Replaced string `json:"replaced,omitempty"`
}

// approvedEvidence is the Evidence of a change a second operator
// approved: the request it approved, with who asked for it.
type approvedEvidence struct {
	Approval rollout.Approval `json:"approved_request"`
}

// judge applies the rollout policy to an operator's change at now of a
// release from cur to next: why and whether it waits for a second
// operator, and the refusal of a change the policy refuses. A change that
// waits is checked as approved: a change the policy refuses even so is
// refused at once, rather than asked of a second operator who could not
// approve it. The change and a plan's dry run both judge with it.
func (s *Server) judge(cur, next rollout.Release, now time.Time) (why string, needs bool, err error) {
	why, needs = s.policy.NeedsApproval(cur, next)
	if err := s.policy.Check(cur, next, needs, now); err != nil {
		return why, needs, policyError(err)
	}
	return why, needs, nil
}

// approve applies the two-person rule to actor's change at now of a
// release from cur (at revision rev) to next, audit action action, which
// judge said waits for a second operator (why). It returns the standing
// request of another operator that the change approves, or an error: it
// waits for a second operator. A
// change that waits is recorded as a request (audit request-approval, on
// the release record) and refused with ReasonApprovalRequired; the same
// change (the same action leaving the release the same:
// rollout.ChangeDigest) asked for by another actor while the request
// stands approves it. Another change replaces the request, and says whose
// it replaced.
func (s *Server) approve(ctx context.Context, actor, action, reason, why string, cur, next rollout.Release, rev int64, now time.Time) (*rollout.Approval, error) {
	want := rollout.ChangeDigest(next)
	replaced := ""
	if p := cur.Rollout.Approval; p != nil && p.Stands(cur, now) {
		switch {
		case p.Action == action && p.Want == want && p.Actor != actor:
			return p, nil
		case p.Action == action && p.Want == want:
			return nil, approvalRequired(cur.Version, why, *p, "", true)
		case p.Actor != actor:
			replaced = fmt.Sprintf("%s's request (%s: %s)", p.Actor, p.Action, p.Change)
		}
	}
	req := rollout.NewApproval(cur, next, action, actor, reason, now)
	upd := cur
	upd.Rollout.Approval = &req
	upd.UpdatedAt = now
	e := store.AuditEntry{Time: now, Actor: actor, Action: ActionRequestApproval, Target: cur.Version, Reason: reason}
	var err error
	if e.Evidence, err = json.Marshal(requestEvidence{Action: action, Change: req.Change, Why: why, Replaced: replaced}); err != nil {
		return nil, s.internal("encode the request", err)
	}
	if _, err := s.write(ctx, "release", cur, upd, rev, e, func(ctx context.Context, e store.AuditEntry) (int64, error) {
		return s.store.PutRelease(ctx, upd, rev, e, nil)
	}); err != nil {
		return nil, err
	}
	s.log.Info("change waits for a second operator", "action", action, "version", cur.Version, "actor", actor, "change", req.Change, "why", why, "replaced", replaced)
	return nil, approvalRequired(cur.Version, why, req, replaced, false)
}

// approvalRequired is the refusal of a change that waits for a second
// operator: req is the standing request; replaced names the other
// operator's request it replaced ("": none); again says its asker asked
// for it again, which writes nothing.
func approvalRequired(version, why string, req rollout.Approval, replaced string, again bool) error {
	asked := fmt.Sprintf("recorded as a request by %s (audit %s)", req.Actor, ActionRequestApproval)
	switch {
	case again:
		asked = "you asked for it already: another operator must approve it"
	case replaced != "":
		asked += ", replacing " + replaced
	}
	expires := req.Expires().UTC().Format(time.RFC3339)
	return withInfo(status.Newf(codes.FailedPrecondition,
		"%s %s (%s) waits for a second operator (lpsd --policy-two-person): %s; %s, at %s. Another operator approves it by asking for the same change (the same lpsctl command, or the dashboard's) before %s",
		req.Action, version, req.Change, why, asked, req.Time.UTC().Format(time.RFC3339), expires),
		ReasonApprovalRequired, map[string]string{"action": req.Action, "requested_by": req.Actor, "expires": expires, "change": req.Change})
}

// policyError is err (wrapping rollout.ErrPolicy) as the RPC's refusal.
func policyError(err error) error {
	return withInfo(status.New(codes.FailedPrecondition, err.Error()+" (lpsd --policy-* flags; lpsctl status shows the policy)"), ReasonPolicy, nil)
}

func policyProto(p rollout.Policy, w autopilot.Window) *adminv1.Policy {
	out := &adminv1.Policy{
		MinCanaryNodes: int32(p.MinCanaryNodes),
		MaxStepPercent: int32(p.MaxStepPercent),
		TwoPerson:      p.TwoPerson,
		Summary:        p.String(),
		AdvanceWindow:  w.String(),
	}
	if w := w.String(); w != "" {
		advance := "plan steps advance only " + w + " (lpsd --advance-window; halts and pauses any time)"
		if p.Empty() {
			out.Summary = advance
		} else {
			out.Summary += "; " + advance
		}
	}
	// Rounded up: a sub-second bake must not read as none.
	out.MinBakeSeconds = int64((p.MinBake + time.Second - 1) / time.Second)
	return out
}

// approvalProto is r's request for a second operator, if one stands at
// now.
func (s *Server) approvalProto(r rollout.Release, now time.Time) *adminv1.Approval {
	a := r.Rollout.Approval
	if a == nil || !s.policy.TwoPerson || !a.Stands(r, now) {
		return nil // a replica without the rule approves nothing
	}
	return &adminv1.Approval{
		Change:      a.Change,
		Action:      a.Action,
		RequestedBy: a.Actor,
		Reason:      a.Reason,
		RequestedAt: timestamppb.New(a.Time),
		Expires:     timestamppb.New(a.Expires()),
	}
}
