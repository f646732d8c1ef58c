package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
)

// SetRollout grows a release's percentage and optionally replaces its
// scope; a draft starts rolling (rollout.Release.SetScope says what each
// state allows). InvalidArgument for a scope value that is not a GUID or
// region label, or a bad reason; FailedPrecondition for a decrease, a
// percentage change while paused, or a halted or revoked release.
func (s *Server) SetRollout(ctx context.Context, req *adminv1.SetRolloutRequest) (*adminv1.SetRolloutResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	pct := req.GetPercent()
	if pct < 0 || pct > 100 {
		return nil, status.Errorf(codes.InvalidArgument, "percent %d out of range 0..100", pct)
	}
	if err := s.checkFrozen(ctx, "rollout set "+req.GetVersion()); err != nil {
		return nil, err
	}
	var subs, regions []string
	if req.GetSetSubscriptions() {
		if subs = req.GetSubscriptions(); subs == nil {
			subs = []string{}
		}
	}
	if req.GetSetRegions() {
		if regions = req.GetRegions(); regions == nil {
			regions = []string{}
		}
	}
	var envs []string
	if req.GetSetDeployEnvs() {
		if envs = req.GetDeployEnvs(); envs == nil {
			envs = []string{}
		}
	}
	for _, l := range [][]string{subs, regions, envs} {
		if err := checkIDs(l); err != nil {
			return nil, err
		}
	}
	if err := rollout.CheckScope(subs, regions); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := rollout.CheckDeployEnvs(envs); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.checkSeen(ctx, subs, regions, req.GetAllowUnseen()); err != nil {
		return nil, err
	}
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, same, err := s.changeConfig(ctx, actor, ActionRolloutSet, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			p := int(pct)
			if req.GetKeepPercent() {
				p = c.Rollout.Percent
			}
			c, err := c.SetScope(p, subs, regions)
			if err != nil {
				return c, err
			}
			return c.SetDeployEnvs(envs)
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.SetRolloutResponse{ComponentConfig: c, Unchanged: same}, nil
	}
	// A planned canary's scope widened from a list to every subscription
	// is spread over those its base was seen in, as SetPlan spreads one,
	// so that widening a scope never drops the per-subscription bound.
	// The nodes are read before the change; whether it widens, and the
	// plan counted, are the change's own (it may retry on a newer record).
	var seen map[string]int
	if subs != nil {
		if seen, err = s.seenNodesOf(ctx, req.GetVersion()); err != nil {
			return nil, err
		}
	}
	r, same, err := s.change(ctx, actor, ActionRolloutSet, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		p := int(pct)
		if req.GetKeepPercent() {
			p = r.Rollout.Percent
		}
		listed := len(r.Rollout.Subscriptions) > 0
		r, err := r.SetScope(p, subs, regions)
		if err != nil {
			return r, err
		}
		if pl := r.Rollout.Plan; pl != nil {
			q := *pl
			switch {
			case len(r.Rollout.Subscriptions) > 0:
				q.SpreadOver = 0 // the scope's list spreads it
			case listed:
				q.SpreadOver = q.SpreadCount(seen)
			}
			r.Rollout.Plan = &q
		}
		return r.SetDeployEnvs(envs)
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.SetRolloutResponse{Release: r, Unchanged: same}, nil
}

func checkIDs(ids []string) error {
	if len(ids) > maxScopeEntries {
		return status.Errorf(codes.InvalidArgument, "%d scope entries, at most %d", len(ids), maxScopeEntries)
	}
	for _, id := range ids {
		if len(id) > maxIDLength {
			return status.Errorf(codes.InvalidArgument, "scope entry longer than %d bytes", maxIDLength)
		}
	}
	return nil
}

// actionStates maps each transition to its audit action and target state.
var actionStates = map[adminv1.Action]struct {
	name string
	to   rollout.State
}{
	adminv1.Action_ACTION_PAUSE:    {ActionPause, rollout.Paused},
	adminv1.Action_ACTION_RESUME:   {ActionResume, rollout.Rolling},
	adminv1.Action_ACTION_HALT:     {ActionHalt, rollout.Halted},
	adminv1.Action_ACTION_COMPLETE: {ActionComplete, rollout.Complete},
}

// Transition pauses, resumes, halts or completes a rollout.
// FailedPrecondition for a move the state machine does not allow.
func (s *Server) Transition(ctx context.Context, req *adminv1.TransitionRequest) (*adminv1.TransitionResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	a, ok := actionStates[req.GetAction()]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "action %v: want pause, resume, halt or complete", req.GetAction())
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	already := false
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, _, err := s.changeConfig(ctx, actor, a.name, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			if c.Rollout.State == a.to && !c.Revoked {
				already = true
				return c, nil
			}
			if err := s.checkStart(ctx, a.name, req.GetVersion(), a.to); err != nil {
				return c, err
			}
			if a.to == rollout.Rolling {
				return c.Resume(s.now())
			}
			return c.Transition(a.to)
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.TransitionResponse{ComponentConfig: c, Unchanged: already}, nil
	}
	r, _, err := s.change(ctx, actor, a.name, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		// A transition to the state the release is in is done already,
		// not refused: a retried pause must not look like a failure.
		if r.Rollout.State == a.to && !r.Revoked {
			already = true
			return r, nil
		}
		if err := s.checkStart(ctx, a.name, req.GetVersion(), a.to); err != nil {
			return r, err
		}
		if a.to == rollout.Rolling {
			return r.Resume(s.now())
		}
		return r.Transition(a.to)
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.TransitionResponse{Release: r, Unchanged: already}, nil
}

// Revoke marks a release revoked. Revoking a revoked release changes
// nothing and says so (unchanged). A stale if_revision is Aborted.
func (s *Server) Revoke(ctx context.Context, req *adminv1.RevokeRequest) (*adminv1.RevokeResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, same, err := s.changeConfig(ctx, actor, ActionRevoke, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			c.Revoked = true
			return c, nil
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.RevokeResponse{ComponentConfig: c, Unchanged: same}, nil
	}
	r, same, err := s.change(ctx, actor, ActionRevoke, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		r.Revoked = true
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.RevokeResponse{Release: r, Unchanged: same}, nil
}
