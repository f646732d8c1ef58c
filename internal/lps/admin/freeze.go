package admin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Audit actions of the fleet-wide freeze, and its audit target.
const (
	ActionFreeze   = "freeze"
	ActionUnfreeze = "unfreeze"
	FreezeTarget   = "fleet"
)

// ReasonFrozen is the ErrorInfo reason of a change refused because every
// rollout is frozen. Metadata: "actor" and "since" (RFC 3339) of the
// freeze.
const ReasonFrozen = "FROZEN"

// SetFreeze freezes or thaws every rollout.
func (s *Server) SetFreeze(ctx context.Context, req *adminv1.SetFreezeRequest) (*adminv1.SetFreezeResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetReason()) == "" {
		return nil, status.Error(codes.InvalidArgument, "reason is required: a freeze holds every rollout, so the audit log says why")
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	fz, ok := s.store.(store.Freezer)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "this store cannot keep a freeze")
	}
	cur, rev, err := fz.Freeze(ctx)
	var ue *store.UnreadableError
	unreadable := errors.As(err, &ue)
	if err != nil && !unreadable {
		return nil, s.storeError("read the freeze", err)
	}
	if want := req.GetIfRevision(); (want != 0 || req.GetCheckRevision()) && want != rev {
		return nil, freezeConflict(want)
	}
	if cur.Frozen == req.GetFrozen() && !unreadable {
		return &adminv1.SetFreezeResponse{Freeze: freezeProto(cur, rev), Unchanged: true}, nil
	}
	now := s.now()
	next := store.Freeze{Frozen: req.GetFrozen(), Reason: req.GetReason(), Actor: actor, Since: now}
	action := ActionUnfreeze
	if next.Frozen {
		action = ActionFreeze
	}
	e := store.AuditEntry{Time: now, Actor: actor, Action: action, Target: FreezeTarget, Reason: req.GetReason()}
	if e.Before, err = json.Marshal(cur); err != nil {
		return nil, s.internal("encode the freeze", err)
	}
	if e.After, err = json.Marshal(next); err != nil {
		return nil, s.internal("encode the freeze", err)
	}
	newRev, err := fz.PutFreeze(ctx, next, rev, e)
	if errors.Is(err, store.ErrConflict) && req.GetIfRevision() == 0 && !req.GetCheckRevision() {
		// Another operator froze (or thawed) at once: done, if it is
		// what this one asked for.
		if now, nowRev, rerr := fz.Freeze(ctx); rerr == nil && now.Frozen == next.Frozen {
			return &adminv1.SetFreezeResponse{Freeze: freezeProto(now, nowRev), Unchanged: true}, nil
		}
	}
	if errors.Is(err, store.ErrConflict) {
		return nil, freezeConflict(rev)
	}
	if err != nil {
		return nil, s.storeError(action, err)
	}
	s.log.Info("fleet-wide freeze changed", "action", action, "actor", actor, "revision", newRev)
	return &adminv1.SetFreezeResponse{Freeze: freezeProto(next, newRev)}, nil
}

// freeze returns the stored freeze and its revision; a store that cannot
// keep one is never frozen. A record nobody can read is frozen (the store
// says so): it must not let rollouts advance.
func (s *Server) freeze(ctx context.Context) (store.Freeze, int64, error) {
	fz, ok := s.store.(store.Freezer)
	if !ok {
		return store.Freeze{}, 0, nil
	}
	f, rev, err := fz.Freeze(ctx)
	if ue := (*store.UnreadableError)(nil); errors.As(err, &ue) {
		err = nil
	}
	if err != nil {
		return store.Freeze{}, 0, s.storeError("read the freeze", err)
	}
	return f, rev, nil
}

// checkFrozen refuses what (a change that starts or advances a rollout)
// while every rollout is frozen.
func (s *Server) checkFrozen(ctx context.Context, what string) error {
	f, _, err := s.freeze(ctx)
	if err != nil || !f.Frozen {
		return err
	}
	since := f.Since.UTC().Format(time.RFC3339)
	return withInfo(status.Newf(codes.FailedPrecondition, "%s refused: every rollout is frozen (since %s, by %s: %q); halts, pauses and revocations go on; thaw with lpsctl unfreeze --reason TEXT",
		what, since, f.Actor, f.Reason), ReasonFrozen, map[string]string{"actor": f.Actor, "since": since})
}

func freezeConflict(rev int64) error {
	return status.Errorf(codes.Aborted, "the freeze changed since revision %d (a concurrent change won); re-read it (lpsctl status) and retry", rev)
}

func freezeProto(f store.Freeze, rev int64) *adminv1.Freeze {
	p := &adminv1.Freeze{Frozen: f.Frozen, Reason: f.Reason, Actor: f.Actor, Revision: rev}
	if !f.Since.IsZero() {
		p.Since = timestamppb.New(f.Since)
	}
	return p
}

// checkStart refuses, while frozen, a transition (action, to state to)
// that starts or advances version's rollout: resume and complete.
func (s *Server) checkStart(ctx context.Context, action, version string, to rollout.State) error {
	if to != rollout.Rolling && to != rollout.Complete {
		return nil
	}
	return s.checkFrozen(ctx, action+" "+version)
}
