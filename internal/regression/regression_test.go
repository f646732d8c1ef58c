package regression

import (
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// plan is the documented default-like plan the tests judge under.
var plan = rollout.Plan{
	Steps:          []rollout.PlanStep{{Percent: 1, Bake: time.Hour, MinReports: 20}, {Percent: 100, Bake: time.Hour, MinReports: 100}},
	Margin:         0.05,
	MaxFailureRate: 0.20,
}

// bl is a baseline of the baked agent with counts c.
func bl(c tally.Counts) tally.Baseline {
	return tally.Baseline{Incumbent: tally.IncumbentBaked, Counts: c}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	c := func(ok, failed, fallback uint64) tally.Counts {
		return tally.Counts{OK: ok, Failed: failed, Fallback: fallback}
	}
	tests := []struct {
		name    string
		rel     tally.Counts
		control tally.Counts
		verdict string
		rule    string
	}{
		{"too-few", c(10, 9, 0), c(1000, 20, 0), Insufficient, ""},
		{"equal-rates", c(98, 2, 0), c(980, 20, 0), Healthy, ""},
		{"within-margin", c(94, 6, 0), c(980, 20, 0), Healthy, ""},
		{"bad-canary-vs-control", c(12, 4, 4), c(980, 20, 0), Regressing, RuleComparison},
		{"fallbacks-count-as-failures", c(70, 0, 30), c(980, 20, 0), Regressing, RuleComparison},
		{"ceiling-without-control", c(10, 10, 0), c(5, 0, 0), Regressing, RuleCeiling},
		{"no-control-healthy", c(20, 0, 0), tally.Counts{}, Healthy, ""},
		{"all-failing-control", c(0, 20, 0), c(0, 1000, 0), Regressing, RuleCeiling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Judge(tt.rel, bl(tt.control), plan)
			if v.Health != tt.verdict || v.Rule != tt.rule {
				t.Errorf("Judge = %s/%s (%s), want %s/%s", v.Health, v.Rule, v.Detail, tt.verdict, tt.rule)
			}
		})
	}
}

// TestJudgeLaterStep: a later step's larger minimum delays advancing but
// never halting, which keeps judging from the plan's floor.
func TestJudgeLaterStep(t *testing.T) {
	t.Parallel()
	later := plan
	later.Step = 1 // MinReports 100; the floor stays 20
	control := tally.Counts{OK: 980, Failed: 20}
	bad := tally.Counts{OK: 20, Failed: 20}
	if v := Judge(bad, bl(control), later); v.Health != Regressing {
		t.Errorf("40 reports at 50%% failed under a 100-report step: %s (%s), want %s", v.Health, v.Detail, Regressing)
	}
	good := tally.Counts{OK: 40}
	if v := Judge(good, bl(control), later); v.Health != Insufficient {
		t.Errorf("40 healthy reports under a 100-report step: %s (%s), want %s until 100", v.Health, v.Detail, Insufficient)
	}
	good = tally.Counts{OK: 100}
	if v := Judge(good, bl(control), later); v.Health != Healthy {
		t.Errorf("100 healthy reports under a 100-report step: %s (%s), want %s", v.Health, v.Detail, Healthy)
	}
}

// simulate streams release reports at failure rate p1 against a control of
// n0 reports at p0, judging after every report up to maxN (the worst case:
// the autopilot looks on every new report). It returns the report count at
// the first regression, or 0 if none.
func simulate(rng *rand.Rand, p1, p0 float64, n0, maxN int) int {
	var control tally.Counts
	for range n0 {
		if rng.Float64() < p0 {
			control.Failed++
		} else {
			control.OK++
		}
	}
	var rel tally.Counts
	for n := 1; n <= maxN; n++ {
		if rng.Float64() < p1 {
			rel.Failed++
		} else {
			rel.OK++
		}
		if Judge(rel, bl(control), plan).Health == Regressing {
			return n
		}
	}
	return 0
}

// TestErrorRates measures the rule's error rates by simulation, with a
// fixed seed so the numbers are reproducible (they are quoted in
// docs/closed-loop.md): false halts of a healthy release looked at after
// every report, and how many reports a clearly bad one needs.
func TestErrorRates(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	const runs = 1000
	for _, p := range []float64{0.02, 0.10} {
		halts := 0
		for range runs {
			if simulate(rng, p, p, 500, 2000) > 0 {
				halts++
			}
		}
		rate := float64(halts) / runs
		t.Logf("healthy release at %.0f%% (control %.0f%%, 500 control reports), judged after each of 2000 reports: %d/%d runs halted (%.1f%%)", 100*p, 100*p, halts, runs, 100*rate)
		if rate > 0.01 {
			t.Errorf("false-halt rate %.1f%% at %.0f%%, want at most 1%%", 100*rate, 100*p)
		}
	}
	var at []int
	missed := 0
	for range runs {
		n := simulate(rng, 0.30, 0.02, 500, 2000)
		if n == 0 {
			missed++
			continue
		}
		at = append(at, n)
	}
	sort.Ints(at)
	t.Logf("bad release at 30%% vs control 2%%: halted in %d/%d runs; reports at the halt: median %d, p95 %d, max %d", runs-missed, runs, at[len(at)/2], at[len(at)*95/100], at[len(at)-1])
	if missed > 0 || at[len(at)*95/100] > 60 {
		t.Errorf("a 30%% vs 2%% regression: %d missed, p95 %d reports; want none missed and p95 within 60", missed, at[len(at)*95/100])
	}
}

// TestJudgeCanaryWantsALargeEnoughControl: a canary of nodes is not
// passed against a control smaller than itself, whose noise (3 of 50
// failing) can hide a 26 % failure rate; a control its size exposes it.
func TestJudgeCanaryWantsALargeEnoughControl(t *testing.T) {
	t.Parallel()
	p := rollout.Plan{
		Steps:  []rollout.PlanStep{{Nodes: 100, MinReports: 50}, {Percent: 100, MinReports: 50}},
		Margin: 0.05, MaxFailureRate: 0.3,
	}
	rel := tally.Counts{OK: 73, Fallback: 26}
	if v := Judge(rel, bl(tally.Counts{OK: 47, Failed: 3}), p); v.Health != Insufficient {
		t.Errorf("against a control of 50: %s (%s), want insufficient", v.Health, v.Detail)
	}
	if v := Judge(rel, bl(tally.Counts{OK: 98, Failed: 2}), p); v.Health != Regressing || v.Rule != RuleComparison {
		t.Errorf("against a control of 100: %s %s (%s), want regressing by comparison", v.Health, v.Rule, v.Detail)
	}
	healthy := tally.Counts{OK: 97, Fallback: 2}
	if v := Judge(healthy, bl(tally.Counts{OK: 118, Failed: 2}), p); v.Health != Healthy {
		t.Errorf("a healthy canary against a control its size: %s (%s), want healthy", v.Health, v.Detail)
	}
}

// TestJudgeRatesOfTheirOwn: refusals as signed halt on a few nodes;
// silence and refusals for delivery are rates with ceilings of their own,
// each with its reason code.
func TestJudgeRatesOfTheirOwn(t *testing.T) {
	t.Parallel()
	baseline := bl(tally.Counts{OK: 980, Failed: 20})
	for _, tt := range []struct {
		name   string
		rel    tally.Counts
		want   string
		reason string
	}{
		{"30% refused as signed", tally.Counts{OK: 14, RefusedIntegrity: 6}, Regressing, ReasonRefusedIntegrity},
		{"one refusal in 100", tally.Counts{OK: 99, RefusedIntegrity: 1}, Healthy, ""},
		{"all refused", tally.Counts{RefusedIntegrity: 20}, Regressing, ReasonRefusedIntegrity},
		{"failing and a few refusals", tally.Counts{OK: 60, Failed: 39, RefusedIntegrity: 1}, Regressing, ReasonRegression},
		{"30% silent", tally.Counts{OK: 70, Silent: 30}, Regressing, ReasonSilent},
		{"5% silent", tally.Counts{OK: 95, Silent: 5}, Healthy, ""},
		{"35% could not download", tally.Counts{OK: 65, RefusedDelivery: 35}, Regressing, ReasonRefusedDelivery},
		{"not applicable is never judged", tally.Counts{OK: 20, NotApplicable: 500}, Healthy, ""},
		{"a lost report does not hold an advance", tally.Counts{OK: 100, Pending: 1}, Healthy, ""},
		{"pending nodes that would halt it if silent hold it", tally.Counts{OK: 70, Pending: 30}, Insufficient, ""},
	} {
		v := Judge(tt.rel, baseline, plan)
		if v.Health != tt.want || v.Reason != tt.reason {
			t.Errorf("%s: Judge = %s/%s (%s), want %s/%s", tt.name, v.Health, v.Reason, v.Detail, tt.want, tt.reason)
		}
	}
}

// TestRuleText: the stated rule carries the plan's numbers.
func TestRuleText(t *testing.T) {
	t.Parallel()
	txt := RuleText(plan)
	for _, want := range []string{"20%", "5%", "5 points", "24h0m0s", "6h0m0s", "judged from 20 nodes"} {
		if !strings.Contains(txt, want) {
			t.Errorf("RuleText lacks %q:\n%s", want, txt)
		}
	}
}
