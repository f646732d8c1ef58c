package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Explain evaluates the serving snapshot for one node at the server's
// time, rule by rule (an expired release fails not-expired). The region
// defaults to this instance's. InvalidArgument for a subscription that is
// not a GUID; Unavailable before the first snapshot.
func (s *Server) Explain(ctx context.Context, req *adminv1.ExplainRequest) (*adminv1.ExplainResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	n := rollout.Node{VMID: req.GetVmId(), SubscriptionID: req.GetSubscriptionId(), Region: req.GetRegion(), DeployEnv: req.GetDeployEnv(), Now: s.now()}
	if n.Region == "" {
		n.Region = s.region
	}
	if n.DeployEnv == "" {
		n.DeployEnv = s.env
	}
	for _, f := range []struct{ name, v string }{{"vm_id", n.VMID}, {"subscription_id", n.SubscriptionID}, {"region", n.Region}, {"deploy_env", n.DeployEnv}} {
		switch {
		case f.v == "" && f.name != "region" && f.name != "deploy_env":
			return nil, status.Errorf(codes.InvalidArgument, "%s is required", f.name)
		case len(f.v) > maxIDLength:
			return nil, status.Errorf(codes.InvalidArgument, "%s longer than %d bytes", f.name, maxIDLength)
		}
	}
	// The subscription is compared with scopes, which hold only GUIDs: a
	// typo would explain a node that cannot exist.
	if err := rollout.CheckScope([]string{n.SubscriptionID}, nil); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "subscription_id: %v", err)
	}
	snap := s.currentSnapshot()
	if snap == nil {
		return nil, status.Error(codes.Unavailable, "no serving snapshot yet; retry shortly")
	}
	if c := req.GetComponent(); c != "" && c != lps.Component {
		return s.explainComponent(snap, c, n)
	}
	// Seats as the store has them: the answer is this node's on any
	// replica.
	seats := make(map[string][]store.Seat)
	for _, r := range snap.Releases {
		if !r.HasCanary() {
			continue
		}
		held, err := s.store.Seats(ctx, r.SeatSet())
		if err != nil && !unreadable(err) { // a seat whose time cannot be read is still a seat
			return nil, s.storeError("list canary seats of "+r.Version, err)
		}
		seats[r.Version] = held
		// Attested vmIds are lower case; an operator may type them in any.
		if slices.ContainsFunc(held, func(h store.Seat) bool { return strings.EqualFold(h.VMID, n.VMID) }) {
			n.Seats = append(n.Seats, r.Version)
		}
	}
	decisions, sel := rollout.Explain(snap.Releases, n)
	plans := make(map[string]rollout.Release)
	for _, r := range snap.Releases {
		if r.Rollout.Plan != nil {
			plans[r.Version] = r
		}
	}
	var fleet assess.Fleet
	if len(plans) > 0 {
		var err error
		if fleet, err = assess.Assess(ctx, s.evidence, snap.Releases, s.now()); err != nil {
			return nil, s.storeError("assess releases", err)
		}
	}
	resp := &adminv1.ExplainResponse{}
	for _, d := range decisions {
		pd := &adminv1.Decision{Version: d.Version, Base: d.Base, Included: d.Included, Chosen: d.Chosen}
		for _, r := range d.Rules {
			if r.Rule == rollout.RuleCanarySeat && !r.Passed {
				r.Detail = seatDetail(plans[d.Version], n, seats[d.Version])
			}
			pd.Rules = append(pd.Rules, &adminv1.Rule{Rule: r.Rule, Passed: r.Passed, Detail: r.Detail})
		}
		// A plan's step and the health rule's verdict decide what this
		// node may be offered next: shown, but they do not gate this answer.
		if r, ok := plans[d.Version]; ok {
			v := fleet.Releases[r.Version].Verdict
			pd.Rules = append(pd.Rules,
				&adminv1.Rule{Rule: "plan", Passed: true, Detail: planDetail(r, s.window)},
				&adminv1.Rule{Rule: "health", Passed: v.Health != regression.Regressing, Detail: v.Health + ": " + v.Detail})
		}
		resp.Decisions = append(resp.Decisions, pd)
	}
	if !sel.Empty() {
		ptr, err := sel.Pointer().MarshalJSON()
		if err != nil {
			return nil, s.internal("encode pointer", err)
		}
		resp.PointerJson = string(ptr)
	}
	trust, err := s.baseTrust(ctx, decisions)
	if err != nil {
		return nil, err
	}
	resp.Trust = trust
	return resp, nil
}

// baseTrust says, for each base of decisions, what its nodes verify: the
// newest key set's threshold and log policy for nodes that walk the chain,
// and one signature and no log for images baked before it, with the
// answers this instance gave each kind.
func (s *Server) baseTrust(ctx context.Context, decisions []rollout.Decision) ([]*adminv1.BaseTrust, error) {
	keys, _, err := s.currentKeys(ctx)
	if err != nil && status.Code(err) != codes.FailedPrecondition {
		return nil, err
	}
	var counts map[string]lps.TrustCounts
	if s.trust != nil {
		counts = s.trust()
	}
	var out []*adminv1.BaseTrust
	seen := map[string]bool{}
	for _, d := range decisions {
		if seen[d.Base] {
			continue
		}
		seen[d.Base] = true
		c := counts[d.Base]
		bt := &adminv1.BaseTrust{Base: d.Base, NodesDeclared: c.Declared, NodesLegacy: c.None}
		switch {
		case keys == nil && err != nil:
			bt.Detail = "the key-set chain does not verify now: nodes that walked it refuse every release until the next version is published"
		case keys == nil:
			bt.Detail = "lpsd has no --release-keys: what nodes verify depends only on the key file their image was baked with"
		default:
			bt.KeysetVersion, bt.Threshold, bt.LogRequired = keys.Version(), int32(keys.Threshold()), keys.Log().Required
			log := "no log"
			if bt.LogRequired {
				log = "an inclusion proof under a checkpoint of its witnesses"
			}
			bt.Detail = fmt.Sprintf("nodes that walk the chain to key-set version %d need %d of its %d keys' signatures and %s; images baked before release trust v2 accept one signature by a baked key and know no log", keys.Version(), keys.Threshold(), len(keys.KeyIDs()), log)
		}
		if c.Declared+c.None > 0 {
			bt.Detail += fmt.Sprintf(" (this instance answered %d nodes of %s that declared a key-set version, %d that declared none)", c.Declared, d.Base, c.None)
		}
		out = append(out, bt)
	}
	return out, nil
}

// seatDetail says why a node holds no seat of r's canary, with held of
// them taken, and whether it would take one.
func seatDetail(r rollout.Release, n rollout.Node, held []store.Seat) string {
	limit := r.Rollout.Plan.Current().Nodes
	share := r.SeatsPerSubscription(limit)
	ofSub := 0
	for _, h := range held {
		// A seat the store names no subscription of was taken without
		// the bound (or, on bbolt, by a build older than the names):
		// nobody's share.
		if h.SubscriptionID != "" && strings.EqualFold(h.SubscriptionID, n.SubscriptionID) {
			ofSub++
		}
	}
	switch {
	case r.OpenSeats(n) == 0:
		return fmt.Sprintf("holds none of the canary's %d seats (%d held); the canary hands out none while %s", limit, len(held), r.Rollout.State)
	case len(held) >= limit:
		return fmt.Sprintf("holds none of the canary's %d seats: all are held by other nodes", limit)
	case share > 0 && ofSub >= share:
		return fmt.Sprintf("holds none of the canary's %d seats (%d held): its subscription's nodes hold %d, the most one subscription may (the seats are spread over the scope's subscriptions)", limit, len(held), ofSub)
	default:
		return fmt.Sprintf("holds none of the canary's %d seats (%d held): it takes a free one on its next request", limit, len(held))
	}
}

// planDetail says where a planned release's plan stands and what moves it
// next.
func planDetail(r rollout.Release, w autopilot.Window) string {
	p := r.Rollout.Plan
	at := fmt.Sprintf("step %d/%d at %d%%", p.Step+1, len(p.Steps), r.Rollout.Percent)
	if c := p.Current(); c.Canary() {
		at = fmt.Sprintf("step %d/%d, a canary of %d nodes", p.Step+1, len(p.Steps), c.Nodes)
	}
	switch {
	case r.Revoked:
		return at + "; revoked: the plan no longer runs"
	case r.Rollout.State == rollout.Complete:
		return at + "; complete"
	case r.Rollout.State == rollout.Rolling:
		s := fmt.Sprintf("%s; the next is due %s once %d reports are in", at, p.Due().UTC().Format(time.RFC3339), p.Current().MinReports)
		if w.String() != "" {
			s += ", and advances only " + w.String() + " (lpsd --advance-window)"
		}
		return s
	default:
		return fmt.Sprintf("%s; %s: the plan waits until an operator resumes it", at, r.Rollout.State)
	}
}
