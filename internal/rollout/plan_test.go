package rollout

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

	// A release already serving 10% is past the canary and the 1% step:
	// the plan is refused unless told to start at the 25% step.
	if _, err := rel("202604.01.2", Rolling, 10).SetPlan(canaryPlan(), now); !errors.Is(err, ErrStepPassed) {
		t.Errorf("a plan with a canary on a release at 10%%: %v, want ErrStepPassed", err)
	}
	from := canaryPlan()
	from.Step = 3
	already, err := rel("202604.01.2", Rolling, 10).SetPlan(from, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := already.Rollout.Plan.Current(); got.Canary() || got.Percent != 25 || already.Rollout.Percent != 25 {
		t.Errorf("a release at 10%% told to start at step 4 is at %+v, %d%%; want the 25%% step", got, already.Rollout.Percent)
	}
}

// TestSetPlanSkipsNoStepUnasked: a plan on a release already past one of
// its steps is refused, naming the step, why and the --from-step to type;
// a step at the release's own percentage runs (bakes) instead of being
// skipped; an explicit start skips the steps before it.
func TestSetPlanSkipsNoStepUnasked(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	canary20 := []PlanStep{{Nodes: 20, Bake: 30 * time.Minute, MinReports: 20}, {Percent: 10, Bake: time.Hour, MinReports: 100}, {Percent: 100, Bake: 2 * time.Hour, MinReports: 500}}
	fifty := []PlanStep{{Percent: 50, Bake: time.Minute, MinReports: 3}, {Percent: 100, MinReports: 3}}
	low := []PlanStep{{Percent: 10, MinReports: 3}, {Percent: 50, MinReports: 3}}
	for _, tt := range []struct {
		name     string
		state    State
		percent  int
		steps    []PlanStep
		from     int
		wantErr  []string // substrings of an ErrStepPassed refusal
		wantStep int
		wantPct  int
	}{
		{name: "readme-canary-after-5", state: Rolling, percent: 5, steps: canary20,
			wantErr: []string{"at 5%", "past step 1 of the plan (a canary of 20 nodes)", "before any percentage is served", "--from-step 2", "step 2 (10%)"}},
		{name: "canary-from-step-2", state: Rolling, percent: 5, steps: canary20, from: 1, wantStep: 1, wantPct: 10},
		{name: "canary-from-draft", state: Draft, steps: canary20, wantStep: 0, wantPct: 0},
		{name: "draft-skips-canary-when-told", state: Draft, steps: canary20, from: 1, wantStep: 1, wantPct: 10},
		{name: "fifty-bakes-at-fifty", state: Rolling, percent: 50, steps: fifty, wantStep: 0, wantPct: 50},
		{name: "every-step-below", state: Rolling, percent: 60, steps: low,
			wantErr: []string{"past step 1 of the plan (10%)", "below the release's 60%", "every later step", "lpsctl rollout complete"}},
		{name: "told-to-start-at-passed", state: Rolling, percent: 30, steps: canary20, from: 1,
			wantErr: []string{"past step 2 of the plan (10%)", "--from-step 3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := testPlan()
			p.Steps, p.Step = slices.Clone(tt.steps), tt.from
			got, err := rel("202604.01.1", tt.state, tt.percent).SetPlan(p, now)
			if tt.wantErr != nil {
				if !errors.Is(err, ErrStepPassed) {
					t.Fatalf("SetPlan = %v, want ErrStepPassed", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Rollout.State != Rolling || got.Rollout.Plan.Step != tt.wantStep || got.Rollout.Percent != tt.wantPct {
				t.Errorf("SetPlan = %s step %d at %d%%, want rolling step %d at %d%%", got.Rollout.State, got.Rollout.Plan.Step, got.Rollout.Percent, tt.wantStep, tt.wantPct)
			}
			if due := got.Rollout.Plan.Due(); !due.Equal(now.Add(tt.steps[tt.wantStep].Bake)) {
				t.Errorf("due %v, want a full bake of the start step from %v", due, now)
			}
		})
	}
	p := testPlan()
	p.Step = 3
	if _, err := rel("202604.01.1", Draft, 0).SetPlan(p, now); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("a start past the last step: %v, want ErrInvalidPlan", err)
	}
}

// TestAdvanceRunsAStepAtTheCurrentPercent: when an operator's percentage
// reaches the next step's, that step still bakes; steps below it are
// passed over.
func TestAdvanceRunsAStepAtTheCurrentPercent(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r, err := rel("202604.01.1", Draft, 0).SetPlan(testPlan(), now) // 1, 25, 100
	if err != nil {
		t.Fatal(err)
	}
	if r, err = r.SetScope(25, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r, err = r.Advance(now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r.Rollout.State != Rolling || r.Rollout.Plan.Step != 1 || r.Rollout.Percent != 25 {
		t.Errorf("after Advance: %s step %d at %d%%, want the 25%% step baking", r.Rollout.State, r.Rollout.Plan.Step, r.Rollout.Percent)
	}
}

// TestSkip: an operator's skip moves exactly past the current step, to the
// next, with a fresh bake; it is refused where there is nothing to skip.
func TestSkip(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	later := start.Add(5 * time.Minute)
	r, err := rel("202604.01.1", Draft, 0).SetPlan(canaryPlan(), start) // 5n, 50n, 1, 25, 100
	if err != nil {
		t.Fatal(err)
	}
	r, left, err := r.Skip(later)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 || r.Rollout.Plan.Step != 1 || r.Rollout.Percent != 0 || !r.Rollout.Plan.StepSince.Equal(later) {
		t.Errorf("skip of the first canary: left %d, now step %d at %d%% since %v; want left 0, the 50-node canary at 0%% since %v", left, r.Rollout.Plan.Step, r.Rollout.Percent, r.Rollout.Plan.StepSince, later)
	}
	if r, left, err = r.Skip(later); err != nil || left != 1 || r.Rollout.Plan.Step != 2 || r.Rollout.Percent != 1 {
		t.Errorf("skip of the second canary: left %d, step %d at %d%% (%v); want the 1%% step", left, r.Rollout.Plan.Step, r.Rollout.Percent, err)
	}
	// An operator's percentage took it past the 25% step: skip goes on to 100%.
	if r, err = r.SetScope(30, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r, _, err = r.Skip(later); err != nil || r.Rollout.Plan.Step != 4 || r.Rollout.Percent != 100 || r.Rollout.State != Rolling {
		t.Errorf("skip at 30%%: %s step %d at %d%% (%v); want rolling at the 100%% step", r.Rollout.State, r.Rollout.Plan.Step, r.Rollout.Percent, err)
	}
	if _, _, err := r.Skip(later); !errors.Is(err, ErrNoStepToSkip) || !strings.Contains(err.Error(), "lpsctl rollout complete 202604.01.1") {
		t.Errorf("skip at the last step: %v, want ErrNoStepToSkip naming rollout complete", err)
	}
	paused, _ := r.Transition(Paused)
	if _, _, err := paused.Skip(later); !errors.Is(err, ErrNoStepToSkip) || !strings.Contains(err.Error(), "rollout resume") {
		t.Errorf("skip while paused: %v, want ErrNoStepToSkip naming resume", err)
	}
	if _, _, err := rel("202604.01.2", Rolling, 10).Skip(later); !errors.Is(err, ErrNoStepToSkip) || !strings.Contains(err.Error(), "no plan") {
		t.Errorf("skip without a plan: %v, want ErrNoStepToSkip", err)
	}
	revoked := r
	revoked.Revoked = true
	if _, _, err := revoked.Skip(later); !errors.Is(err, ErrRevoked) {
		t.Errorf("skip of a revoked release: %v, want ErrRevoked", err)
	}
}

// TestResumeAfterHalt: resuming a halted release opens a fresh evidence
// window, so earlier reports no longer count; a pause keeps the window; a
// release halted while complete resumes to complete.
func TestResumeAfterHalt(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	resumed := start.Add(time.Hour)
	r, err := rel("202604.01.1", Draft, 0).SetPlan(testPlan(), start)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Rollout.Counts(start.Add(-time.Hour)) {
		t.Error("without an evidence window a report does not count")
	}
	paused, _ := r.Transition(Paused)
	if paused, err = paused.Resume(resumed); err != nil || !paused.Rollout.EvidenceSince.IsZero() {
		t.Errorf("resumed from paused: evidence since %v (%v), want no new window", paused.Rollout.EvidenceSince, err)
	}
	halted, err := r.Transition(Halted)
	if err != nil || halted.Rollout.HaltedFrom != Rolling {
		t.Fatalf("halted: from %q (%v), want rolling", halted.Rollout.HaltedFrom, err)
	}
	back, err := halted.Resume(resumed)
	if err != nil {
		t.Fatal(err)
	}
	if back.Rollout.State != Rolling || !back.Rollout.EvidenceSince.Equal(resumed) || back.Rollout.HaltedFrom != "" || !back.Rollout.Plan.StepSince.Equal(resumed) {
		t.Errorf("resumed from halted: %+v, want rolling with evidence and the bake from %v", back.Rollout, resumed)
	}
	for _, tt := range []struct {
		at   time.Time
		want bool
	}{{resumed.Add(-time.Nanosecond), false}, {resumed, true}, {resumed.Add(time.Second), true}} {
		if got := back.Rollout.Counts(tt.at); got != tt.want {
			t.Errorf("Counts(%v) after resuming at %v = %v, want %v", tt.at, resumed, got, tt.want)
		}
	}
	if got := describe(t, halted, back); !strings.Contains(got, "state halted→rolling") || !strings.Contains(got, "fresh evidence from 2026-12-01T01:00:00Z (reports accepted before it do not count)") {
		t.Errorf("DescribeChange of the resume = %q, want the state and the fresh evidence window", got)
	}

	complete, err := rel("202604.01.2", Rolling, 40).Transition(Complete)
	if err != nil {
		t.Fatal(err)
	}
	if halted, err = complete.Transition(Halted); err != nil || halted.Rollout.HaltedFrom != Complete {
		t.Fatalf("halting complete: from %q (%v)", halted.Rollout.HaltedFrom, err)
	}
	again, err := halted.Resume(resumed)
	if err != nil {
		t.Fatal(err)
	}
	if again.Rollout.State != Complete || again.Rollout.Percent != 100 || again.Rollout.HaltedFrom != "" || !again.Rollout.EvidenceSince.Equal(resumed) {
		t.Errorf("resumed a release halted while complete: %+v, want complete at 100%% with a fresh window", again.Rollout)
	}
	// A record halted before HaltedFrom was kept resumes to rolling.
	old := halted
	old.Rollout.HaltedFrom = ""
	if got, _ := old.Resume(resumed); got.Rollout.State != Rolling {
		t.Errorf("a halted record without halted_from resumed to %s, want rolling", got.Rollout.State)
	}
	if _, err := again.Resume(resumed); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("resuming a complete release: %v, want ErrInvalidTransition", err)
	}
}

func describe(t *testing.T, before, after Release) string {
	t.Helper()
	b, err := json.Marshal(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := json.Marshal(after)
	if err != nil {
		t.Fatal(err)
	}
	return DescribeChange(string(b), string(a))
}

// TestSchedule: each step's soonest window follows the one before it,
// from the current step on.
func TestSchedule(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := testPlan() // 30m, 1h, 1h
	p.Step, p.StepSince = 1, since
	got := p.Schedule()
	want := []StepWindow{{}, {since, since.Add(time.Hour)}, {since.Add(time.Hour), since.Add(2 * time.Hour)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Schedule (-want +got):\n%s", diff)
	}
}

// TestDescribePlanChanges: a plan put on, replaced, stepped or removed
// says so.
func TestDescribePlanChanges(t *testing.T) {
	t.Parallel()
	two := &Plan{Steps: []PlanStep{{Percent: 10, Bake: time.Hour, MinReports: 10}, {Percent: 100, Bake: time.Hour, MinReports: 50}}}
	three := &Plan{Steps: []PlanStep{{Nodes: 5, Bake: time.Hour, MinReports: 5}, {Percent: 10, Bake: time.Hour, MinReports: 10}, {Percent: 50, Bake: time.Hour, MinReports: 50}}, Step: 1}
	stepped := *two
	stepped.Step = 1
	with := func(p *Plan) Release { r := rel("202604.01.3", Rolling, 10); r.Rollout.Plan = p; return r }
	for _, tt := range []struct {
		name          string
		before, after *Plan
		want          string
	}{
		{"set", nil, two, "plan of 2 steps, at step 1/2"},
		{"replaced", two, three, "plan replaced by one of 3 steps, at step 2/3"},
		{"stepped", two, &stepped, "plan step 1/2→2/2"},
		{"removed", two, nil, "plan removed"},
		{"same", two, two, "no rollout change"},
	} {
		if got := describe(t, with(tt.before), with(tt.after)); got != tt.want {
			t.Errorf("%s: DescribeChange = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSeatSetAfterResume: a release's canary seats are its version's
// until a resume from a halt opens a fresh evidence window, which names a
// new set; a pause's resume keeps the set.
func TestSeatSetAfterResume(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := Release{Version: "202604.01.2", Rollout: Rollout{State: Rolling, Percent: 1}}
	if r.SeatSet() != r.Version {
		t.Fatalf("SeatSet = %q, want the version", r.SeatSet())
	}
	paused, _ := r.Transition(Paused)
	again, err := paused.Resume(now)
	if err != nil || again.SeatSet() != r.Version {
		t.Errorf("after a pause's resume SeatSet = %q (%v), want the version", again.SeatSet(), err)
	}
	halted, _ := r.Transition(Halted)
	retry, err := halted.Resume(now)
	if err != nil || retry.SeatSet() == r.Version || retry.SeatSet() == "" || strings.Contains(retry.SeatSet(), "/") {
		t.Errorf("after a halt's resume SeatSet = %q (%v), want a new set without \"/\"", retry.SeatSet(), err)
	}
	halted2, _ := retry.Transition(Halted)
	retry2, _ := halted2.Resume(now.Add(time.Minute))
	if retry2.SeatSet() == retry.SeatSet() {
		t.Errorf("a second retry reuses the first retry's seats %q", retry.SeatSet())
	}
}
