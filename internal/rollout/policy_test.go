package rollout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{{}, {MinCanaryNodes: MaxCanaryNodes, MaxStepPercent: 100, MinBake: MaxPolicyBake, TwoPerson: true}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	for _, p := range []Policy{{MinCanaryNodes: -1}, {MinCanaryNodes: MaxCanaryNodes + 1}, {MaxStepPercent: -1}, {MaxStepPercent: 101}, {MinBake: -time.Second}, {MinBake: MaxPolicyBake + time.Second}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: accepted", p)
		}
	}
}

// TestPolicyCheck holds every path that changes a rollout (a percentage,
// a plan, a skip, complete) to the same rules, decided from the records.
func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pol := Policy{MinCanaryNodes: 10, MaxStepPercent: 50, MinBake: 20 * time.Minute}
	draft := rel("202611.01.1", Draft, 0)
	plan := func(steps ...PlanStep) Plan {
		p := testPlan()
		p.Steps = steps
		return p
	}
	canary := plan(PlanStep{Nodes: 10, Bake: time.Hour, MinReports: 10}, PlanStep{Percent: 50, Bake: time.Hour, MinReports: 10}, PlanStep{Percent: 100, MinReports: 10})
	atCanary, err := draft.SetPlan(canary, now)
	if err != nil {
		t.Fatal(err)
	}
	at20 := rel("202611.01.1", Rolling, 20)

	setPlan := func(r Release, p Plan) Release {
		t.Helper()
		out, err := r.SetPlan(p, now)
		if err != nil {
			t.Fatalf("SetPlan: %v", err)
		}
		return out
	}
	percent := func(r Release, pct int) Release {
		t.Helper()
		out, err := r.SetScope(pct, nil, nil)
		if err != nil {
			t.Fatalf("SetScope: %v", err)
		}
		return out
	}
	complete := func(r Release) Release {
		t.Helper()
		out, err := r.Transition(Complete)
		if err != nil {
			t.Fatalf("Transition: %v", err)
		}
		return out
	}
	skip := func(r Release) Release {
		t.Helper()
		out, _, err := r.Skip(now)
		if err != nil {
			t.Fatalf("Skip: %v", err)
		}
		return out
	}
	cases := []struct {
		name      string
		cur, next Release
		approved  bool
		want      string // "" complies; else a word of the refusal
	}{
		{"a canary plan of 10 nodes", draft, setPlan(draft, canary), false, ""},
		{"a canary of 5 nodes", draft, setPlan(draft, plan(PlanStep{Nodes: 5, Bake: time.Hour, MinReports: 5}, PlanStep{Percent: 50, Bake: time.Hour, MinReports: 5}, PlanStep{Percent: 100, MinReports: 5})), false, "at least 10 nodes"},
		{"a plan that starts at a percentage", draft, setPlan(draft, plan(PlanStep{Percent: 5, Bake: time.Hour, MinReports: 5}, PlanStep{Percent: 50, Bake: time.Hour, MinReports: 5}, PlanStep{Percent: 100, MinReports: 5})), false, "starts with 5%"},
		{"a percentage on a draft", draft, percent(draft, 5), false, "serves no percentage yet"},
		{"complete on a draft", draft, complete(draft), false, "a step of 100 points"},
		{"a step of 60 points", at20, percent(at20, 80), false, "a step of 60 points"},
		{"a step of 50 points", at20, percent(at20, 70), false, ""},
		{"complete from 20%", at20, complete(at20), false, "a step of 80 points"},
		{"a short bake", at20, setPlan(at20, plan(PlanStep{Percent: 40, Bake: 10 * time.Minute, MinReports: 5}, PlanStep{Percent: 100, MinReports: 5})), false, "bakes 10m"},
		{"a plan that jumps", at20, setPlan(at20, plan(PlanStep{Percent: 40, Bake: time.Hour, MinReports: 5}, PlanStep{Percent: 100, MinReports: 5})), false, "from 40% to 100%"},
		{"a plan that ends short of a completing step", at20, setPlan(at20, plan(PlanStep{Percent: 40, Bake: time.Hour, MinReports: 5})), false, "completes from its last step's 40%"},
		{"skip the canary", atCanary, skip(atCanary), false, "leave its canary"},
		{"skip the canary, approved", atCanary, skip(atCanary), true, ""},
		{"a percentage from the canary, approved", atCanary, percent(atCanary, 30), true, ""},
		{"halt", at20, func() Release { r, _ := at20.Transition(Halted); return r }(), false, ""},
	}
	for _, c := range cases {
		err := pol.Check(c.cur, c.next, c.approved, now)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && !errors.Is(err, ErrPolicy):
			t.Errorf("%s: %v, want ErrPolicy", c.name, err)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
		if err := (Policy{}).Check(c.cur, c.next, false, now); err != nil {
			t.Errorf("%s: the zero policy refused: %v", c.name, err)
		}
	}
}

func TestPolicyNeedsApproval(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pol := Policy{TwoPerson: true}
	draft := rel("202611.01.1", Draft, 0)
	atCanary, err := draft.SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	skipped, _, err := atCanary.Skip(now)
	if err != nil {
		t.Fatal(err)
	}
	completed, _ := atCanary.Transition(Complete)
	draftCompleted, _ := draft.Transition(Complete)
	autoHalted, _ := rel("202611.01.1", Rolling, 20).Transition(Halted)
	autoHalted.Rollout.Reason = "regression"
	resumed, err := autoHalted.Resume(now)
	if err != nil {
		t.Fatal(err)
	}
	opHalted, _ := rel("202611.01.1", Rolling, 20).Transition(Halted)
	opResumed, _ := opHalted.Resume(now)
	at20 := rel("202611.01.1", Rolling, 20)
	at20.Rollout.Canary = true // past its canary
	at30, _ := at20.SetScope(30, nil, nil)
	uncanaried := rel("202611.01.1", Rolling, 20)
	uncanaried30, _ := uncanaried.SetScope(30, nil, nil)
	revoked := autoHalted
	revoked.Revoked = true
	pausedCanary, _ := atCanary.Transition(Paused)
	for _, c := range []struct {
		name      string
		cur, next Release
		want      bool
	}{
		{"skip the canary", atCanary, skipped, true},
		{"complete from the canary", atCanary, completed, true},
		{"complete a draft", draft, draftCompleted, true},
		{"resume after an automatic halt", autoHalted, resumed, true},
		{"resume after an operator's halt (a fresh evidence window)", opHalted, opResumed, true},
		{"a percentage past the canary", at20, at30, false},
		{"a percentage of a release no canary ran", uncanaried, uncanaried30, true},
		{"revoke after an automatic halt", autoHalted, revoked, false},
		{"pause at the canary", atCanary, pausedCanary, false},
	} {
		why, got := pol.NeedsApproval(c.cur, c.next)
		if got != c.want {
			t.Errorf("%s: NeedsApproval = %v (%q), want %v", c.name, got, why, c.want)
		}
		if _, got := (Policy{}).NeedsApproval(c.cur, c.next); got {
			t.Errorf("%s: needs approval without the two-person rule", c.name)
		}
	}
}

func TestApprovalStands(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	atCanary, err := rel("202611.01.1", Draft, 0).SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	a := NewApproval(atCanary, atCanary, "skip", "token:alice", "canary looks fine", now)
	if !a.Stands(atCanary, now.Add(time.Minute)) {
		t.Fatal("a fresh request does not stand")
	}
	if a.Stands(atCanary, now.Add(ApprovalTTL)) {
		t.Error("stands past its TTL")
	}
	moved, err := atCanary.Advance(now)
	if err != nil {
		t.Fatal(err)
	}
	if a.Stands(moved, now) {
		t.Error("stands after the release moved a step")
	}
	halted, _ := atCanary.Transition(Halted)
	if a.Stands(halted, now) {
		t.Error("stands after a halt")
	}
}

// TestSpreadOver: a canary scoped to every subscription is spread when its
// plan counted 10 or more subscriptions, as a scope listing them is; the
// count is lpsd's, not asked for, so two asks that count differently are
// the same change for the two-person rule.
func TestSpreadOver(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		spreadOver, subs, want int
	}{
		{0, 0, 0}, {9, 0, 0}, {10, 0, 2}, {40, 0, 2}, {0, 12, 2}, {40, 3, 0},
	} {
		p := canaryPlan()
		p.SpreadOver = tt.spreadOver
		r := rel("202611.01.1", Draft, 0)
		for i := range tt.subs {
			r.Rollout.Subscriptions = append(r.Rollout.Subscriptions, fmt.Sprintf("sub-%d", i))
		}
		r, err := r.SetPlan(p, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.SeatsPerSubscription(20); got != tt.want {
			t.Errorf("spread over %d, %d subscriptions listed: SeatsPerSubscription(20) = %d, want %d", tt.spreadOver, tt.subs, got, tt.want)
		}
	}
	// SpreadCount counts the subscriptions seen when they can fill the
	// first canary step (canaryPlan's 5 seats: a share of 1 each) under
	// the bound.
	for _, tt := range []struct {
		name  string
		nodes map[string]int
		want  int
	}{
		{"five of a node each fill 5 seats", map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, 5},
		{"one large and three small cannot", map[string]int{"big": 500, "a": 1, "b": 1, "c": 1}, 0},
		{"small ones beside a large one fill it", map[string]int{"big": 500, "a": 1, "b": 1, "c": 1, "d": 1}, 5},
		{"none seen", map[string]int{}, 0},
	} {
		if got := canaryPlan().SpreadCount(tt.nodes); got != tt.want {
			t.Errorf("%s: SpreadCount(%v) = %d, want %d", tt.name, tt.nodes, got, tt.want)
		}
	}
	pct := canaryPlan()
	pct.Steps = pct.Steps[2:]
	if got := pct.SpreadCount(map[string]int{"a": 9, "b": 9}); got != 0 {
		t.Errorf("SpreadCount of a plan without a canary = %d, want 0", got)
	}
	a, b := canaryPlan(), canaryPlan()
	a.SpreadOver, b.SpreadOver = 12, 13
	ra, _ := rel("202611.01.1", Draft, 0).SetPlan(a, now)
	rb, _ := rel("202611.01.1", Draft, 0).SetPlan(b, now.Add(time.Minute))
	if ChangeDigest(ra) != ChangeDigest(rb) {
		t.Error("two asks for one plan that counted 12 and 13 subscriptions are different changes")
	}
}
