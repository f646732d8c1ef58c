package rollout

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/hotfix"
)

// Place is where nodes are served from: a serving replica's labels (lpsd
// --region, --deploy-env), which region and deploy-environment scopes
// match.
type Place struct {
	Region    string `json:"region"`
	DeployEnv string `json:"deploy_env"`
}

// Roles of a release in what a cohort is served (Share.Role).
const (
	// RoleIncumbent: complete, it serves every node in scope that no newer
	// release takes.
	RoleIncumbent = "incumbent"
	// RoleCandidate: rolling or paused, it serves its percentage of the
	// nodes no newer release takes.
	RoleCandidate = "candidate"
	// RoleCanary: at a canary step, it serves its seat holders only.
	RoleCanary = "canary"
	// RoleSuperseded: it would serve, but a newer release serves every
	// node it would.
	RoleSuperseded = "superseded"
	// RoleOutOfScope: its subscription, region or deploy-environment
	// scope leaves the cohort out.
	RoleOutOfScope = "out-of-scope"
	// RoleRevoked, RoleExpired: served to no node, for good.
	RoleRevoked = "revoked"
	RoleExpired = "expired"
	// RoleBaked: the baked agent, for the nodes no release is served to.
	RoleBaked = "baked"
)

// Share is the part of a cohort's nodes one release of its base is served
// now, and why.
type Share struct {
	// Version is the release's; "" is the baked agent (Role RoleBaked).
	Version string
	// State is the release's rollout state; "" for the baked agent.
	State State
	// Fraction of the cohort's nodes that get it, 0 to 1: Covers of the
	// nodes no newer release took.
	Fraction float64
	// Covers is the fraction of the cohort's nodes its own rules include,
	// newer releases aside: 1 (complete, or 100%), its percentage's
	// buckets, or 0.
	Covers float64
	// Role is one of the Role constants, or a state that serves nobody
	// (draft, halted).
	Role string
	// Rules are the decision's rules for the cohort (Includes' rules but
	// the node's own bucket), to the first that refused it.
	Rules []Rule
	// Instead is, for a release that gets none of the cohort (Fraction 0),
	// the version that does in its place: for a superseded one the newer
	// release taking all its nodes, for any other the one serving the
	// largest share of the cohort below it, "" for the baked agent.
	Instead string
}

// Cohort is a set of a base's nodes every rollout of the base treats
// alike, and what they get now.
type Cohort struct {
	// Subscriptions are the cohort's, named alike by the base's serving
	// rollouts; nil: every subscription none of them names (every
	// subscription, when none is scoped).
	Subscriptions []string
	// Places are the places (serving replicas' labels) whose nodes of
	// these subscriptions get the same shares.
	Places []Place
	// Shares are every release of the base, newest first, then the baked
	// agent; their fractions sum to 1.
	Shares []Share
}

// maxCohorts bounds the cohorts ServedNow returns for one base: each is
// a distinct set of subscriptions the rollouts name, a handful in
// practice, and a status page must stay bounded whatever the scopes.
const maxCohorts = 64

// ServedNow returns what the nodes of base, served from places (one
// unlabelled place when none), get at now, cohort by cohort, by the rules
// Select decides one node by: each release serves the part of the nodes
// its rules include (its percentage by hash bucket, which is independent
// across releases) of those no newer release of the base took, and the
// rest run the baked agent. Canary seat holders are not counted: they are
// nodes, not a part of the fleet. At most maxCohorts are returned; omitted
// counts the rest.
func ServedNow(releases []Release, base string, places []Place, now time.Time) (cohorts []Cohort, omitted int) {
	rels := ofBase(releases, base)
	if len(places) == 0 {
		places = []Place{{}}
	}
	for _, subs := range subscriptionCohorts(rels, now) {
		if len(cohorts) == maxCohorts {
			omitted++
			continue
		}
		var here []Cohort
		for _, p := range places {
			sub := ""
			if len(subs) > 0 {
				sub = subs[0]
			}
			n := Node{SubscriptionID: sub, Region: p.Region, DeployEnv: p.DeployEnv, Base: base, Now: now}
			sh := shares(rels, n)
			i := slices.IndexFunc(here, func(c Cohort) bool { return sameShares(c.Shares, sh) })
			if i < 0 {
				here = append(here, Cohort{Subscriptions: subs, Shares: sh})
				i = len(here) - 1
			}
			here[i].Places = append(here[i].Places, p)
		}
		cohorts = append(cohorts, here...)
	}
	return cohorts, omitted
}

// SharesFor returns what the nodes of base in subscription (one no scope
// names: "") served from place get at now, as ServedNow does for a
// cohort.
func SharesFor(releases []Release, base, subscription string, place Place, now time.Time) []Share {
	return shares(ofBase(releases, base), Node{SubscriptionID: subscription, Region: place.Region, DeployEnv: place.DeployEnv, Base: base, Now: now})
}

// ofBase returns the releases of base, newest first: the highest patch
// that includes a node is its answer.
func ofBase(releases []Release, base string) []Release {
	var rels []Release
	for _, r := range releases {
		if v, err := hotfix.ParseVersion(r.Version); err == nil && v.Base() == base {
			rels = append(rels, r)
		}
	}
	slices.SortFunc(rels, func(a, b Release) int { return Compare(b, a) })
	return rels
}

// subscriptionCohorts splits the subscriptions the serving rollouts of
// rels name into sets each named by exactly the same rollouts, in the
// order of their first subscription, and ends with nil: every other
// subscription.
func subscriptionCohorts(rels []Release, now time.Time) [][]string {
	by := map[string][]string{} // the versions naming it -> its subscriptions
	for _, r := range rels {
		if r.Revoked || r.Expired(now) || len(r.Rollout.Subscriptions) == 0 {
			continue
		}
		for _, s := range r.Rollout.Subscriptions {
			by[s] = append(by[s], r.Version)
		}
	}
	groups := map[string][]string{}
	for s, versions := range by {
		key := strings.Join(versions, ",")
		groups[key] = append(groups[key], s)
	}
	out := make([][]string, 0, len(groups)+1)
	for _, subs := range groups {
		slices.Sort(subs)
		out = append(out, subs)
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return append(out, nil)
}

// shares returns what nodes like n (a node but for its vmId and seats) get
// of rels, newest first, then the baked agent.
func shares(rels []Release, n Node) []Share {
	out := make([]Share, 0, len(rels)+1)
	left := 1.0 // the part of the nodes no newer release took
	takenBy := ""
	for _, r := range rels {
		rules, decided, ok, limit := r.gate(n, true)
		sh := Share{Version: r.Version, State: r.Rollout.State, Rules: rules}
		switch {
		case decided && ok:
			sh.Covers = 1
		case !decided:
			sh.Covers = float64(limit) / Buckets
		}
		sh.Fraction = left * sh.Covers
		left -= sh.Fraction
		sh.Role = role(r, rules, sh)
		if sh.Role == RoleSuperseded {
			sh.Instead = takenBy
		}
		if sh.Covers == 1 && takenBy == "" {
			takenBy = r.Version
		}
		out = append(out, sh)
	}
	out = append(out, Share{Fraction: max(left, 0), Covers: 1, Role: RoleBaked})
	for i := range out {
		if out[i].Fraction == 0 && out[i].Role != RoleSuperseded && out[i].Role != RoleBaked {
			out[i].Instead = largestBelow(out[i+1:])
		}
	}
	return out
}

// role names what r is to the cohort its gate judged by rules.
func role(r Release, rules []Rule, sh Share) string {
	last := rules[len(rules)-1]
	switch {
	case sh.Covers > 0 && sh.Fraction == 0:
		return RoleSuperseded
	case last.Passed && r.Rollout.State == Complete:
		return RoleIncumbent
	case last.Passed:
		return RoleCandidate
	case last.Rule == RuleCanarySeat:
		return RoleCanary
	case last.Rule == "not-revoked":
		return RoleRevoked
	case last.Rule == RuleNotExpired:
		return RoleExpired
	case last.Rule == RuleStateServing:
		return string(r.Rollout.State)
	}
	return RoleOutOfScope
}

// largestBelow returns the version of the largest share of shs (ties: the
// newer), "" for the baked agent.
func largestBelow(shs []Share) string {
	best := -1
	for i, s := range shs {
		if best < 0 || s.Fraction > shs[best].Fraction {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return shs[best].Version
}

// sameShares reports whether a and b give the same versions the same
// parts for the same reasons.
func sameShares(a, b []Share) bool {
	return slices.EqualFunc(a, b, func(x, y Share) bool {
		return x.Version == y.Version && x.Fraction == y.Fraction && x.Role == y.Role && x.Instead == y.Instead
	})
}

// Bases returns the bases of releases' valid versions, sorted.
func Bases(releases []Release) []string {
	set := map[string]bool{}
	for _, r := range releases {
		if v, err := hotfix.ParseVersion(r.Version); err == nil {
			set[v.Base()] = true
		}
	}
	return slices.SortedFunc(maps.Keys(set), cmp.Compare[string])
}
