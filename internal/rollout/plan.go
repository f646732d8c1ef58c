package rollout

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidPlan is returned (wrapped) for a plan that cannot run.
var ErrInvalidPlan = errors.New("invalid rollout plan")

// Plan is a rollout in steps that lpsd advances by itself while the release
// stays healthy and halts when it regresses (internal/autopilot). The
// first steps are the canary: either a number of nodes (seats, see
// PlanStep.Nodes) or a small percentage, that must gather their reports
// before more nodes get the release.
type Plan struct {
	// Steps are the canary steps by node count, strictly increasing, then
	// the percentages, strictly increasing; after the last (which may be
	// 100) the release completes.
	Steps []PlanStep `json:"steps"`
	// Margin is how many points the release's failure rate may exceed its
	// base's control cohort's before it is judged a regression (0.05: five
	// points).
	Margin float64 `json:"margin"`
	// MaxFailureRate is the absolute ceiling: a release that fails more
	// often than this halts whatever the control does.
	MaxFailureRate float64 `json:"max_failure_rate"`
	// SilentAfter is how long a canary seat's holder has to report before
	// it counts as failed (it hung or died before launch could report);
	// 0 means DefaultSilentAfter.
	SilentAfter time.Duration `json:"silent_after,omitempty"`
	// Step is the index of the current step, and StepSince when it began.
	Step      int       `json:"step"`
	StepSince time.Time `json:"step_since"`
	// Timed marks a plan stepped by time alone, a component
	// configuration's: percentages only, each held for its bake; no
	// reports, margin or ceiling, and no health rule judges it.
	Timed bool `json:"timed,omitempty"`
}

// PlanStep is one step of a plan: a percentage of the nodes in scope, or,
// when Nodes is set, a canary of exactly that many nodes.
type PlanStep struct {
	// Percent of in-scope nodes, by hash bucket; 0 for a canary step.
	Percent int `json:"percent"`
	// Nodes, for a canary step, is how many in-scope nodes may hold one of
	// the release's seats: the first to ask while the step runs take them,
	// and a seat is held for good, so canary nodes stay served through the
	// later steps. Seats are shared by replicas through the store.
	Nodes int `json:"nodes,omitempty"`
	// Bake is the least time the step runs before the next.
	Bake time.Duration `json:"bake"`
	// MinReports is how many reports the release must have (over all
	// steps so far) before the step may end. The health rule may halt on
	// fewer: it judges from the plan's smallest minimum (Floor) on, so a
	// later step's larger sample gates advancing, never halting.
	MinReports int `json:"min_reports"`
}

// Canary reports whether s is a canary step of a number of nodes.
func (s PlanStep) Canary() bool { return s.Nodes > 0 }

// passed reports whether a release at percent has gone past s: a canary
// step once any percentage is served, a percentage once it is reached.
func (s PlanStep) passed(percent int) bool {
	if s.Canary() {
		return percent > 0
	}
	return s.Percent <= percent
}

// DefaultSilentAfter is a plan's SilentAfter when it sets none: a node
// that took a seat and has not reported in this time is not provisioning
// any more (provisioning's own limits are well inside it).
const DefaultSilentAfter = 30 * time.Minute

// SilenceDeadline returns p's SilentAfter, or its default.
func (p Plan) SilenceDeadline() time.Duration {
	if p.SilentAfter == 0 {
		return DefaultSilentAfter
	}
	return p.SilentAfter
}

// Limits of a plan.
const (
	maxPlanSteps = 20
	maxBake      = 30 * 24 * time.Hour
	// MaxCanaryNodes bounds a canary step: every replica keeps the seats'
	// holders in memory, and a canary is meant to be small.
	MaxCanaryNodes = 10_000
)

// Validate checks p's invariants.
func (p Plan) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPlan, fmt.Sprintf(format, a...))
	}
	if len(p.Steps) == 0 || len(p.Steps) > maxPlanSteps {
		return bad("%d steps; want 1 to %d", len(p.Steps), maxPlanSteps)
	}
	prev, prevNodes := 0, 0
	for i, s := range p.Steps {
		switch {
		case s.Nodes < 0:
			return bad("step %d: %d nodes", i+1, s.Nodes)
		case s.Canary() && s.Percent != 0:
			return bad("step %d: both %d nodes and %d%%; a step is one or the other", i+1, s.Nodes, s.Percent)
		case s.Canary() && prev > 0:
			return bad("step %d: a canary of %d nodes after %d%%; canary steps come first", i+1, s.Nodes, prev)
		case s.Canary() && (s.Nodes <= prevNodes || s.Nodes > MaxCanaryNodes):
			return bad("step %d: a canary of %d nodes after %d; canary steps must grow, up to %d", i+1, s.Nodes, prevNodes, MaxCanaryNodes)
		case p.Timed && (s.Canary() || s.MinReports != 0):
			return bad("step %d: a timed plan steps percentages by time alone, without canary nodes or reports", i+1)
		case s.Canary() && s.MinReports > s.Nodes:
			// Each node counts once, so the step could never advance.
			return bad("step %d: min reports %d from a canary of %d nodes; it could never advance", i+1, s.MinReports, s.Nodes)
		case !s.Canary() && (s.Percent <= prev || s.Percent > 100):
			return bad("step %d: %d%% after %d%%; steps must grow, up to 100", i+1, s.Percent, prev)
		}
		if s.Bake < 0 || s.Bake > maxBake {
			return bad("step %d: bake %v out of range 0..%v", i+1, s.Bake, maxBake)
		}
		if !p.Timed && (s.MinReports < 1 || s.MinReports > 1_000_000) {
			return bad("step %d: min reports %d out of range 1..1000000", i+1, s.MinReports)
		}
		prev, prevNodes = s.Percent, max(prevNodes, s.Nodes)
	}
	if p.Timed {
		if p.Margin != 0 || p.MaxFailureRate != 0 || p.SilentAfter != 0 {
			return bad("a timed plan has no margin, failure ceiling or silent-after: nothing judges it")
		}
		if p.Step < 0 || p.Step >= len(p.Steps) {
			return bad("current step %d of %d", p.Step, len(p.Steps))
		}
		return nil
	}
	// Written so that NaN, which fails every comparison, is refused too.
	if !(p.Margin >= 0 && p.Margin < 1) {
		return bad("margin %v out of range [0, 1)", p.Margin)
	}
	if !(p.MaxFailureRate > 0 && p.MaxFailureRate <= 1) {
		return bad("max failure rate %v out of range (0, 1]", p.MaxFailureRate)
	}
	if p.SilentAfter != 0 && (p.SilentAfter < time.Minute || p.SilentAfter > 24*time.Hour) {
		return bad("silent-after %v out of range 1m..24h", p.SilentAfter)
	}
	if p.Step < 0 || p.Step >= len(p.Steps) {
		return bad("current step %d of %d", p.Step, len(p.Steps))
	}
	return nil
}

// Current returns the step the plan is at.
func (p Plan) Current() PlanStep { return p.Steps[p.Step] }

// Floor returns the plan's smallest MinReports: the fewest reports the
// health rule judges a release, or its control, on.
func (p Plan) Floor() int {
	floor := p.Steps[0].MinReports
	for _, s := range p.Steps[1:] {
		floor = min(floor, s.MinReports)
	}
	return floor
}

// Due returns when the current step's bake ends.
func (p Plan) Due() time.Time { return p.StepSince.Add(p.Current().Bake) }

// HasCanary reports whether p has canary steps, whose seat holders stay
// served whatever the step.
func (p Plan) HasCanary() bool { return p.Steps[0].Canary() }

// HasCanary reports whether r has had a plan with a canary of a number of
// nodes, whose seat holders stay served.
func (r Release) HasCanary() bool { return r.Rollout.Canary }

// OpenSeats returns how many seats r's canary has while a node of n's
// scope may take one: r is rolling at a canary step and n is in scope.
// Otherwise it returns 0 and no seat may be taken.
func (r Release) OpenSeats(n Node) int {
	if r.Revoked || r.Rollout.State != Rolling || !r.HasCanary() || !r.inScope(n) {
		return 0
	}
	if p := r.Rollout.Plan; p.Step < len(p.Steps) {
		return p.Steps[p.Step].Nodes
	}
	return 0
}

// SetPlan returns r rolling under plan p from its first step that is
// above r's current percentage (a percentage never shrinks), started at
// now. A draft starts rolling; a paused, halted, complete or revoked
// release is refused.
func (r Release) SetPlan(p Plan, now time.Time) (Release, error) {
	if p.Timed {
		return r, fmt.Errorf("%w: %s is a release: its plan is judged on its nodes' reports, so it needs a margin, a failure ceiling and min reports per step", ErrInvalidPlan, r.Version)
	}
	return r.setPlan(p, now)
}

// setPlan is SetPlan for any plan.
func (r Release) setPlan(p Plan, now time.Time) (Release, error) {
	if r.Revoked {
		return r, revokedError(r.Version)
	}
	switch r.Rollout.State {
	case Paused, Halted:
		return r, fmt.Errorf("%w: %s is %s; a plan needs a draft or rolling release: `lpsctl rollout resume %s` first", ErrInvalidTransition, r.Version, r.Rollout.State, r.Version)
	case Complete:
		return r, fmt.Errorf("%w: %s is complete: it serves every node in its scope, and has no steps left to plan", ErrInvalidTransition, r.Version)
	}
	p.Step, p.StepSince = 0, now
	if err := p.Validate(); err != nil {
		return r, err
	}
	for p.Step < len(p.Steps)-1 && p.Steps[p.Step].passed(r.Rollout.Percent) {
		p.Step++
	}
	percent := max(r.Rollout.Percent, p.Current().Percent)
	r, err := r.SetScope(percent, nil, nil)
	if err != nil {
		return r, err
	}
	r.Rollout.Plan = &p
	r.Rollout.Canary = r.Rollout.Canary || p.HasCanary()
	return r, nil
}

// Advance returns r moved to its plan's next step at now, or completed
// after the last one.
func (r Release) Advance(now time.Time) (Release, error) {
	p := r.Rollout.Plan
	if p == nil {
		return r, fmt.Errorf("%w: %s has no plan", ErrInvalidPlan, r.Version)
	}
	if r.Rollout.State != Rolling {
		return r, fmt.Errorf("%w: %s is %s, not rolling", ErrInvalidTransition, r.Version, r.Rollout.State)
	}
	next := *p
	next.Steps = append([]PlanStep(nil), p.Steps...)
	next.Step++
	for next.Step < len(next.Steps) && next.Steps[next.Step].passed(r.Rollout.Percent) {
		next.Step++
	}
	if next.Step >= len(next.Steps) {
		next.Step = len(next.Steps) - 1
		out, err := r.Transition(Complete)
		if err != nil {
			return r, err
		}
		out.Rollout.Plan = &next
		return out, nil
	}
	next.StepSince = now
	out, err := r.SetScope(next.Current().Percent, nil, nil)
	if err != nil {
		return r, err
	}
	out.Rollout.Plan = &next
	return out, nil
}
