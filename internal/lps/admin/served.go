package admin

import (
	"fmt"
	"strings"
	"time"

	"nodehotfix/internal/assess"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/rollout"
)

// FailureRateDefinition says how a release's failure rate is counted,
// beside the served-now table that shows it.
const FailureRateDefinition = "failure rate = (failed + fell back + refused as signed) / judged nodes (every node served the release, one per vmId by its worst outcome, less pending and not applicable): what the health rule judges; fell back is part of it"

// servedNow is what the nodes of each base get now: for every base of the
// serving snapshot, rollout.ServedNow over its releases at the places the
// replicas serve from (the one decision explain and the node service make,
// taken for a part of the fleet), with each release's canary seat
// holders from the snapshot, and its fallbacks and failure rate from the
// fleet's tally (fleet).
func servedNow(snap *lps.Snapshot, at []rollout.Place, fleet assess.Fleet) []*adminv1.ServedBase {
	if snap == nil {
		return nil
	}
	byVersion := map[string]rollout.Release{}
	for _, r := range snap.Releases {
		byVersion[r.Version] = r
	}
	var out []*adminv1.ServedBase
	for _, base := range rollout.Bases(snap.Releases) {
		cohorts, omitted := rollout.ServedNow(snap.Releases, base, at, fleet.Now)
		sb := &adminv1.ServedBase{Base: base, OmittedCohorts: int32(omitted)}
		scoped := false
		for _, c := range cohorts {
			scoped = scoped || len(c.Subscriptions) > 0
		}
		for _, c := range cohorts {
			pc := &adminv1.ServedCohort{Subscriptions: c.Subscriptions, OtherSubscriptions: c.Subscriptions == nil}
			for _, p := range c.Places {
				pc.Places = append(pc.Places, &adminv1.Place{Region: p.Region, DeployEnv: p.DeployEnv})
			}
			pc.Nodes = cohortText(c, scoped)
			for _, sh := range c.Shares {
				r := byVersion[sh.Version]
				ps := &adminv1.ServedShare{Version: sh.Version, State: string(sh.State), Fraction: sh.Fraction, Role: sh.Role, Instead: sh.Instead}
				if sh.Version != "" {
					n := fleet.Releases[sh.Version].Counts
					ps.FellBack, ps.Failures, ps.Judged = n.Fallback, n.Failures(), n.Judged()
					if sh.Role == rollout.RoleCandidate || sh.Role == rollout.RoleCanary {
						ps.CanarySeats = int32(len(snap.Seats[sh.Version]))
					}
				}
				ps.Why = why(sh, r, ps.CanarySeats, fleet.Now)
				pc.Shares = append(pc.Shares, ps)
			}
			sb.Cohorts = append(sb.Cohorts, pc)
		}
		out = append(out, sb)
	}
	return out
}

// cohortText names a cohort's nodes: its subscriptions (the others, when
// some cohort of the base is scoped) and the labels of the replicas
// serving them. Callers quote it for their medium.
func cohortText(c rollout.Cohort, scoped bool) string {
	subs := "all subscriptions"
	switch {
	case len(c.Subscriptions) > 3:
		subs = fmt.Sprintf("subscriptions %s and %d more", strings.Join(c.Subscriptions[:3], ","), len(c.Subscriptions)-3)
	case len(c.Subscriptions) > 0:
		subs = "subscriptions " + strings.Join(c.Subscriptions, ",")
	case scoped:
		subs = "other subscriptions"
	}
	var at []string
	for _, p := range c.Places {
		l := p.Region
		if l == "" {
			l = "(no region)"
		}
		if p.DeployEnv != "" {
			l += "/" + p.DeployEnv
		}
		at = append(at, l)
	}
	return subs + " @ " + strings.Join(at, ",")
}

// why says, for people, why a cohort gets sh of release r (the zero
// Release for the baked agent).
func why(sh rollout.Share, r rollout.Release, seats int32, now time.Time) string {
	instead := "the baked agent"
	if sh.Instead != "" {
		instead = sh.Instead
	}
	held := ""
	if seats > 0 {
		held = fmt.Sprintf(", and its %d canary seat holders", seats)
	}
	reason := ""
	if r.Rollout.Reason != "" {
		reason = " (" + r.Rollout.Reason + ")"
	}
	switch sh.Role {
	case rollout.RoleIncumbent:
		return "complete: every node in scope no newer release takes"
	case rollout.RoleCandidate:
		s := fmt.Sprintf("%s at %d%% of the nodes in scope no newer release takes%s", r.Rollout.State, r.Rollout.Percent, held)
		if p := r.Rollout.Plan; p != nil && p.Step < len(p.Steps) {
			s += fmt.Sprintf("; plan step %d/%d", p.Step+1, len(p.Steps))
		}
		if r.Rollout.State == rollout.Paused {
			s += "; paused" + reason + ": grows no more"
		}
		return s
	case rollout.RoleCanary:
		p := r.Rollout.Plan
		return fmt.Sprintf("a canary of %d nodes: only its seat holders (%d held)%s; the rest get %s", p.Current().Nodes, seats, reason, instead)
	case rollout.RoleSuperseded:
		return fmt.Sprintf("superseded: %s serves every node it would", instead)
	case rollout.RoleOutOfScope:
		last := sh.Rules[len(sh.Rules)-1]
		return fmt.Sprintf("not these nodes (%s: %s): they get %s", last.Rule, last.Detail, instead)
	case rollout.RoleExpired:
		return fmt.Sprintf("expired at %s (its envelope's not_after): served to none; these nodes get %s", r.NotAfter.UTC().Format(time.RFC3339), instead)
	case rollout.RoleRevoked:
		return fmt.Sprintf("revoked: served to none, staged copies removed; these nodes get %s", instead)
	case rollout.RoleBaked:
		if sh.Fraction == 0 {
			return "every node gets a release"
		}
		return "no release is served to these nodes: they run the baked agent"
	case string(rollout.Halted):
		return fmt.Sprintf("halted%s: serves none; its nodes get %s", reason, instead)
	case string(rollout.Draft):
		return fmt.Sprintf("draft: not rolled out; these nodes get %s", instead)
	}
	return strings.TrimSpace(sh.Role)
}
