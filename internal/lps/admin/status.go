package admin

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/assess"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// Status lists every release (in the store's version order) with its revision, this instance's request
// counts and the serving snapshot's revision.
func (s *Server) Status(ctx context.Context, _ *adminv1.StatusRequest) (*adminv1.StatusResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return nil, s.storeError("list releases", err)
	}
	now := s.now()
	resp := &adminv1.StatusResponse{Region: s.region, Policy: policyProto(s.policy, s.window)}
	if _, ok := s.store.(store.Freezer); ok {
		f, rev, err := s.freeze(ctx)
		if err != nil {
			return nil, err
		}
		resp.Freeze = freezeProto(f, rev)
	}
	var read []rollout.Release // per resp.Releases entry
	// Releases carries no per-record revision; read each record so the
	// revision shown is the one a compare-and-swap must name.
	for _, listed := range rels {
		r, rev, err := s.store.Release(ctx, listed.Version)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, s.storeError("read release "+listed.Version, err)
		}
		p := toProto(r, rev)
		p.Rollout.Approval = s.approvalProto(r, now)
		resp.Releases = append(resp.Releases, p)
		read = append(read, r)
	}
	fleet, err := assess.Assess(ctx, s.evidence, read, now)
	if err != nil {
		return nil, s.storeError("assess releases", err)
	}
	t := fleet.Tally
	var served map[string]uint64
	if s.served != nil {
		served = s.served()
	}
	for i, r := range resp.Releases {
		r.Served = served[r.Version]
		a := fleet.Releases[r.Version]
		r.Counts = countsProto(a.Counts)
		r.Rollout.CanarySeats = int32(a.Counts.Seated)
		if p := read[i].Rollout.Plan; p != nil {
			r.Rollout.Health = healthProto(a.Verdict, *p)
		}
	}
	for _, base := range slices.Sorted(maps.Keys(t.Control)) {
		resp.Control = append(resp.Control, &adminv1.ControlCohort{Base: base, Counts: countsProto(t.Control[base])})
	}
	if s.counts != nil {
		for outcome, n := range s.counts() {
			resp.Requests = append(resp.Requests, &adminv1.OutcomeCount{Outcome: outcome, Count: n})
		}
		slices.SortFunc(resp.Requests, func(a, b *adminv1.OutcomeCount) int { return cmp.Compare(a.Outcome, b.Outcome) })
	}
	hs, err := s.replicas(ctx)
	if err != nil {
		return nil, err
	}
	resp.Replicas = replicasProto(hs, s.replicaID, now, fleet.Clocks)
	snap := s.currentSnapshot()
	if snap != nil {
		resp.SnapshotRevision = snap.Revision
		resp.SnapshotTime = timestamppb.New(snap.Built)
	}
	resp.ServedNow, resp.FailureRateDefinition = servedNow(snap, places(hs), fleet), FailureRateDefinition
	if err := s.statusConfigs(ctx, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func countsProto(c tally.Counts) *adminv1.Counts {
	return &adminv1.Counts{Reported: c.Reported(), Ok: c.OK, Failed: c.Failed, Fallback: c.Fallback, Silent: c.Silent,
		RefusedIntegrity: c.RefusedIntegrity, RefusedDelivery: c.RefusedDelivery, NotApplicable: c.NotApplicable, Pending: c.Pending}
}

// CountsOf reads the API's counts back into the tally's (countsProto's
// inverse), so clients compute rates as the rule does.
func CountsOf(c *adminv1.Counts) tally.Counts {
	return tally.Counts{OK: c.GetOk(), Failed: c.GetFailed(), Fallback: c.GetFallback(), RefusedIntegrity: c.GetRefusedIntegrity(),
		RefusedDelivery: c.GetRefusedDelivery(), NotApplicable: c.GetNotApplicable(), Silent: c.GetSilent(), Pending: c.GetPending()}
}

func healthProto(v regression.Verdict, p rollout.Plan) *adminv1.Health {
	return &adminv1.Health{Verdict: v.Health, Rule: v.Rule, Reason: v.Reason, Detail: v.Detail, NextDue: timestamppb.New(p.Due()),
		BaselineIncumbent: v.Baseline.Incumbent, BaselineRecorded: v.Baseline.Recorded, Baseline: countsProto(v.Baseline.Counts),
		Deadline: timestamppb.New(p.StepDeadline())}
}
