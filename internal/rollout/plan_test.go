package rollout

import (
	"errors"
	"math"
	"testing"
	"time"
)

func testPlan() Plan {
	return Plan{
		Steps: []PlanStep{
			{Percent: 1, Bake: 30 * time.Minute, MinReports: 20},
			{Percent: 25, Bake: time.Hour, MinReports: 50},
			{Percent: 100, Bake: time.Hour, MinReports: 10},
		},
		Margin:         0.05,
		MaxFailureRate: 0.2,
	}
}

func TestPlanValidate(t *testing.T) {
	t.Parallel()
	if err := testPlan().Validate(); err != nil {
		t.Fatalf("good plan: %v", err)
	}
	bad := map[string]func(*Plan){
		"no-steps":        func(p *Plan) { p.Steps = nil },
		"shrinking":       func(p *Plan) { p.Steps[1].Percent = 1 },
		"over-100":        func(p *Plan) { p.Steps[2].Percent = 101 },
		"negative-bake":   func(p *Plan) { p.Steps[0].Bake = -time.Second },
		"month-bake":      func(p *Plan) { p.Steps[0].Bake = 31 * 24 * time.Hour },
		"zero-reports":    func(p *Plan) { p.Steps[0].MinReports = 0 },
		"nan-margin":      func(p *Plan) { p.Margin = math.NaN() },
		"nan-ceiling":     func(p *Plan) { p.MaxFailureRate = math.NaN() },
		"inf-ceiling":     func(p *Plan) { p.MaxFailureRate = math.Inf(1) },
		"margin-1":        func(p *Plan) { p.Margin = 1 },
		"zero-ceiling":    func(p *Plan) { p.MaxFailureRate = 0 },
		"step-past-end":   func(p *Plan) { p.Step = 3 },
		"negative-step":   func(p *Plan) { p.Step = -1 },
		"negative-margin": func(p *Plan) { p.Margin = -0.01 },
		"silent-after-1s": func(p *Plan) { p.SilentAfter = time.Second },
		"silent-after-2d": func(p *Plan) { p.SilentAfter = 48 * time.Hour },
	}
	for name, mutate := range bad {
		p := testPlan()
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidPlan) {
			t.Errorf("%s: Validate = %v, want ErrInvalidPlan", name, err)
		}
	}
}

func TestPlanFloor(t *testing.T) {
	t.Parallel()
	if got := testPlan().Floor(); got != 10 {
		t.Errorf("Floor = %d, want the smallest MinReports, 10", got)
	}
}

// TestResumeRestartsBake: time spent paused is not bake time, so a resumed
// step does not come due at once.
func TestResumeRestartsBake(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r, err := rel("202604.01.1", Draft, 0).SetPlan(testPlan(), start)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = r.Transition(Paused); err != nil {
		t.Fatal(err)
	}
	later := start.Add(48 * time.Hour)
	r, err = r.Resume(later)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rollout.State != Rolling {
		t.Errorf("state %s after resume, want rolling", r.Rollout.State)
	}
	if due := r.Rollout.Plan.Due(); !due.Equal(later.Add(30 * time.Minute)) {
		t.Errorf("step due %v after resuming at %v, want a full bake from the resume", due, later)
	}
	if _, err := r.Resume(later); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("resuming a rolling release: %v, want ErrInvalidTransition", err)
	}
}

func canaryPlan() Plan {
	p := testPlan()
	p.Steps = append([]PlanStep{
		{Nodes: 5, Bake: 10 * time.Minute, MinReports: 5},
		{Nodes: 50, Bake: 20 * time.Minute, MinReports: 30},
	}, p.Steps...)
	return p
}

func TestCanaryPlanValidate(t *testing.T) {
	t.Parallel()
	if err := canaryPlan().Validate(); err != nil {
		t.Fatalf("good canary plan: %v", err)
	}
	bad := map[string]func(*Plan){
		"nodes-and-percent":     func(p *Plan) { p.Steps[0].Percent = 1 },
		"negative-nodes":        func(p *Plan) { p.Steps[0].Nodes = -1 },
		"shrinking-canary":      func(p *Plan) { p.Steps[1].Nodes = 5 },
		"canary-after-percent":  func(p *Plan) { p.Steps[3] = PlanStep{Nodes: 100, MinReports: 1} },
		"huge-canary":           func(p *Plan) { p.Steps[1].Nodes = MaxCanaryNodes + 1 },
		"reports-over-canary":   func(p *Plan) { p.Steps[0].MinReports = 6 },
		"percent-after-canary0": func(p *Plan) { p.Steps[2].Percent = 0 },
	}
	for name, mutate := range bad {
		p := canaryPlan()
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidPlan) {
			t.Errorf("%s: Validate = %v, want ErrInvalidPlan", name, err)
		}
	}
}

// TestCanarySteps walks a canary plan: seats only while at a canary step,
// seat holders served through every later step, and a release already
// serving a percentage skipping the canary.
func TestCanarySteps(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r, err := rel("202604.01.1", Draft, 0).SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rollout.State != Rolling || r.Rollout.Percent != 0 || r.Rollout.Plan.Step != 0 {
		t.Fatalf("after SetPlan: %s %d%% step %d, want rolling 0%% at the canary", r.Rollout.State, r.Rollout.Percent, r.Rollout.Plan.Step)
	}
	seated := Node{Now: testNow, VMID: "seated", Seats: []string{"202604.01.1"}}
	other := Node{Now: testNow, VMID: "other"}
	if got := r.OpenSeats(other); got != 5 {
		t.Errorf("OpenSeats at the first canary step = %d, want 5", got)
	}
	if ok, rules := r.Includes(other); ok {
		t.Errorf("a node without a seat is included at the canary: %+v", rules)
	}
	if ok, rules := r.Includes(seated); !ok || rules[len(rules)-1].Rule != "canary-seat" {
		t.Errorf("seat holder: included=%v rules=%+v, want included by canary-seat", ok, rules)
	}
	if r, err = r.Advance(now); err != nil {
		t.Fatal(err)
	}
	if got := r.OpenSeats(other); got != 50 || r.Rollout.Percent != 0 {
		t.Errorf("second canary step: OpenSeats %d at %d%%, want 50 at 0%%", got, r.Rollout.Percent)
	}
	if r, err = r.Advance(now); err != nil {
		t.Fatal(err)
	}
	if r.Rollout.Percent != 1 || r.OpenSeats(other) != 0 {
		t.Errorf("first percentage step: %d%% with %d open seats, want 1%% and none", r.Rollout.Percent, r.OpenSeats(other))
	}
	if ok, _ := r.Includes(seated); !ok || !r.Offered(seated) {
		t.Error("a canary node dropped out when the percentages began")
	}
	paused, err := r.Transition(Paused)
	if err != nil {
		t.Fatal(err)
	}
	if paused.OpenSeats(other) != 0 {
		t.Error("a paused release hands out seats")
	}
	halted, err := r.Transition(Halted)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := halted.Includes(seated); ok || !halted.Offered(seated) {
		t.Error("halted: a canary node must be served nothing, yet stay offered for its report")
	}
	// A narrowed scope stops serving a holder outside it, but it was
	// served: its report still counts.
	scoped := r
	scoped.Rollout.Subscriptions = []string{"sub-a"}
	if ok, _ := scoped.Includes(seated); ok || !scoped.Offered(seated) {
		t.Error("a seat holder outside a narrowed scope: want not served, still offered")
	}
	// A new plan without a canary keeps the holders served.
	replanned, err := r.SetPlan(testPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := replanned.Includes(seated); !ok || !replanned.HasCanary() {
		t.Error("a plan without a canary dropped the earlier canary's holders")
	}

	// An operator's percentage during a canary step serves its buckets
	// too, as it is offered to them.
	manual, err := rel("202604.01.3", Draft, 0).SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	if manual, err = manual.SetScope(100, nil, nil); err != nil {
		t.Fatal(err)
	}
	if ok, _ := manual.Includes(other); !ok || !manual.Offered(other) {
		t.Error("a 100% set by hand during the canary step serves nobody outside the seats")
	}

	already, err := rel("202604.01.2", Rolling, 10).SetPlan(canaryPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	if got := already.Rollout.Plan.Current(); got.Canary() || got.Percent != 25 {
		t.Errorf("a release at 10%% starts its plan at %+v, want the 25%% step", got)
	}
}
