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
