package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// SetPlan puts a release on a plan from its first step, or from_step
// (rollout.Release.SetPlan: a start step the release is past is
// FailedPrecondition). With dry_run it answers the same, with nothing
// written. Either way the answer has the plan's preview.
func (s *Server) SetPlan(ctx context.Context, req *adminv1.SetPlanRequest) (*adminv1.SetPlanResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	p, err := planFromProto(req.GetPlan())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "plan: %v", err)
	}
	if !req.GetDryRun() {
		if err := s.checkFrozen(ctx, "plan "+req.GetVersion()); err != nil {
			return nil, err
		}
	}
	from := int(req.GetFromStep())
	if from < 0 || from > len(p.Steps) {
		return nil, status.Errorf(codes.InvalidArgument, "from_step %d: the plan has steps 1 to %d (0: the first)", from, len(p.Steps))
	}
	if from > 0 {
		p.Step = from - 1 // from_step counts from 1, the plan's index from 0
	}
	// A plan changes no scope, so it is not checked against the nodes
	// seen (SetRollout checks a scope when it is set): a plan whose scope
	// reaches nobody is paused as stalled at its step's deadline.
	now := s.now()
	if component, version, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		apply := func(c rollout.Config) (rollout.Config, error) { return c.SetPlan(p, now) }
		if req.GetDryRun() {
			// A timed plan has no preview: only its steps' bake times.
			cur, rev, err := s.store.Config(ctx, component, version)
			if err != nil {
				return nil, s.storeError("read component config "+req.GetVersion(), err)
			}
			next, err := apply(cur)
			if err != nil {
				return nil, domainError(err)
			}
			return &adminv1.SetPlanResponse{ComponentConfig: configProto(next, rev), DryRun: true}, nil
		}
		c, _, err := s.changeConfig(ctx, actor, ActionPlan, req.GetVersion(), req.GetIfRevision(), req.GetReason(), apply)
		if err != nil {
			return nil, err
		}
		return &adminv1.SetPlanResponse{ComponentConfig: c}, nil
	}
	// A canary scoped to every subscription is spread over those its base
	// was seen in, as over a scope that lists them.
	if p.HasCanary() {
		seen, err := s.seenNodesOf(ctx, req.GetVersion())
		if err != nil {
			return nil, err
		}
		p.SpreadOver = p.SpreadCount(seen)
	}
	apply := func(r rollout.Release) (rollout.Release, error) {
		q := p
		if len(r.Rollout.Subscriptions) > 0 {
			q.SpreadOver = 0 // the scope's list spreads it
		}
		return r.SetPlan(q, now)
	}
	if req.GetDryRun() {
		cur, rev, err := s.current(ctx, req.GetVersion(), req.GetIfRevision())
		if err != nil {
			return nil, err
		}
		next, err := apply(cur)
		if err != nil {
			return nil, domainError(err)
		}
		// Judged as the plan itself is (change).
		why, _, err := s.judge(cur, next, s.now())
		if err != nil {
			return nil, err
		}
		pv, err := s.preview(ctx, next)
		if err != nil {
			return nil, err
		}
		return &adminv1.SetPlanResponse{Release: toProto(next, rev), DryRun: true, Preview: pv, NeedsApproval: why}, nil
	}
	var planned rollout.Release
	r, _, err := s.change(ctx, actor, ActionPlan, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		next, err := apply(r)
		planned = next
		return next, err
	})
	if err != nil {
		return nil, err
	}
	// The plan is in place: a preview that cannot be read (logged by
	// storeError) must not make it look refused.
	pv, _ := s.preview(ctx, planned)
	return &adminv1.SetPlanResponse{Release: r, Preview: pv}, nil
}

// preview says what r's plan will do from its current step, judged
// against the incumbent the store's releases give r's base now.
func (s *Server) preview(ctx context.Context, r rollout.Release) (*adminv1.PlanPreview, error) {
	p := r.Rollout.Plan
	if p == nil {
		return nil, nil
	}
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return nil, s.storeError("list releases", err)
	}
	incumbent := tally.Incumbent(rels, r, s.now())
	out := &adminv1.PlanPreview{Baseline: &adminv1.Baseline{
		MaxFailureRate:  p.MaxFailureRate,
		Margin:          p.Margin,
		Floor:           int32(p.Floor()),
		ComparedWith:    comparedWith(r.Base, incumbent),
		Incumbent:       incumbent,
		MaxSilentRate:   p.SilentCeiling(),
		MaxDeliveryRate: p.DeliveryCeiling(),
	}}
	wait := p.StepDeadline().Sub(p.Due())
	for _, w := range p.Schedule() {
		sw := &adminv1.StepWindow{}
		if !w.Start.IsZero() {
			sw.EarliestStart, sw.EarliestEnd, sw.Deadline = timestamppb.New(w.Start), timestamppb.New(w.End), timestamppb.New(w.End.Add(wait))
			out.EarliestComplete = sw.EarliestEnd
		}
		out.Steps = append(out.Steps, sw)
	}
	return out, nil
}

// comparedWith says, for people, what a release of base is judged against
// besides its plan's ceilings, incumbent being tally.Incumbent's answer.
func comparedWith(base, incumbent string) string {
	what := "the baked agent"
	if incumbent != tally.IncumbentBaked {
		what = incumbent + ", its previous complete hotfix"
	}
	return fmt.Sprintf("the incumbent of base %s (as of now %s), measured on that base's nodes not served this release, from their reports of the last %g h, or its whole record when those are too few",
		base, what, tally.BaselineWindow.Hours())
}

// SkipStep moves a rolling release past its plan's current step
// (rollout.Release.Skip), audited as "skip". A reason is required;
// FailedPrecondition when there is no step to skip to.
func (s *Server) SkipStep(ctx context.Context, req *adminv1.SkipStepRequest) (*adminv1.SkipStepResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetReason()) == "" {
		return nil, status.Error(codes.InvalidArgument, "reason is required: a skip gives up the step's evidence, so the audit log says why")
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if err := s.checkFrozen(ctx, "skip "+req.GetVersion()); err != nil {
		return nil, err
	}
	now := s.now()
	var left int
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, _, err := s.changeConfig(ctx, actor, ActionSkip, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			next, from, err := c.Skip(now)
			left = from
			return next, err
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.SkipStepResponse{ComponentConfig: c, SkippedStep: int32(left)}, nil
	}
	r, _, err := s.change(ctx, actor, ActionSkip, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		next, from, err := r.Skip(now)
		left = from
		return next, err
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.SkipStepResponse{Release: r, SkippedStep: int32(left)}, nil
}

func planFromProto(pp *adminv1.Plan) (rollout.Plan, error) {
	if pp == nil {
		return rollout.Plan{}, errors.New("no plan")
	}
	p := rollout.Plan{Margin: pp.GetMargin(), MaxFailureRate: pp.GetMaxFailureRate(), Timed: pp.GetTimed()}
	if s := pp.GetSilentAfterSeconds(); s < 0 || s > int64(24*time.Hour/time.Second) {
		return p, fmt.Errorf("silent after %d s out of range", s)
	}
	p.SilentAfter = time.Duration(pp.GetSilentAfterSeconds()) * time.Second
	if d := pp.GetDeadlineSeconds(); d < 0 || d > int64(30*24*time.Hour/time.Second) {
		return p, fmt.Errorf("deadline %d s out of range", d)
	}
	p.Deadline = time.Duration(pp.GetDeadlineSeconds()) * time.Second
	p.MaxSilentRate, p.MaxDeliveryRate = pp.GetMaxSilentRate(), pp.GetMaxDeliveryRate()
	for _, st := range pp.GetSteps() {
		if b := st.GetBakeSeconds(); b < 0 || b > int64(30*24*time.Hour/time.Second) {
			return p, fmt.Errorf("bake %d s out of range", b)
		}
		p.Steps = append(p.Steps, rollout.PlanStep{Percent: int(st.GetPercent()), Nodes: int(st.GetNodes()), Bake: time.Duration(st.GetBakeSeconds()) * time.Second, MinReports: int(st.GetMinReports())})
	}
	return p, p.Validate()
}

func planToProto(p *rollout.Plan) *adminv1.Plan {
	if p == nil {
		return nil
	}
	out := &adminv1.Plan{Margin: p.Margin, MaxFailureRate: p.MaxFailureRate, Step: int32(p.Step), StepSince: timestamppb.New(p.StepSince), SilentAfterSeconds: int64(p.SilenceDeadline() / time.Second),
		MaxSilentRate: p.SilentCeiling(), MaxDeliveryRate: p.DeliveryCeiling(), DeadlineSeconds: int64(p.StepDeadline().Sub(p.Due()) / time.Second)}
	if p.Timed {
		// Nothing reports on a timed plan, so it has no silent-after,
		// ceilings or deadline.
		out.Timed = true
		out.SilentAfterSeconds, out.MaxSilentRate, out.MaxDeliveryRate, out.DeadlineSeconds = 0, 0, 0, 0
	}
	for _, st := range p.Steps {
		out.Steps = append(out.Steps, &adminv1.PlanStep{Percent: int32(st.Percent), Nodes: int32(st.Nodes), BakeSeconds: int64(st.Bake / time.Second), MinReports: int32(st.MinReports)})
	}
	return out
}
