package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/duration"
)

// ErrPolicy is returned (wrapped) for an operator's change the rollout
// policy refuses. Its message names the rule, what the change asked and
// what would comply.
var ErrPolicy = errors.New("refused by the rollout policy")

// Policy is what lpsd enforces on every operator's change to a release's
// rollout, whoever asks and whatever the client: the platform team sets it
// on lpsd's command line, so a credential that may change rollouts cannot
// relax it. The zero Policy enforces nothing. The autopilot is not
// checked: it only follows plans, which were checked when they were set.
// Component configurations are not checked either: their timed plans
// judge no reports, so there is no canary to protect.
type Policy struct {
	// MinCanaryNodes, when positive, is the smallest canary a release
	// may start with: a release serving no percentage yet gets one only
	// through a plan whose first step is a canary of at least this many
	// nodes, advanced by the autopilot on its evidence (or left early with
	// a second operator's approval, when TwoPerson is on).
	MinCanaryNodes int
	// MaxStepPercent, when positive, is the most points one change or one
	// plan step may raise a release's percentage by.
	MaxStepPercent int
	// MinBake, when positive, is the shortest bake a plan step may have
	// (a final 100% step excepted: nothing follows it but complete), and
	// the least time between a rise of the percentage (Rollout.RaisedAt)
	// and an operator's next.
	MinBake time.Duration
	// TwoPerson makes changes wait for a second operator (Approval):
	// NeedsApproval says which.
	TwoPerson bool
}

// Limits of a Policy's fields.
const (
	// MaxPolicyBake is the longest MinBake: a plan step bakes at most
	// maxBake.
	MaxPolicyBake = maxBake
)

// Validate checks p's fields.
func (p Policy) Validate() error {
	switch {
	case p.MinCanaryNodes < 0 || p.MinCanaryNodes > MaxCanaryNodes:
		return fmt.Errorf("minimum canary %d nodes: want 0 (none) to %d", p.MinCanaryNodes, MaxCanaryNodes)
	case p.MaxStepPercent < 0 || p.MaxStepPercent > 100:
		return fmt.Errorf("largest step %d points: want 0 (none) to 100", p.MaxStepPercent)
	case p.MinBake < 0 || p.MinBake > MaxPolicyBake:
		return fmt.Errorf("shortest bake %s: want 0 (none) to %s", duration.Format(p.MinBake), duration.Format(MaxPolicyBake))
	}
	return nil
}

// Empty reports whether p enforces nothing.
func (p Policy) Empty() bool { return p == Policy{} }

// String describes p for people and logs.
func (p Policy) String() string {
	if p.Empty() {
		return "none"
	}
	var parts []string
	if p.MinCanaryNodes > 0 {
		parts = append(parts, fmt.Sprintf("a canary of at least %d nodes heard from first", p.MinCanaryNodes))
	}
	if p.MaxStepPercent > 0 {
		parts = append(parts, fmt.Sprintf("steps of at most %d points", p.MaxStepPercent))
	}
	if p.MinBake > 0 {
		parts = append(parts, "bakes of at least "+duration.Format(p.MinBake)+", between rises too")
	}
	if p.TwoPerson {
		parts = append(parts, "a second operator to leave or replan a canary early, serve nodes without a canary, resume a halted release or widen a serving release's scope")
	}
	return strings.Join(parts, "; ")
}

// Check returns nil if an operator's change at now of a release from cur
// to next complies with p, or an error wrapping ErrPolicy naming the first
// rule it breaks. approved says a second operator approved the change
// (Approval): it lets a release leave its canary early or widen its scope
// under MinCanaryNodes, and raise its percentage sooner than MinBake after
// the last rise; it relaxes nothing else. It decides from the two records
// alone, so every path that changes a rollout (a percentage, a scope, a
// plan, a skip, complete) is held to the same rules. A scope that grows
// while the release serves nodes serves new nodes at once: it counts as a
// rise from 0 to the release's percentage.
func (p Policy) Check(cur, next Release, approved bool, now time.Time) error {
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, a...))
	}
	from, to := cur.Rollout.Percent, next.Rollout.Percent
	if next.Rollout.State == Complete {
		to = 100
	}
	if pl := next.Rollout.Plan; pl != nil && planSet(cur, next) {
		if err := p.checkPlan(*pl, from); err != nil {
			return refuse("%s: %v", cur.Version, err)
		}
	}
	widens := widensServing(cur, next)
	if widens {
		from = 0
	}
	if to <= from {
		return nil
	}
	what := fmt.Sprintf("%s would go from %d%% to %d%%", cur.Version, from, to)
	if widens {
		what = fmt.Sprintf("%s would serve nodes outside the scope it was rolled out in, at %d%% at once", cur.Version, to)
	}
	if p.MaxStepPercent > 0 && to-from > p.MaxStepPercent {
		return refuse("%s, a step of %d points, and the largest allowed is %d; plan the rise in steps (lpsctl rollout plan %s --steps …), or for a wider scope publish a new patch version and roll it out",
			what, to-from, p.MaxStepPercent, cur.Version)
	}
	if last := cur.Rollout.RaisedAt; p.MinBake > 0 && !approved && !last.IsZero() && now.Sub(last) < p.MinBake {
		return refuse("%s, and its percentage last rose at %s: the shortest bake allowed is %s, so the next rise is from %s (or, with lpsd --policy-two-person, approved by a second operator)",
			what, last.UTC().Format(time.RFC3339), duration.Format(p.MinBake), last.Add(p.MinBake).UTC().Format(time.RFC3339))
	}
	if p.MinCanaryNodes > 0 && from == 0 && !(approved && (cur.AtCanary() || widens)) {
		switch {
		case cur.AtCanary():
			return refuse("%s would leave its canary before the autopilot advanced it on its evidence; wait for the step, or (with lpsd --policy-two-person) have a second operator approve leaving it", cur.Version)
		case widens:
			return refuse("%s, which no canary covered; publish a new patch version for the wider scope and start it with a canary, or (with lpsd --policy-two-person) have a second operator approve", what)
		}
		return refuse("%s serves no percentage yet, and a release starts with a canary of at least %d nodes: lpsctl rollout plan %s --steps %dn:BAKE:%d,…",
			cur.Version, p.MinCanaryNodes, cur.Version, p.MinCanaryNodes, p.MinCanaryNodes)
	}
	return nil
}

// Rises reports whether a change of a release from cur to next serves it
// to nodes it did not reach: a higher percentage, complete, or a wider
// scope while it serves. Rollout.RaisedAt records when.
func Rises(cur, next Release) bool {
	return next.Rollout.Percent > cur.Rollout.Percent ||
		next.Rollout.State == Complete && cur.Rollout.State != Complete ||
		widensServing(cur, next)
}

// widensServing reports whether next's scope reaches nodes cur's does not
// while cur serves nodes: new nodes served at once.
func widensServing(cur, next Release) bool { return Widens(cur, next) && cur.serving() }

// serving reports whether r serves nodes by its percentage: rolling or
// paused above 0 %, or complete.
func (r Release) serving() bool {
	return r.Rollout.State == Complete || r.Rollout.Percent > 0 && (r.Rollout.State == Rolling || r.Rollout.State == Paused)
}

// Widens reports whether next's scope (subscriptions, regions, deploy
// environments) reaches nodes cur's does not.
func Widens(cur, next Release) bool {
	return widens(cur.Rollout.Subscriptions, next.Rollout.Subscriptions) ||
		widens(cur.Rollout.Regions, next.Rollout.Regions) ||
		widens(cur.Rollout.DeployEnvs, next.Rollout.DeployEnvs)
}

// widens reports whether scope list b reaches what a does not, an empty
// list being everything.
func widens(a, b []string) bool {
	if len(a) == 0 {
		return false
	}
	if len(b) == 0 {
		return true
	}
	for _, x := range b {
		if !slices.ContainsFunc(a, func(y string) bool { return strings.EqualFold(x, y) }) {
			return true
		}
	}
	return false
}

// planSet reports whether next carries a plan cur did not: new steps or
// ceilings (a plan an operator set), not the same plan moved on a step.
func planSet(cur, next Release) bool {
	a, b := cur.Rollout.Plan, next.Rollout.Plan
	if a == nil || b == nil {
		return a != b
	}
	x, y := *a, *b
	x.Step, x.StepSince, y.Step, y.StepSince = 0, time.Time{}, 0, time.Time{}
	return !slices.Equal(x.Steps, y.Steps) || x.Margin != y.Margin || x.MaxFailureRate != y.MaxFailureRate ||
		x.SilentAfter != y.SilentAfter || x.MaxSilentRate != y.MaxSilentRate || x.MaxDeliveryRate != y.MaxDeliveryRate || x.Deadline != y.Deadline
}

// checkPlan checks the steps pl will run, from its current one, on a
// release at percent.
func (p Policy) checkPlan(pl Plan, percent int) error {
	steps := pl.Steps[pl.Step:]
	if p.MinCanaryNodes > 0 && percent == 0 {
		// Seats alone are not evidence: the canary must hear from as many
		// nodes before it may end.
		if first := steps[0]; !first.Canary() || first.Nodes < p.MinCanaryNodes || first.MinReports < p.MinCanaryNodes {
			return fmt.Errorf("the plan starts with %s needing %d reports, and a release starts with a canary of at least %d nodes heard from (a first step of %dn:BAKE:%d)", first, first.MinReports, p.MinCanaryNodes, p.MinCanaryNodes, p.MinCanaryNodes)
		}
	}
	prev := percent
	for i, s := range steps {
		n := pl.Step + i + 1
		if p.MinBake > 0 && s.Bake < p.MinBake && !(s.Percent == 100 && i == len(steps)-1) {
			return fmt.Errorf("step %d (%s) bakes %s, and the shortest bake allowed is %s", n, s, duration.Format(s.Bake), duration.Format(p.MinBake))
		}
		if s.Canary() {
			continue
		}
		if p.MaxStepPercent > 0 && s.Percent-prev > p.MaxStepPercent {
			return fmt.Errorf("step %d goes from %d%% to %d%%, a step of %d points, and the largest allowed is %d", n, prev, s.Percent, s.Percent-prev, p.MaxStepPercent)
		}
		prev = s.Percent
	}
	if p.MaxStepPercent > 0 && prev < 100 && 100-prev > p.MaxStepPercent {
		// After the last step the release completes, at 100%.
		return fmt.Errorf("the plan completes from its last step's %d%%, a step of %d points to 100%%, and the largest allowed is %d: end it with more steps", prev, 100-prev, p.MaxStepPercent)
	}
	return nil
}

// ApprovalTTL is how long a request for a second operator's approval
// stands: past it, the change must be asked for again.
const ApprovalTTL = time.Hour

// Approval is a change waiting for a second operator under the two-person
// rule (Policy.TwoPerson), kept on the release record so that every
// replica sees it and it is written in the same transaction as its audit
// entry. It stands only while the release is as it was when it was asked
// for (State, Percent, Step, Reason) and for ApprovalTTL.
type Approval struct {
	// Action is the audit action asked for (skip, complete, resume,
	// rollout-set).
	Action string `json:"action"`
	// Actor asked for it; another actor approves it by asking for the
	// same change.
	Actor  string    `json:"actor"`
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
	// Change says what was asked, for people (DescribeChange); Want is
	// ChangeDigest of the release it would leave: only the same change
	// approves it.
	Change string `json:"change,omitempty"`
	Want   string `json:"want"`
	// What the release was when it was asked for.
	State   State  `json:"state"`
	Percent int    `json:"percent"`
	Step    int    `json:"step"`
	Halt    string `json:"halt,omitempty"` // the rollout's Reason then
}

// Expires returns when a stands no longer.
func (a Approval) Expires() time.Time { return a.Time.Add(ApprovalTTL) }

// NewApproval returns actor's request, at now, for action moving r to
// next.
func NewApproval(r, next Release, action, actor, reason string, now time.Time) Approval {
	a := Approval{Action: action, Actor: actor, Reason: reason, Time: now, Want: ChangeDigest(next), Change: describeRelease(r, next)}
	a.State, a.Percent, a.Step, a.Halt = r.Rollout.State, r.Rollout.Percent, planStep(r), r.Rollout.Reason
	return a
}

// ChangeDigest identifies the rollout r is left with by a change, whenever
// it is asked for: its times (a step's start, the evidence window, the
// last rise) and any request on it are left out.
func ChangeDigest(r Release) string {
	ro := r.Rollout
	ro.Approval, ro.EvidenceSince, ro.RaisedAt, ro.Reason = nil, time.Time{}, time.Time{}, ""
	if ro.Plan != nil {
		p := *ro.Plan
		// SpreadOver is lpsd's count of the subscriptions seen, not
		// asked for: a second ask that counts one more is the same change.
		p.StepSince, p.SpreadOver = time.Time{}, 0
		ro.Plan = &p
	}
	b, err := json.Marshal(struct {
		Rollout Rollout `json:"rollout"`
		Revoked bool    `json:"revoked"`
	}{ro, r.Revoked})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// describeRelease is DescribeChange of r to next.
func describeRelease(r, next Release) string {
	a, aerr := json.Marshal(r)
	b, berr := json.Marshal(next)
	if aerr != nil || berr != nil {
		return "?"
	}
	return DescribeChange(string(a), string(b))
}

// Stands reports whether a still applies to r at now: asked for r as it
// is, and not expired.
func (a Approval) Stands(r Release, now time.Time) bool {
	return a.State == r.Rollout.State && a.Percent == r.Rollout.Percent && a.Step == planStep(r) && a.Halt == r.Rollout.Reason &&
		now.Before(a.Expires()) && !now.Before(a.Time.Add(-time.Minute))
}

func planStep(r Release) int {
	if r.Rollout.Plan == nil {
		return -1
	}
	return r.Rollout.Plan.Step
}

// NeedsApproval says whether, under p, an operator's change of a release
// from cur to next waits for a second operator, and why in words: leaving
// or replanning a canary the autopilot has not advanced, serving every
// node in scope without a canary having run, resuming a halted release
// (which opens a fresh evidence window, so the reports before it stop
// counting), and widening the scope of a release that serves nodes.
func (p Policy) NeedsApproval(cur, next Release) (string, bool) {
	if !p.TwoPerson {
		return "", false
	}
	// A canary is left by a percentage, by completing, or by moving to
	// another step (a skip, or a new plan starting elsewhere; a larger
	// canary included: the smaller one's evidence is what it gives up).
	leaves := next.Rollout.Percent > cur.Rollout.Percent || next.Rollout.State == Complete && cur.Rollout.State != Complete ||
		cur.AtCanary() && (next.Rollout.Plan == nil || next.Rollout.Plan.Current() != cur.Rollout.Plan.Current())
	switch {
	case cur.AtCanary() && cur.Rollout.State != Halted && leaves:
		return fmt.Sprintf("%s would leave its canary (%s) before the autopilot advanced it on its evidence", cur.Version, cur.Rollout.Plan.Current()), true
	case cur.AtCanary() && cur.Rollout.State != Halted && planSet(cur, next):
		return fmt.Sprintf("%s would change the plan (its steps or the ceilings it is judged by) of its running canary", cur.Version), true
	case !cur.Rollout.Canary && !next.Rollout.Canary && Rises(cur, next):
		return fmt.Sprintf("%s would serve more nodes without a canary having run", cur.Version), true
	case cur.Rollout.State == Halted && next.Rollout.State != Halted && !next.Revoked && cur.Rollout.Reason != "":
		return fmt.Sprintf("%s was halted by the autopilot (%s) and would serve nodes again, on a fresh evidence window", cur.Version, cur.Rollout.Reason), true
	case cur.Rollout.State == Halted && next.Rollout.State != Halted && !next.Revoked:
		return fmt.Sprintf("%s would serve nodes again after its halt, on a fresh evidence window: the reports before it would stop counting", cur.Version), true
	case widensServing(cur, next):
		return fmt.Sprintf("%s would serve nodes outside the scope it was rolled out in", cur.Version), true
	}
	return "", false
}
