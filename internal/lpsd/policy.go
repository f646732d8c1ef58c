package lpsd

import (
	"flag"

	"nodehotfix/internal/rollout"
)

// policyFlags are the flags of the rollout policy every operator's change
// is held to (rollout.Policy).
type policyFlags struct {
	p rollout.Policy
}

func (f *policyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.p.MinCanaryNodes, "policy-min-canary", 0, "the smallest canary, in `nodes`, a release may start with: it serves a percentage only after a plan's canary of at least this many nodes that hears from as many (0: none)")
	fs.IntVar(&f.p.MaxStepPercent, "policy-max-step", 0, "the most `points` one change or plan step may raise a release's percentage by, completing included (0: none)")
	fs.Var(durationValue{&f.p.MinBake}, "policy-min-bake", "the shortest bake a plan step may have, a final 100% step excepted, and the least time between an operator's rises of a percentage (`duration`: 30m, 2h, 1d; 0: none)")
	fs.BoolVar(&f.p.TwoPerson, "policy-two-person", false, "a second operator (another actor) approves leaving or replanning a canary early, serving nodes without a canary, resuming a halted release and widening a serving release's scope")
}

// policy is the rollout.Policy the flags give, or a usage error.
func (f policyFlags) policy() (rollout.Policy, error) {
	if err := f.p.Validate(); err != nil {
		return f.p, usagef("--policy-*: %v", err)
	}
	return f.p, nil
}
