package rollout

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrInvalidPlan is returned (wrapped) for a plan that cannot run.
var ErrInvalidPlan = errors.New("invalid rollout plan")

// ErrStepPassed is returned (wrapped) by SetPlan for a plan that would
// start at a step the release is already past: a canary once any
// percentage is served, or a percentage below the release's. Its message
// names the step and where the plan could start instead.
var ErrStepPassed = errors.New("the release is past a step of the plan")

// ErrNoStepToSkip is returned (wrapped) by Skip when the release has no
// plan step it can skip to: no plan, not rolling, or at its last step.
var ErrNoStepToSkip = errors.New("no plan step to skip")

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
	// Step is the index of the current step (from 0), and StepSince when
	// it began. A plan given to SetPlan starts at Step.
	Step      int       `json:"step"`
	StepSince time.Time `json:"step_since"`
	// Timed marks a plan stepped by time alone, a component
	// configuration's: percentages only, each held for its bake; no
	// reports, margin or ceiling, and no health rule judges it.
	Timed bool `json:"timed,omitempty"`
	// MaxSilentRate and MaxDeliveryRate are the ceilings of the release's
	// silent nodes and of those that could not get it (refusedDelivery),
	// each a rate of its own; 0 means DefaultMaxRate.
	MaxSilentRate   float64 `json:"max_silent_rate,omitempty"`
	MaxDeliveryRate float64 `json:"max_delivery_rate,omitempty"`
	// Deadline is how long past its bake a step may wait for enough
	// evidence before the release pauses as inconclusive (or stalled, if
	// it reached no node); 0 means DefaultDeadline.
	Deadline time.Duration `json:"deadline,omitempty"`
	// SpreadOver is, for a release scoped to every subscription, how many
	// subscriptions its base's nodes were seen in when the plan was set or
	// the scope widened to every subscription, if they could fill its
	// first canary step under the per-subscription bound (lpsd counts them
	// over admin.SeenWindow: SpreadCount): its canary's seats are spread
	// as over a scope listing that many (SeatsPerSubscription). 0: not
	// counted (a plan set before lpsd counted them), or a fleet that could
	// not fill its canary under the bound.
	SpreadOver int `json:"spread_over,omitempty"`
}

// DefaultMaxRate is the default ceiling of the silent and the
// refused-for-delivery rates.
const DefaultMaxRate = 0.2

// DefaultDeadline is a plan's Deadline when it sets none.
const DefaultDeadline = 6 * time.Hour

// SilentCeiling returns p's MaxSilentRate, or its default.
func (p Plan) SilentCeiling() float64 {
	if p.MaxSilentRate == 0 {
		return DefaultMaxRate
	}
	return p.MaxSilentRate
}

// DeliveryCeiling returns p's MaxDeliveryRate, or its default.
func (p Plan) DeliveryCeiling() float64 {
	if p.MaxDeliveryRate == 0 {
		return DefaultMaxRate
	}
	return p.MaxDeliveryRate
}

// StepDeadline returns when the current step's wait for evidence ends.
func (p Plan) StepDeadline() time.Time {
	d := p.Deadline
	if d == 0 {
		d = DefaultDeadline
	}
	return p.Due().Add(d)
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
// step once any percentage is served, a percentage once the release's is
// above it. A step at the release's own percentage is not passed: it has
// not baked there under the plan.
func (s PlanStep) passed(percent int) bool {
	if s.Canary() {
		return percent > 0
	}
	return s.Percent < percent
}

// String describes s for people: "a canary of 20 nodes" or "10%".
func (s PlanStep) String() string {
	if s.Canary() {
		return fmt.Sprintf("a canary of %d nodes", s.Nodes)
	}
	return fmt.Sprintf("%d%%", s.Percent)
}

// whyPassed says why a release at percent cannot run s, which it passed.
func (s PlanStep) whyPassed(percent int) string {
	if s.Canary() {
		return fmt.Sprintf("a canary of nodes runs only before any percentage is served, and %d%% is", percent)
	}
	return fmt.Sprintf("its %d%% is below the release's %d%%, and a percentage never shrinks", s.Percent, percent)
}

// DefaultSilentAfter is a plan's SilentAfter when it sets none: a node
// that took a seat and has not reported in this time is not provisioning
// any more (provisioning's own limits are well inside it).
const DefaultSilentAfter = 30 * time.Minute

// MaxSilentAfter is the longest SilentAfter a plan may set.
const MaxSilentAfter = 24 * time.Hour

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
		if p.Margin != 0 || p.MaxFailureRate != 0 || p.SilentAfter != 0 || p.MaxSilentRate != 0 || p.MaxDeliveryRate != 0 || p.Deadline != 0 {
			return bad("a timed plan has no margin, ceilings, silent-after or deadline: nothing judges it")
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
	if p.SilentAfter != 0 && (p.SilentAfter < time.Minute || p.SilentAfter > MaxSilentAfter) {
		return bad("silent-after %v out of range 1m..24h", p.SilentAfter)
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"max silent rate", p.MaxSilentRate}, {"max delivery rate", p.MaxDeliveryRate}} {
		if !(c.v >= 0 && c.v <= 1) {
			return bad("%s %v out of range [0, 1] (0: the default, %v)", c.name, c.v, DefaultMaxRate)
		}
	}
	if p.Deadline != 0 && (p.Deadline < time.Minute || p.Deadline > maxBake) {
		return bad("deadline %v out of range 1m..%v", p.Deadline, maxBake)
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

// SpreadCount returns p's SpreadOver for a scope of every subscription
// whose base's nodes were seen as nodes gives (distinct vmIds by
// subscription): how many subscriptions they were seen in, if those nodes
// can fill p's first canary step of S seats with no subscription holding
// more than its share ⌈S/10⌉ (the sum over subscriptions of min(nodes,
// share) is at least S), else 0: no bound, since the canary could not
// fill under it (one large subscription beside nine of a node each
// would stall at its first step). Many small subscriptions only add to
// what fills under the bound, so they cannot lift it. A later, larger
// step is bounded too and may stall short of its seats, which pauses
// the release as inconclusive at its deadline rather than lifting the
// bound for every step. It is 0 for a plan without a canary.
func (p Plan) SpreadCount(nodes map[string]int) int {
	if !p.HasCanary() {
		return 0
	}
	seats := p.Steps[0].Nodes
	share, fill := (seats+9)/10, 0
	for _, n := range nodes {
		fill += min(n, share)
	}
	if fill < seats {
		return 0
	}
	return len(nodes)
}

// SpreadSubscriptions is how many subscriptions a release's scope must
// list before its canary's seats are spread over them.
const SpreadSubscriptions = 10

// SeatsPerSubscription returns how many of a canary's seats one
// subscription's nodes may hold: ⌈seats/10⌉ when r's scope lists at least
// SpreadSubscriptions subscriptions, or, scoped to every subscription, its
// plan's SpreadOver is at least that, so that N attested VMs in k of them
// hold at most min(N, k·⌈seats/10⌉) seats; else 0, no bound (a scope of a
// few subscriptions, or a base seen in fewer: a small fleet, whose
// canary could not fill under the bound).
func (r Release) SeatsPerSubscription(seats int) int {
	n := len(r.Rollout.Subscriptions)
	if p := r.Rollout.Plan; n == 0 && p != nil {
		n = p.SpreadOver
	}
	if n < SpreadSubscriptions {
		return 0
	}
	return (seats + 9) / 10
}

// SetPlan returns r rolling under plan p from its step p.Step (0: the
// first), begun at now, at that step's percentage or r's, whichever is
// higher (a percentage never shrinks). The steps before p.Step are
// skipped, as asked; no step is skipped unasked: a start step r is
// already past (PlanStep.passed: a canary once r serves any percentage, a
// percentage below r's) is refused with ErrStepPassed, naming the first
// step the plan could start at. A draft starts rolling; a paused, halted,
// complete or revoked release is refused. The evidence window
// (Rollout.EvidenceSince) is kept.
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
	p.StepSince = now
	if err := p.Validate(); err != nil {
		return r, err
	}
	pct := r.Rollout.Percent
	if start := p.Steps[p.Step]; start.passed(pct) {
		first := p.Step
		for first < len(p.Steps) && p.Steps[first].passed(pct) {
			first++
		}
		what := fmt.Sprintf("%s is at %d%%, past step %d of the plan (%s): %s", r.Version, pct, p.Step+1, start, start.whyPassed(pct))
		if first == len(p.Steps) {
			return r, fmt.Errorf("%w: %s, and so is every later step; for every node in scope, `lpsctl rollout complete %s`; or plan steps above %d%%", ErrStepPassed, what, r.Version, pct)
		}
		return r, fmt.Errorf("%w: %s; a plan skips no step unless told to: to start it at step %d (%s), add --from-step %d (from_step %d in the API)", ErrStepPassed, what, first+1, p.Steps[first], first+1, first+1)
	}
	percent := max(pct, p.Current().Percent)
	r, err := r.SetScope(percent, nil, nil)
	if err != nil {
		return r, err
	}
	r.Rollout.Plan = &p
	r.Rollout.Canary = r.Rollout.Canary || p.HasCanary()
	return r, nil
}

// Skip returns r moved, as an operator asked at now, from its plan's
// current step to the next one it has not passed (steps an operator's
// percentage took it past are passed over too), begun at now, with the
// index of the step it left. It is refused with ErrNoStepToSkip unless r
// is rolling under a plan with such a step: at the last step, completing
// is `lpsctl rollout complete`.
func (r Release) Skip(now time.Time) (Release, int, error) {
	if r.Revoked {
		return r, 0, revokedError(r.Version)
	}
	p := r.Rollout.Plan
	switch {
	case p == nil:
		return r, 0, fmt.Errorf("%w: %s has no plan; `lpsctl rollout plan %s --steps …` puts it on one", ErrNoStepToSkip, r.Version, r.Version)
	case r.Rollout.State == Paused || r.Rollout.State == Halted:
		return r, 0, fmt.Errorf("%w: %s is %s: its plan waits; `lpsctl rollout resume %s` first", ErrNoStepToSkip, r.Version, r.Rollout.State, r.Version)
	case r.Rollout.State != Rolling:
		return r, 0, fmt.Errorf("%w: %s is %s: its plan has no step left to skip", ErrNoStepToSkip, r.Version, r.Rollout.State)
	}
	next := *p
	next.Steps = slices.Clone(p.Steps)
	next.Step++
	for next.Step < len(next.Steps) && next.Steps[next.Step].passed(r.Rollout.Percent) {
		next.Step++
	}
	if next.Step >= len(next.Steps) {
		return r, 0, fmt.Errorf("%w: %s is at step %d/%d (%s), the last it can be at; to serve every node in scope, `lpsctl rollout complete %s`", ErrNoStepToSkip, r.Version, p.Step+1, len(p.Steps), p.Current(), r.Version)
	}
	next.StepSince = now
	out, err := r.SetScope(max(r.Rollout.Percent, next.Current().Percent), nil, nil)
	if err != nil {
		return r, 0, err
	}
	out.Rollout.Plan = &next
	return out, p.Step, nil
}

// StepWindow is when a plan step can begin and end at the soonest: each
// step runs at least its bake, and the next begins when it ends (if the
// step's reports are in by then, and the release stays healthy).
type StepWindow struct {
	Start, End time.Time
}

// Schedule returns, for each of p's steps, its window at the soonest: the
// current step's from StepSince, each later one's from the end of the one
// before. Steps before the current one (done, or skipped) get zero
// windows. The release completes at the last step's End at the soonest.
func (p Plan) Schedule() []StepWindow {
	out := make([]StepWindow, len(p.Steps))
	at := p.StepSince
	for i := p.Step; i >= 0 && i < len(p.Steps); i++ {
		out[i] = StepWindow{Start: at, End: at.Add(p.Steps[i].Bake)}
		at = out[i].End
	}
	return out
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
		out.Rollout.RaisedAt = now
		return out, nil
	}
	next.StepSince = now
	out, err := r.SetScope(next.Current().Percent, nil, nil)
	if err != nil {
		return r, err
	}
	out.Rollout.Plan = &next
	if Rises(r, out) {
		out.Rollout.RaisedAt = now
	}
	return out, nil
}
