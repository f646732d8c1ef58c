// Package health judges a release's outcome reports against its base's
// control cohort: the rule lpsd's autopilot halts a regressing rollout by.
//
// The rule, per release, on deduplicated reports (internal/tally):
//
//   - Too few reports (fewer than the plan's Floor, its smallest
//     MinReports): no verdict.
//
//   - Ceiling: halt when even the optimistic end of the release's failure
//     rate, the Wilson score lower bound at z = 2.58 (one-sided 99.5 %), is
//     above the plan's MaxFailureRate.
//
//   - Comparison: with at least Floor control reports, halt when the
//     release's failure rate exceeds the control's by more than the plan's
//     Margin with one-sided 99.5 % confidence: a two-proportion z-test on
//     Agresti–Caffo adjusted rates (one success and one failure added to
//     each group, which keeps the test sane at 0 % and 100 %), statistic
//     (p1 − p0 − margin) / se > 2.58.
//
//   - Otherwise healthy, once the release has the current step's
//     MinReports, none of its canary seat holders is pending, and, at a
//     canary of nodes, the control has at least as many reports as the
//     release; until then insufficient to advance. A later step's larger
//     minimum thus only delays advancing: halting keeps judging from the
//     floor, at the error rates TestErrorRates measures.
//
// A release's failures are its failed, fallen-back and silent nodes (canary
// seat holders that never reported, tally.Counts.Silent), out of the nodes
// that reported or stayed silent; the control's are its failed ones. The autopilot looks after every evaluation tick, so
// the error rates that matter are over a whole rollout's repeated looks;
// TestErrorRates measures them by simulation and the docs quote them.
package health

import (
	"fmt"
	"math"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// Z is the one-sided normal quantile both tests use (99.5 %).
const Z = 2.58

// Verdicts.
const (
	// Insufficient: too few reports to judge, or to advance on.
	Insufficient = "insufficient"
	// Healthy: judged, and neither test fires.
	Healthy = "healthy"
	// Regressing: a test fired; Rule says which.
	Regressing = "regressing"
)

// Rules that halt.
const (
	RuleCeiling    = "ceiling"
	RuleComparison = "comparison"
)

// Verdict is one judgement, with the numbers it rests on.
type Verdict struct {
	Verdict string       `json:"verdict"`
	Rule    string       `json:"rule,omitempty"`
	Release tally.Counts `json:"release"`
	Control tally.Counts `json:"control"`
	// ReleaseRate and ControlRate are the raw failure rates.
	ReleaseRate float64 `json:"release_rate"`
	ControlRate float64 `json:"control_rate"`
	// LowerBound is the release rate's Wilson lower bound (the ceiling's
	// statistic); ZScore the comparison's, 0 when Compared is false.
	LowerBound float64 `json:"lower_bound"`
	ZScore     float64 `json:"z"`
	// Compared reports whether the control was large enough to compare.
	Compared bool `json:"compared"`
	// Detail is one line for operators.
	Detail string `json:"detail"`
}

// Judge applies the rule to a release's and its control cohort's counts
// under plan p's current step.
func Judge(rel, control tally.Counts, p rollout.Plan) Verdict {
	v := Verdict{Release: rel, Control: control}
	floor := uint64(p.Floor())
	judged := rel.Judged()
	if judged > 0 {
		v.ReleaseRate = float64(rel.Failures()) / float64(judged)
	}
	if control.Reported > 0 {
		v.ControlRate = float64(control.Failed) / float64(control.Reported)
	}
	if judged < floor {
		v.Verdict = Insufficient
		v.Detail = fmt.Sprintf("%d of %d reports needed", judged, floor)
		return v
	}
	v.LowerBound = wilsonLower(rel.Failures(), judged, Z)
	if control.Reported >= floor {
		v.Compared = true
		v.ZScore = excessZ(rel.Failures(), judged, control.Failed, control.Reported, p.Margin)
	}
	of := fmt.Sprintf("%d/%d", rel.Failures(), judged)
	if rel.Silent > 0 {
		of += fmt.Sprintf(", %d silent", rel.Silent)
	}
	switch {
	case v.LowerBound > p.MaxFailureRate:
		v.Verdict, v.Rule = Regressing, RuleCeiling
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), at least %.1f%% at 99.5%%, over the %.1f%% ceiling",
			100*v.ReleaseRate, of, 100*v.LowerBound, 100*p.MaxFailureRate)
	case v.Compared && v.ZScore > Z:
		v.Verdict, v.Rule = Regressing, RuleComparison
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s) vs control %.1f%% (%d/%d): over the %.1f-point margin at z=%.2f > %.2f",
			100*v.ReleaseRate, of, 100*v.ControlRate, control.Failed, control.Reported, 100*p.Margin, v.ZScore, Z)
	case rel.Pending > 0:
		v.Verdict = Insufficient
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), no regression so far; %d canary nodes have neither reported nor been silent for %v yet",
			100*v.ReleaseRate, of, rel.Pending, p.SilenceDeadline())
	case p.Current().Canary() && (!v.Compared || control.Reported < judged):
		// The first N nodes to ask take the seats, so the control cohort
		// grows only after them: a canary of nodes is never passed on the
		// ceiling alone, nor against a control smaller than itself, whose
		// noise could hide a regression.
		v.Verdict = Insufficient
		need := max(floor, judged)
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), no regression so far; a canary of nodes advances only against a control cohort at least its size: %d of %d control reports",
			100*v.ReleaseRate, of, control.Reported, need)
	case judged < uint64(p.Current().MinReports):
		v.Verdict = Insufficient
		v.Detail = fmt.Sprintf("failure rate %.1f%% (%s), no regression so far; %d of %d reports needed to advance",
			100*v.ReleaseRate, of, judged, p.Current().MinReports)
	default:
		v.Verdict = Healthy
		if v.Compared {
			v.Detail = fmt.Sprintf("failure rate %.1f%% (%s) vs control %.1f%% (%d/%d), z=%.2f",
				100*v.ReleaseRate, of, 100*v.ControlRate, control.Failed, control.Reported, v.ZScore)
		} else {
			v.Detail = fmt.Sprintf("failure rate %.1f%% (%s); control too small to compare (%d of %d reports), ceiling only",
				100*v.ReleaseRate, of, control.Reported, floor)
		}
	}
	return v
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
