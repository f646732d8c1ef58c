package autopilot

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/rollout"
)

// ExpiryEvidence is an expire entry's evidence: what the nodes of the
// release's base got just before its envelope's not_after and what they
// get now, in each cohort it was served to (rollout.ServedNow, with the
// rollouts as they are at the look).
type ExpiryEvidence struct {
	NotAfter time.Time      `json:"not_after"`
	Cohorts  []ExpiryCohort `json:"cohorts"`
}

// ExpiryCohort is one cohort's before and after.
type ExpiryCohort struct {
	// Subscriptions are the cohort's; none: every subscription no scope
	// of the base names.
	Subscriptions []string        `json:"subscriptions,omitempty"`
	Places        []rollout.Place `json:"places"`
	Before        []Part          `json:"before"`
	After         []Part          `json:"after"`
}

// Part is the part of a cohort one version gets, in percent; version
// "baked" is the baked agent.
type Part struct {
	Version string  `json:"version"`
	Percent float64 `json:"percent"`
}

// maxExpiryPlaces bounds the places one expiry is judged at when they
// come from its own scope: a sentence's worth of regions and environments.
const maxExpiryPlaces = 16

// expiries writes the audit entry of every release whose envelope expired
// while it was served (a serving state, not revoked, a share of some
// cohort of its base just before its not_after) and that has none yet,
// marking it (ExpiryRecorded) in the same compare-and-swap, so that of
// replicas and restarts exactly one writes it.
func (a *Autopilot) expiries(ctx context.Context, rels []rollout.Release, now time.Time) ([]Change, []error) {
	var changes []Change
	var errs []error
	var places []rollout.Place
	placed := false
	// Records stored before releases carried their expiry get it from
	// their envelopes, for this release's test and the shares alike.
	rels = slices.Clone(rels)
	for i := range rels {
		rels[i] = rels[i].WithNotAfter()
	}
	for _, r := range rels {
		serving := r.Rollout.State == rollout.Rolling || r.Rollout.State == rollout.Paused || r.Rollout.State == rollout.Complete
		if r.Revoked || r.ExpiryRecorded || !serving || r.NotAfter.IsZero() || !r.Expired(now) {
			continue
		}
		if !placed && a.cfg.Places != nil {
			places, placed = a.cfg.Places(ctx), true
		}
		at := places
		if len(at) == 0 {
			at = scopePlaces(r)
		}
		ev := ExpiryEvidence{NotAfter: r.NotAfter}
		before, _ := rollout.ServedNow(rels, r.Base, at, r.NotAfter.Add(-time.Nanosecond))
		for _, c := range before {
			if share(c.Shares, r.Version) == 0 {
				continue
			}
			// The places of a cohort got alike before, and its release's
			// expiry is the same everywhere: they get alike after too.
			sub := ""
			if len(c.Subscriptions) > 0 {
				sub = c.Subscriptions[0]
			}
			after := rollout.SharesFor(rels, r.Base, sub, c.Places[0], now)
			ev.Cohorts = append(ev.Cohorts, ExpiryCohort{Subscriptions: c.Subscriptions, Places: c.Places, Before: parts(c.Shares), After: parts(after)})
		}
		if len(ev.Cohorts) == 0 {
			// Served to nobody just before (superseded, out of every
			// place's scope): its expiry changed nothing.
			continue
		}
		c, err := a.change(ctx, r, ActionExpire, func(cur rollout.Release) (rollout.Release, error) {
			cur = cur.WithNotAfter()
			cur.ExpiryRecorded = true
			return cur, nil
		}, ev, func(cur, _ rollout.Release) string { return expiryReason(cur, ev) }, now)
		switch {
		case errors.Is(err, errMoved):
			a.cfg.Log.Info("autopilot left a release that changed meanwhile", "version", r.Version, "action", ActionExpire)
		case err != nil:
			errs = append(errs, err)
		default:
			changes = append(changes, c)
		}
	}
	return changes, errs
}

// scopePlaces are the places r's own region and deploy-environment scopes
// name (an unlabelled place for a dimension it does not scope), at most
// maxExpiryPlaces: r was served nowhere else.
func scopePlaces(r rollout.Release) []rollout.Place {
	regions, envs := r.Rollout.Regions, r.Rollout.DeployEnvs
	if len(regions) == 0 {
		regions = []string{""}
	}
	if len(envs) == 0 {
		envs = []string{""}
	}
	var out []rollout.Place
	for _, reg := range regions {
		for _, env := range envs {
			if len(out) < maxExpiryPlaces {
				out = append(out, rollout.Place{Region: reg, DeployEnv: env})
			}
		}
	}
	return out
}

// share is the fraction of a cohort that version gets of shs.
func share(shs []rollout.Share, version string) float64 {
	for _, s := range shs {
		if s.Version == version {
			return s.Fraction
		}
	}
	return 0
}

// parts are the shares above zero, in percent to a hundredth.
func parts(shs []rollout.Share) []Part {
	var out []Part
	for _, s := range shs {
		if s.Fraction == 0 {
			continue
		}
		v := s.Version
		if v == "" {
			v = rollout.RoleBaked
		}
		out = append(out, Part{Version: v, Percent: math.Round(s.Fraction*10000) / 100})
	}
	return out
}

// expiryReason says, in a line, what r's expiry changed: the part of its
// base's nodes it served just before and what they get now.
func expiryReason(r rollout.Release, ev ExpiryEvidence) string {
	c := ev.Cohorts[0]
	was := 0.0
	for _, p := range c.Before {
		if p.Version == r.Version {
			was = p.Percent
		}
	}
	var now []string
	for _, p := range c.After {
		name := p.Version
		if name == rollout.RoleBaked {
			name = "the baked agent"
		}
		now = append(now, fmt.Sprintf("%s %g%%", name, p.Percent))
	}
	who := "nodes"
	if len(c.Subscriptions) > 0 {
		who = "nodes of subscriptions " + strings.Join(c.Subscriptions, ",")
	}
	s := fmt.Sprintf("expired at %s (its envelope's not_after) while %s: it was served to %g%% of base %s's %s, which is served to none now: %s",
		r.NotAfter.UTC().Format(time.RFC3339), r.Rollout.State, was, r.Base, who, strings.Join(now, ", "))
	if len(ev.Cohorts) > 1 {
		s += fmt.Sprintf("; %d more cohorts in the evidence", len(ev.Cohorts)-1)
	}
	return s
}
