package rollout

import (
	"strings"
	"testing"
	"time"
)

// Attack: --policy-min-canary N is met by a canary *step* of N seats, however
// few of its nodes must report: a canary of 10,000 seats with min reports
// 1 (and no bake) passes, so one node's report opens the percentages.
func TestPolicyMinCanaryNeedsReports(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pol := Policy{MinCanaryNodes: 100}
	p := testPlan()
	p.Steps = []PlanStep{{Nodes: MaxCanaryNodes, MinReports: 1}, {Percent: 100, MinReports: 1}}
	draft := rel("202611.01.1", Draft, 0)
	next, err := draft.SetPlan(p, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.Check(draft, next, false, time.Now()); err == nil {
		t.Errorf("a canary of %d seats of which 1 must report satisfies %q", MaxCanaryNodes, pol)
	}
}

// Attack: serving every node in scope without a canary having run, from
// any percentage (not only from 0 %), waits for a second operator, as
// Policy.String says.
func TestPolicyHoldsUncanariedComplete(t *testing.T) {
	t.Parallel()
	pol := Policy{TwoPerson: true}
	if !strings.Contains(pol.String(), "serve nodes without a canary") {
		t.Fatalf("String = %q", pol)
	}
	at1, _ := rel("202611.01.1", Draft, 0).SetScope(1, nil, nil)
	done, _ := at1.Transition(Complete)
	if _, needs := pol.NeedsApproval(at1, done); !needs {
		t.Errorf("complete of an uncanaried release at 1%% needs no second operator, though %q", pol)
	}
	draft := rel("202611.01.1", Draft, 0)
	all, _ := draft.SetScope(100, nil, nil)
	if _, needs := pol.NeedsApproval(draft, all); !needs {
		t.Errorf("a draft set to 100%% (every node in scope, rolling) needs no second operator")
	}
}

// Attack: at a canary, a plan with the same steps and ceilings nothing
// breaks is not "leaving the canary": no approval.
func TestPolicyReplanningACanaryWaits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pol := Policy{TwoPerson: true}
	atCanary, err := rel("202611.01.1", Draft, 0).SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	blind := canaryPlan()
	blind.Margin, blind.MaxFailureRate, blind.MaxSilentRate, blind.MaxDeliveryRate = 0.99, 1, 1, 1
	next, err := atCanary.SetPlan(blind, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, needs := pol.NeedsApproval(atCanary, next); !needs {
		t.Errorf("making the running canary unhaltable (margin 0.99, ceilings 1) needs no second operator")
	}
}

// Attack: widening the scope of a complete release from one
// subscription to all is no change to the policy.
func TestPolicyScopeWideningIsARise(t *testing.T) {
	t.Parallel()
	pol := Policy{MinCanaryNodes: 10, MaxStepPercent: 10, TwoPerson: true}
	cur := rel("202611.01.1", Complete, 100)
	cur.Rollout.Subscriptions = []string{"0a1b2c3d-0000-4000-8000-00000000000a"}
	next, err := cur.SetScope(100, []string{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, needs := pol.NeedsApproval(cur, next)
	if err := pol.Check(cur, next, false, time.Now()); err == nil && !needs {
		t.Errorf("complete in 1 subscription → complete in all: neither refused nor held under %q", pol)
	}
}

// Attack: the two-person rule holds a resume after the autopilot's halt,
// whose point is that the fresh evidence window (EvidenceSince) forgets
// the reports that halted it. One operator gets the same forgetting alone
// by halting first (no reason code) and resuming: no approval, and the
// canary's evidence so far no longer counts.
func TestPolicyResumeAfterAnyHaltWaits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pol := Policy{MinCanaryNodes: 5, TwoPerson: true}
	atCanary, err := rel("202611.01.1", Draft, 0).SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	halted, err := atCanary.Transition(Halted) // the operator's, before the autopilot's look
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	resumed, err := halted.Resume(later)
	if err != nil {
		t.Fatal(err)
	}
	_, needs := pol.NeedsApproval(halted, resumed)
	if !resumed.Rollout.EvidenceSince.Equal(later) {
		t.Fatalf("EvidenceSince = %v", resumed.Rollout.EvidenceSince)
	}
	if !needs {
		t.Errorf("halt+resume by one operator opens a fresh evidence window at the canary (reports before %s no longer count) with no second operator", later.Format(time.RFC3339))
	}
}
