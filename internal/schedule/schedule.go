// Package schedule advances component configurations along their timed
// plans when each step's bake ends.
//
// Nothing reports on a component, so nothing judges one: a timed plan
// (rollout.Plan.Timed) only waits. Every replica runs a Schedule; each
// advance is a compare-and-swap on the configuration's revision, so of
// replicas advancing the same step at once one wins and the others see a
// conflict and leave it. Every advance is an audit entry with the
// autopilot's actor and action (autopilot.Actor, autopilot.ActionAdvance).
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"nodehotfix/internal/autopilot"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// DefaultInterval is how often a Schedule looks: bake times are minutes
// at the least, and a look reads only the configurations.
const DefaultInterval = 10 * time.Second

// Store is what a Schedule reads and changes.
type Store interface {
	Configs(ctx context.Context) ([]rollout.Config, int64, error)
	Config(ctx context.Context, component string, version int64) (rollout.Config, int64, error)
	PutConfig(ctx context.Context, c rollout.Config, ifRev int64, a store.AuditEntry) (int64, error)
}

// Config holds the optional settings; the zero Config works.
type Config struct {
	// Interval between looks; zero means DefaultInterval.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives every advance and conflict; nil discards.
	Log *slog.Logger
}

// Schedule advances the timed plans of one store.
type Schedule struct {
	st  Store
	cfg Config
}

// New returns a Schedule over st.
func New(st Store, cfg Config) *Schedule {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Schedule{st: st, cfg: cfg}
}

// Run looks every Interval until ctx ends. A failed look is logged and the
// next one tries again.
func (s *Schedule) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := s.Step(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("schedule look failed", "err", err)
		}
	}
}

// Evidence is an advance's audit evidence.
type Evidence struct {
	// Step is the plan step that ended (its index, as rollout.Plan.Step),
	// Due when its bake did.
	Step int       `json:"step"`
	Due  time.Time `json:"due"`
	Rule string    `json:"rule"`
}

const ruleText = "timed plan: advance once the step's bake time has passed; nothing reports on a component, so nothing else is judged"

// Step looks once: it advances every rolling configuration whose timed
// plan is due (rollout.Config.Due), and returns the IDs it advanced.
func (s *Schedule) Step(ctx context.Context) ([]string, error) {
	configs, _, err := s.st.Configs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list component configs: %w", err)
	}
	now := s.cfg.Now()
	frozen, err := autopilot.Frozen(ctx, s.st)
	if frozen {
		// Every rollout is frozen (or the freeze cannot be read): no
		// timed step advances, as no planned one does.
		return nil, err
	}
	var advanced []string
	var errs []error
	for _, c := range configs {
		if !c.Due(now) {
			continue
		}
		err := s.advance(ctx, c, now)
		switch {
		case errors.Is(err, errMoved):
			s.cfg.Log.Info("schedule left a component config that changed meanwhile", "config", c.ID())
		case err != nil:
			errs = append(errs, err)
		default:
			advanced = append(advanced, c.ID())
		}
	}
	return advanced, errors.Join(errs...)
}

// errMoved: the configuration changed between the list and the write (an
// operator, or another replica); this look leaves it.
var errMoved = errors.New("component config changed meanwhile")

func (s *Schedule) advance(ctx context.Context, listed rollout.Config, now time.Time) error {
	cur, rev, err := s.st.Config(ctx, listed.Component, listed.Version)
	if err != nil {
		return fmt.Errorf("read component config %s: %w", listed.ID(), err)
	}
	if !cur.Due(now) || cur.Rollout.Plan.Step != listed.Rollout.Plan.Step {
		return errMoved
	}
	next, err := cur.Advance(now)
	if err != nil {
		return fmt.Errorf("advance component config %s: %w", cur.ID(), err)
	}
	next.UpdatedAt = now
	before, err := json.Marshal(cur)
	if err != nil {
		return fmt.Errorf("advance component config %s: %w", cur.ID(), err)
	}
	after, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("advance component config %s: %w", cur.ID(), err)
	}
	p := cur.Rollout.Plan
	evidence, err := json.Marshal(Evidence{Step: p.Step, Due: p.Due(), Rule: ruleText})
	if err != nil {
		return fmt.Errorf("advance component config %s: %w", cur.ID(), err)
	}
	reason := fmt.Sprintf("timed plan: step %d/%d baked until %s; now at %d%%", p.Step+1, len(p.Steps), p.Due().UTC().Format(time.RFC3339), next.Rollout.Percent)
	if f, _ := autopilot.Frozen(ctx, s.st); f {
		return errMoved // frozen since the look began
	}
	newRev, err := s.st.PutConfig(ctx, next, rev, store.AuditEntry{
		Time: now, Actor: autopilot.Actor, Action: autopilot.ActionAdvance, Target: cur.ID(),
		Before: before, After: after, Evidence: evidence, Reason: reason,
	})
	if errors.Is(err, store.ErrConflict) {
		return errMoved
	}
	if err != nil {
		return fmt.Errorf("advance component config %s: %w", cur.ID(), err)
	}
	s.cfg.Log.Info("component config advanced", "config", cur.ID(), "percent", next.Rollout.Percent, "state", next.Rollout.State, "revision", newRev)
	return nil
}
