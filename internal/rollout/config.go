package rollout

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"nodehotfix/internal/release"
)

// Config is a published configuration of a component other than the agent
// (localDNS, say) and its rollout. Its rollout is a release's: the same
// states, percentage by hash bucket, subscription, region and
// deploy-environment scope, and revocation, evaluated by the same code
// (Includes). Its plans are timed (Plan.Timed): nothing reports on a
// component, so no health rule judges it.
type Config struct {
	// Component is the component's name (release.ValidComponentName).
	Component string `json:"component"`
	// Version numbers the component's configurations; with Component it
	// identifies the record (ID).
	Version int64 `json:"version"`
	// Envelope is the configuration as signed offline
	// (release.SignComponent); it is served with the configuration.
	Envelope json.RawMessage `json:"envelope"`
	Rollout  Rollout         `json:"rollout"`
	Revoked  bool            `json:"revoked,omitempty"`
	// NotAfter is the envelope's signed expiry, set at publish; zero means
	// unknown, which Includes treats as expired.
	NotAfter time.Time `json:"not_after,omitzero"`
	// PublishedAt and UpdatedAt are set by the service.
	PublishedAt time.Time `json:"published_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// ConfigID returns the identifier of a component's configuration version,
// "<component>@<version>" (localDNS@3): what operators name it by. No
// release version contains "@".
func ConfigID(component string, version int64) string {
	return component + "@" + strconv.FormatInt(version, 10)
}

// ID returns c's identifier (ConfigID).
func (c Config) ID() string { return ConfigID(c.Component, c.Version) }

// ParseConfigID splits an identifier ConfigID made. ok is false for
// anything else, a release version included.
func ParseConfigID(id string) (component string, version int64, ok bool) {
	name, v, found := strings.Cut(id, "@")
	if !found || !release.ValidComponentName(name) {
		return "", 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > release.MaxComponentVersion || strconv.FormatInt(n, 10) != v {
		return "", 0, false
	}
	return name, n, true
}

// Validate checks c's invariants.
func (c Config) Validate() error {
	if _, _, ok := ParseConfigID(c.ID()); !ok {
		return fmt.Errorf("component config %q: not a component name and a version of 1 to %d", c.ID(), int64(release.MaxComponentVersion))
	}
	if len(c.Envelope) == 0 {
		return fmt.Errorf("component config %s: no signed envelope", c.ID())
	}
	if c.Rollout.Plan != nil && !c.Rollout.Plan.Timed {
		return fmt.Errorf("component config %s: a plan judged on reports; a component's plans are timed", c.ID())
	}
	if err := c.view().validateRollout(); err != nil {
		return err
	}
	return nil
}

// validateRollout checks the rollout's invariants, as Validate does for a
// release.
func (r Release) validateRollout() error {
	if !r.Rollout.State.Valid() {
		return fmt.Errorf("%s: unknown rollout state %q", r.Version, r.Rollout.State)
	}
	if r.Rollout.Percent < 0 || r.Rollout.Percent > 100 {
		return fmt.Errorf("%s: percent %d out of range 0..100", r.Version, r.Rollout.Percent)
	}
	if r.Rollout.Plan != nil {
		if err := r.Rollout.Plan.Validate(); err != nil {
			return fmt.Errorf("%s: %w", r.Version, err)
		}
	}
	return nil
}

// view returns c as a release record named by its ID, so that one
// implementation of the rollout rules serves both.
func (c Config) view() Release {
	return Release{Version: c.ID(), Envelope: c.Envelope, Rollout: c.Rollout, Revoked: c.Revoked, NotAfter: c.NotAfter}
}

// with returns c with r's rollout and revocation.
func (c Config) with(r Release) Config {
	c.Rollout, c.Revoked = r.Rollout, r.Revoked
	return c
}

// WithNotAfter returns c with NotAfter read from its envelope when unset.
func (c Config) WithNotAfter() Config {
	if c.NotAfter.IsZero() {
		if cc, err := release.InspectComponent(c.Envelope); err == nil {
			c.NotAfter = cc.NotAfter
		}
	}
	return c
}

// Expired reports whether c's envelope no longer verifies at now, or
// cannot be shown to.
func (c Config) Expired(now time.Time) bool { return c.view().Expired(now) }

// Transition returns c moved to state to, as Release.Transition.
func (c Config) Transition(to State) (Config, error) {
	r, err := c.view().Transition(to)
	return c.with(r), err
}

// Resume returns c rolling again at now, as Release.Resume.
func (c Config) Resume(now time.Time) (Config, error) {
	r, err := c.view().Resume(now)
	return c.with(r), err
}

// SetScope returns c with a new percentage and scope, as
// Release.SetScope.
func (c Config) SetScope(percent int, subscriptions, regions []string) (Config, error) {
	r, err := c.view().SetScope(percent, subscriptions, regions)
	return c.with(r), err
}

// SetDeployEnvs returns c with a new deploy-environment scope, as
// Release.SetDeployEnvs.
func (c Config) SetDeployEnvs(envs []string) (Config, error) {
	r, err := c.view().SetDeployEnvs(envs)
	return c.with(r), err
}

// SetPlan returns c rolling under the timed plan p from now, as
// Release.SetPlan; a plan that is not timed is refused (ErrInvalidPlan).
func (c Config) SetPlan(p Plan, now time.Time) (Config, error) {
	if !p.Timed {
		return c, fmt.Errorf("%w: %s is a component configuration: nothing reports on it, so its plan is timed (percentages and bake times only)", ErrInvalidPlan, c.ID())
	}
	r, err := c.view().setPlan(p, now)
	return c.with(r), err
}

// Advance returns c moved to its plan's next step at now, or completed
// after the last, as Release.Advance.
func (c Config) Advance(now time.Time) (Config, error) {
	r, err := c.view().Advance(now)
	return c.with(r), err
}

// Served returns what nodes are served for c: its configuration with its
// envelope beside it (release.ServedComponent).
func (c Config) Served() ([]byte, error) { return release.ServedComponent(c.Envelope) }

// Skip returns c moved, as an operator asked at now, past its plan's
// current step, with the index of the step it left, as Release.Skip.
func (c Config) Skip(now time.Time) (Config, int, error) {
	r, from, err := c.view().Skip(now)
	return c.with(r), from, err
}

// Due reports whether c's timed plan has a step to take at now: c is
// rolling and the current step's bake has ended.
func (c Config) Due(now time.Time) bool {
	p := c.Rollout.Plan
	return p != nil && p.Timed && !c.Revoked && c.Rollout.State == Rolling && !now.Before(p.Due())
}

// Includes reports whether c is served to n, with the rules that decided:
// a release's rules (Release.Includes), bucketed by c's ID.
func (c Config) Includes(n Node) (bool, []Rule) { return c.view().Includes(n) }

// CompareConfigs orders configurations by component, then version: the
// order stores list them in.
func CompareConfigs(a, b Config) int {
	return cmp.Or(strings.Compare(a.Component, b.Component), cmp.Compare(a.Version, b.Version))
}

// SelectConfig returns the configuration of component served to n: the
// highest version whose rollout includes n. ok is false when none does.
func SelectConfig(configs []Config, component string, n Node) (Config, bool) {
	var best Config
	found := false
	for _, c := range configs {
		if c.Component != component || (found && c.Version <= best.Version) {
			continue
		}
		if ok, _ := c.Includes(n); ok {
			best, found = c, true
		}
	}
	return best, found
}

// ExplainConfigs returns, for every configuration of component, whether it
// includes n and why, in version order, and the one SelectConfig chooses.
func ExplainConfigs(configs []Config, component string, n Node) ([]Decision, Config, bool) {
	chosen, found := SelectConfig(configs, component, n)
	var out []Decision
	for _, c := range configs {
		if c.Component != component {
			continue
		}
		ok, rules := c.Includes(n)
		out = append(out, Decision{Version: c.ID(), Included: ok, Chosen: found && c.Version == chosen.Version, Rules: rules})
	}
	slices.SortFunc(out, func(a, b Decision) int {
		_, va, _ := ParseConfigID(a.Version)
		_, vb, _ := ParseConfigID(b.Version)
		return cmp.Compare(va, vb)
	})
	return out, chosen, found
}
