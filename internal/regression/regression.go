// Package regression judges a release's nodes against its base's incumbent:
// the rule lpsd's autopilot halts or pauses a rollout by.
//
// The rule, per release, on one vote per vmId (internal/tally), with N the
// judged nodes (all counted but the pending and those the release was
// not applicable to):
//
//   - Fewer than the plan's Floor (its smallest MinReports) judged: no
//     verdict.
//
//   - Three rates, each against a ceiling: halt when even the optimistic
//     end of the rate, the Wilson score lower bound at z = 2.58 (one-sided
//     99.5 %), is above it. The failure rate (failed, fallen back and
//     refused as signed, over N) against the plan's MaxFailureRate; the
//     silent rate against its MaxSilentRate; the refused-for-delivery rate
//     against its MaxDeliveryRate. And refusals as signed on their own
//     against IntegrityCeiling, so an unusable release halts on a few
//     nodes.
//
//   - Each rate against the baseline's (the base's incumbent on nodes not
//     served the release, tally.Baseline) when that has at least Floor
//     judged nodes: halt when the release's exceeds it by more than the
//     plan's Margin with one-sided 99.5 % confidence, a two-proportion
//     z-test on Agresti–Caffo adjusted rates (one success and one failure
//     added to each group, which keeps the test sane at 0 % and 100 %),
//     statistic (p1 − p0 − margin) / se > 2.58.
//
//   - Otherwise healthy once the release has the current step's
//     MinReports, its pending nodes (served, not heard from yet) would not
//     make it regress were they all silent, and, at a canary of nodes,
//     the baseline has at least as many judged nodes as the release; until
//     then insufficient to advance. A later step's larger minimum thus
//     only delays advancing: halting keeps judging from the floor, at the
//     error rates TestErrorRates measures. An insufficient step past its
//     deadline pauses the release (the autopilot: inconclusive, or stalled
//     when it reached no node).
//
// Every automatic pause or halt carries one reason code (Reason*), which
// status, audit, metrics and the dashboard show.
package regression

import (
	"fmt"
	"math"
	"strings"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// Z is the one-sided normal quantile both tests use (99.5 %).
const Z = 2.58

// IntegrityCeiling is the ceiling of the rate of nodes that refused the
// release as signed: a good release is refused by none, so a few halt it.
const IntegrityCeiling = 0.05

// Verdicts.
const (
	// Insufficient: too few reports to judge, or to advance on.
	Insufficient = "insufficient"
	// Healthy: judged, and no test fires.
	Healthy = "healthy"
	// Regressing: a test fired; Rule and Reason say which.
	Regressing = "regressing"
)

// Rules that halt.
const (
	RuleCeiling    = "ceiling"
	RuleComparison = "comparison"
)

// Reason codes of automatic pauses and halts: the one list status, audit,
// metrics and the dashboard use.
const (
	// ReasonRegression: the failure rate is over its ceiling or the
	// baseline's.
	ReasonRegression = "regression"
	// ReasonSilent: too many served nodes never reported.
	ReasonSilent = "silent"
	// ReasonRefusedIntegrity: nodes refused the release as signed.
	ReasonRefusedIntegrity = "refusedIntegrity"
	// ReasonRefusedDelivery: too many nodes could not get the release.
	ReasonRefusedDelivery = "refusedDelivery"
	// ReasonInconclusive: a step's deadline passed without enough
	// evidence to advance (paused, never advanced).
	ReasonInconclusive = "inconclusive"
	// ReasonStalled: a step's deadline passed and the release reached no
	// node at all (a scope nobody matches, say).
	ReasonStalled = "stalled"
)

// Reasons lists every reason code, for metrics' label values.
var Reasons = []string{ReasonRegression, ReasonSilent, ReasonRefusedIntegrity, ReasonRefusedDelivery, ReasonInconclusive, ReasonStalled}

// ReasonText says in words what reason code means, for people.
func ReasonText(code string) string {
	switch code {
	case ReasonRegression:
		return "its failure rate went over its ceiling or its baseline's"
	case ReasonSilent:
		return "too many of the nodes served it never reported"
	case ReasonRefusedIntegrity:
		return "nodes refused it as signed (a key, digest, size or version not the signed ones)"
	case ReasonRefusedDelivery:
		return "too many nodes could not get it (a download or repository outage)"
	case ReasonInconclusive:
		return "a step's deadline passed without the evidence to advance"
	case ReasonStalled:
		return "a step's deadline passed and it had reached no node"
	}
	return "a reason code this lpsd does not know"
}

// Verdict is one judgement, with the numbers it rests on.
type Verdict struct {
	// Health is Insufficient, Healthy or Regressing. Its JSON name is the
	// one the audit log's evidence has always carried.
	Health string `json:"verdict"`
	Rule   string `json:"rule,omitempty"`
	// Reason is the reason code of a regressing verdict.
	Reason   string         `json:"reason,omitempty"`
	Release  tally.Counts   `json:"release"`
	Baseline tally.Baseline `json:"baseline"`
	// ReleaseRate and BaselineRate are the rate the verdict rests on
	// (the failure rate unless Reason says otherwise), raw.
	ReleaseRate  float64 `json:"release_rate"`
	BaselineRate float64 `json:"baseline_rate"`
	// LowerBound is the release rate's Wilson lower bound (the ceiling's
	// statistic); ZScore the comparison's, 0 when Compared is false.
	LowerBound float64 `json:"lower_bound"`
	ZScore     float64 `json:"z"`
	// Compared reports whether the baseline was large enough to compare.
	Compared bool `json:"compared"`
	// Detail is one line for operators.
	Detail string `json:"detail"`
}

// rate is one of the judged rates.
type rate struct {
	reason  string
	what    string // as the detail names it
	k, k0   uint64 // the release's and the baseline's counts
	ceiling float64
}

// Judge applies the rule to a release's counts and its baseline's under
// plan p's current step.
func Judge(rel tally.Counts, base tally.Baseline, p rollout.Plan) Verdict {
	v := Verdict{Release: rel, Baseline: base}
	floor := uint64(p.Floor())
	n, n0 := rel.Judged(), base.Counts.Judged()
	if n > 0 {
		v.ReleaseRate = float64(rel.Failures()) / float64(n)
	}
	if n0 > 0 {
		v.BaselineRate = float64(base.Counts.Failures()) / float64(n0)
	}
	if n < floor {
		v.Health = Insufficient
		v.Detail = fmt.Sprintf("%d of %d reports needed", n, floor)
		return v
	}
	v.Compared = n0 >= floor
	against := "baseline " + baselineName(base)
	rates := []rate{
		// Refusals as signed first: they are failures too, and the more
		// specific reason.
		{ReasonRefusedIntegrity, "refused as signed", rel.RefusedIntegrity, base.Counts.RefusedIntegrity, IntegrityCeiling},
		{ReasonRegression, "failure rate", rel.Failures(), base.Counts.Failures(), p.MaxFailureRate},
		{ReasonSilent, "silent", rel.Silent, base.Counts.Silent, p.SilentCeiling()},
		{ReasonRefusedDelivery, "refused for delivery", rel.RefusedDelivery, base.Counts.RefusedDelivery, p.DeliveryCeiling()},
	}
	for _, r := range rates {
		lb := wilsonLower(r.k, n, Z)
		if lb > r.ceiling {
			v.Health, v.Rule, v.Reason = Regressing, RuleCeiling, r.reason
			v.ReleaseRate, v.BaselineRate, v.LowerBound = ratio(r.k, n), ratio(r.k0, n0), lb
			v.Detail = fmt.Sprintf("%s %.1f%% (%d/%d), at least %.1f%% at 99.5%%, over the %.1f%% ceiling",
				r.what, 100*v.ReleaseRate, r.k, n, 100*lb, 100*r.ceiling)
			return v
		}
		if r.reason == ReasonRegression {
			v.LowerBound = lb
		}
		if !v.Compared {
			continue
		}
		z := excessZ(r.k, n, r.k0, n0, p.Margin)
		if r.reason == ReasonRegression {
			v.ZScore = z
		}
		if z > Z {
			v.Health, v.Rule, v.Reason = Regressing, RuleComparison, r.reason
			v.ReleaseRate, v.BaselineRate, v.LowerBound, v.ZScore = ratio(r.k, n), ratio(r.k0, n0), lb, z
			v.Detail = fmt.Sprintf("%s %.1f%% (%d/%d) vs %s %.1f%% (%d/%d): over the %.1f-point margin at z=%.2f > %.2f",
				r.what, 100*v.ReleaseRate, r.k, n, against, 100*v.BaselineRate, r.k0, n0, 100*p.Margin, z, Z)
			return v
		}
	}
	of := fmt.Sprintf("%d/%d", rel.Failures(), n)
	if rel.Silent > 0 || rel.RefusedDelivery > 0 {
		of += fmt.Sprintf("; %d silent, %d refused for delivery", rel.Silent, rel.RefusedDelivery)
	}
	// Served nodes not heard from yet may all turn out silent: advance only
	// if the release would pass even then, so a hotfix that hangs nodes
	// cannot outrun its silent-after, and a few lost reports cannot hold a
	// healthy one.
	worst := rel
	worst.Silent, worst.Pending = rel.Silent+rel.Pending, 0
	switch {
	case rel.Pending > 0 && Judge(worst, base, p).Health == Regressing:
		v.Health = Insufficient
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), no regression so far; %d served nodes have neither reported nor been silent for %v yet, enough to halt it if they stay silent",
			100*v.ReleaseRate, of, rel.Pending, p.SilenceDeadline())
	case p.Current().Canary() && n0 < max(floor, n):
		// A canary of nodes is never passed on the ceilings alone, nor
		// against a baseline smaller than itself, whose noise could hide
		// a regression.
		v.Health = Insufficient
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), no regression so far; a canary of nodes advances only against a baseline at least its size: %d of %d %s reports",
			100*v.ReleaseRate, of, n0, max(floor, n), against)
	case n < uint64(p.Current().MinReports):
		v.Health = Insufficient
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), no regression so far; %d of %d reports needed to advance",
			100*v.ReleaseRate, of, n, p.Current().MinReports)
	default:
		v.Health = Healthy
		if v.Compared {
			v.Detail = fmt.Sprintf("failure rate %.1f%% (%s) vs %s %.1f%% (%d/%d), z=%.2f",
				100*v.ReleaseRate, of, against, 100*v.BaselineRate, base.Counts.Failures(), n0, v.ZScore)
		} else {
			v.Detail = fmt.Sprintf("failure rate %.1f%% (%s); %s too small to compare (%d of %d reports), ceilings only",
				100*v.ReleaseRate, of, against, n0, floor)
		}
	}
	return v
}

// baselineName names b's incumbent for a detail line.
func baselineName(b tally.Baseline) string {
	name := b.Incumbent
	if name == "" {
		name = tally.IncumbentBaked
	}
	if b.Recorded {
		return name + " (its record)"
	}
	return name
}

func ratio(k, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

// RuleText states the rule in one paragraph, with plan p's numbers, for
// audit evidence and the docs: generated from the same constants Judge
// uses, so the two cannot drift.
func RuleText(p rollout.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "one vote per vmId, its worst outcome; judged from %d nodes (the plan's floor) on. ", p.Floor())
	fmt.Fprintf(&b, "Halt when a rate's Wilson lower bound (z=%.2f) is over its ceiling: failures (failed, fallen back, refused as signed) %.0f%%, refused as signed %.0f%%, silent %.0f%%, refused for delivery %.0f%%; ",
		Z, 100*p.MaxFailureRate, 100*IntegrityCeiling, 100*p.SilentCeiling(), 100*p.DeliveryCeiling())
	fmt.Fprintf(&b, "or when one exceeds the baseline's (the base's incumbent on nodes not served the release, its last %v of reports or else its record) by more than %.0f points, (p1-p0-margin)/se > %.2f on Agresti-Caffo adjusted rates, with at least the floor on each side. ",
		tally.BaselineWindow, 100*p.Margin, Z)
	fmt.Fprintf(&b, "Advance once the step's bake has passed, it has the step's minimum reports, its pending nodes would not make it regress were they all silent, a canary's baseline is at least its size, and nothing fires; pause (inconclusive, or stalled if no node was reached) when the step's deadline, %v after its bake, passes first.",
		p.StepDeadline().Sub(p.Due()))
	return b.String()
}

// wilsonLower is the Wilson score interval's lower bound for k of n.
func wilsonLower(k, n uint64, z float64) float64 {
	if n == 0 {
		return 0
	}
	nf, p := float64(n), float64(k)/float64(n)
	z2 := z * z
	centre := p + z2/(2*nf)
	spread := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return math.Max(0, (centre-spread)/(1+z2/nf))
}

// excessZ is the z statistic of H0: p1 − p0 ≤ margin, on Agresti–Caffo
// adjusted proportions.
func excessZ(k1, n1, k0, n0 uint64, margin float64) float64 {
	p1 := (float64(k1) + 1) / (float64(n1) + 2)
	p0 := (float64(k0) + 1) / (float64(n0) + 2)
	se := math.Sqrt(p1*(1-p1)/(float64(n1)+2) + p0*(1-p0)/(float64(n0)+2))
	return (p1 - p0 - margin) / se
}
