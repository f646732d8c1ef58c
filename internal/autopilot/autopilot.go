// Package autopilot steps planned rollouts on the fleet's outcome reports:
// it advances a healthy one and halts a regressing one, by itself.
//
// Every replica runs one; on a shared store (etcd) only the elected leader
// looks, so decisions that compare times (deadlines, silence, bakes) are
// taken on one clock, and a leader whose clock is off the others' steps
// down. Each change is also a compare-and-swap on the release's revision,
// so of replicas deciding the same step at once (two leaders across a
// lease's expiry) exactly one acts and the others see a conflict and leave
// it; an operator's change in between wins the same way. Every change is an audit entry with actor
// "lpsd" and the evidence: the counts, the rule and its numbers.
package autopilot

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/clip"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Actor is the audit log's actor for the autopilot's changes.
const Actor = "lpsd"

// Audit actions.
const (
	ActionAdvance = "auto-advance"
	ActionHalt    = "auto-halt"
	// ActionPause: a step's deadline passed without the evidence to
	// advance (reason inconclusive or stalled); never an advance.
	ActionPause = "auto-pause"
	// ActionExpire: a release's envelope expired while it was served, so
	// what its nodes get changed; written once per release.
	ActionExpire = "expire"
)

// DefaultInterval is how often the autopilot looks: reports arrive in
// batches at most 10 ms apart, bake times are minutes, and a look reads every
// report.
const DefaultInterval = 10 * time.Second

// Store is what the autopilot reads and changes.
type Store interface {
	Releases(ctx context.Context) ([]rollout.Release, int64, error)
	Release(ctx context.Context, version string) (rollout.Release, int64, error)
	PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a store.AuditEntry, rec []byte) (int64, error)
	assess.Source
}

// Config holds the optional settings; the zero Config works.
type Config struct {
	// Interval between looks; zero means DefaultInterval.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives every change and every conflict; nil discards.
	Log *slog.Logger
	// OnAssess, when set, receives every look's assessment, with the
	// look's ctx (lpsd publishes it as metrics and records it as the
	// releases' history); the evidence is then read on every look,
	// planned releases or not.
	OnAssess func(context.Context, assess.Fleet)
	// Replica, for a store several replicas share, elects the one that
	// looks (store.Joiner); nil: this one always does.
	Replica store.Replica
	// OnLeader and OnSkew, when set, receive leadership changes and each
	// clock comparison (lpsd publishes them as metrics).
	OnLeader func(bool)
	OnSkew   func(time.Duration)
	// Places, when set, returns where nodes are served from (the serving
	// replicas' labels), which an expiry's audit entry says what changed
	// for; nil, or none: the places each release's own scope names.
	Places func(context.Context) []rollout.Place
	// AdvanceWindow is when a healthy step may advance (the zero Window:
	// always); halts and pauses are never held back.
	AdvanceWindow Window
	// OnFreeze, when set, receives every look's reading of the fleet-wide
	// freeze (lpsd publishes it as a metric).
	OnFreeze func(frozen bool)
	// Evidence is what a look reads the reports and served records from:
	// an *assess.Shared lpsd's admin reads share; nil: the store.
	Evidence assess.Source
	// Lead, when set, runs beside the looks while this replica looks
	// (leads, or has no Replica), with a ctx that ends when it stops
	// looking. The first look waits until Lead calls ready (or returns):
	// lpsd prunes the stored history there (internal/retention), so that
	// a look after a restart never reads the backlog a prune is removing.
	Lead func(ctx context.Context, ready func())
}

// Autopilot steps the planned rollouts of one store.
type Autopilot struct {
	st  Store
	cfg Config
	// unreadable is what the last look logged of undecodable records, so
	// each change is logged once, not every look.
	unreadable map[string]int
}

// New returns an autopilot over st.
func New(st Store, cfg Config) *Autopilot {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.OnLeader == nil {
		cfg.OnLeader = func(bool) {}
	}
	if cfg.OnSkew == nil {
		cfg.OnSkew = func(time.Duration) {}
	}
	if cfg.Evidence == nil {
		cfg.Evidence = st
	}
	return &Autopilot{st: st, cfg: cfg}
}

// Run looks every Interval until ctx ends. A failed look is logged and the
// next one tries again. With a Replica, only the elected leader looks: it
// campaigns, looks while it leads, and steps down when its clock is more
// than MaxClockSkew off the other replicas' heartbeats (which every
// replica writes every BeatInterval while Run runs).
func (a *Autopilot) Run(ctx context.Context) error {
	rep := a.cfg.Replica
	if rep == nil {
		return a.lead(ctx, nil)
	}
	go a.beat(ctx)
	for {
		if err := rep.Campaign(ctx); err != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-rep.Done():
				return errMembershipLost
			case <-time.After(BeatInterval):
			}
			a.cfg.Log.Warn("autopilot campaign failed; trying again", "err", err)
			continue
		}
		a.cfg.Log.Info("autopilot leads: this replica decides every rollout's steps")
		a.cfg.OnLeader(true)
		err := a.lead(ctx, rep)
		a.cfg.OnLeader(false)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if rerr := rep.Resign(rctx); rerr != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("autopilot resign failed; the lease ends it", "err", rerr)
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errMembershipLost):
			return err
		case errors.Is(err, errSkewed):
			// Let a replica with a sane clock lead; if none has one, no
			// replica decides, which stops rollouts rather than misjudge
			// them.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(skewBackoff):
			}
		}
	}
}

// Leadership and clocks.
const (
	// BeatInterval is how often every replica writes its heartbeat.
	BeatInterval = 5 * time.Second
	// MaxClockSkew is how far the leader's clock may be from the other
	// replicas' before it steps down: deadlines, silence and bakes are
	// compared on its clock.
	MaxClockSkew = 30 * time.Second
	// skewBackoff is how long a replica that stepped down for its clock
	// waits before it campaigns again.
	skewBackoff = time.Minute
)

var (
	errMembershipLost = errors.New("the store membership (etcd session) was lost")
	errSkewed         = errors.New("this replica's clock is off the others'")
)

// beat writes the heartbeat every BeatInterval until ctx ends or the
// membership is lost.
func (a *Autopilot) beat(ctx context.Context) { Beat(ctx, a.cfg.Replica, a.cfg.Now, a.cfg.Log) }

// Beat writes rep's heartbeat, by the clock now, every BeatInterval until
// ctx ends or the membership is lost, logging failures on log: what every
// replica does while its autopilot runs, and what one without an
// autopilot does to be seen by the others (its labels, its clock).
func Beat(ctx context.Context, rep store.Replica, now func() time.Time, log *slog.Logger) {
	t := time.NewTicker(BeatInterval)
	defer t.Stop()
	for {
		if err := rep.Beat(ctx, now()); err != nil && ctx.Err() == nil {
			log.Warn("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-rep.Done():
			return
		case <-t.C:
		}
	}
}

// lead runs Lead and, once it is ready, looks, until looks returns.
func (a *Autopilot) lead(ctx context.Context, rep store.Replica) error {
	if a.cfg.Lead == nil {
		return a.looks(ctx, rep)
	}
	lctx, cancel := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		a.cfg.Lead(lctx, func() { once.Do(func() { close(ready) }) })
	}()
	defer func() {
		cancel()
		<-done
	}()
	var lost <-chan struct{}
	if rep != nil {
		lost = rep.Done()
	}
	select {
	case <-ready:
	case <-done:
	case <-ctx.Done():
		return nil
	case <-lost:
		return errMembershipLost
	}
	return a.looks(ctx, rep)
}

// looks looks every Interval until ctx ends, or, with rep, until the
// membership is lost or the clock is found skewed.
func (a *Autopilot) looks(ctx context.Context, rep store.Replica) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	var lost <-chan struct{}
	if rep != nil {
		lost = rep.Done()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lost:
			return errMembershipLost
		case <-t.C:
		}
		if rep != nil {
			if err := a.checkClock(ctx, rep); err != nil {
				return err
			}
		}
		if _, err := a.Step(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("autopilot look failed", "err", err)
		}
	}
}

// checkClock returns errSkewed when this replica's clock disagrees with
// the majority of the replicas' (ClockAgrees). A heartbeat is at most
// BeatInterval (and a round trip) old when read.
func (a *Autopilot) checkClock(ctx context.Context, rep store.Replica) error {
	peers, err := rep.Peers(ctx)
	if err != nil || len(peers) == 0 {
		// Alone, or the store cannot say: nothing to compare with.
		return nil
	}
	now := a.cfg.Now()
	skew := ClockSkew(now, peers)
	a.cfg.OnSkew(skew)
	if !ClockAgrees(now, peers) {
		a.cfg.Log.Error("autopilot steps down: this replica's clock is off the other replicas' heartbeats; fix its time sync",
			"skew", skew, "max", MaxClockSkew, "peers", len(peers))
		return errSkewed
	}
	return nil
}

// ClockSkew estimates how far now's clock is ahead of the replicas whose
// heartbeats are peers: the median of their ages, less the half beat a
// heartbeat is old on average (what lpsd_clock_skew_seconds shows).
func ClockSkew(now time.Time, peers []store.Heartbeat) time.Duration {
	ages := make([]time.Duration, len(peers))
	for i, p := range peers {
		ages[i] = now.Sub(p.Time)
	}
	slices.Sort(ages)
	median := ages[len(ages)/2]
	if len(ages)%2 == 0 {
		median = (ages[len(ages)/2-1] + ages[len(ages)/2]) / 2
	}
	return median - BeatInterval/2
}

// ClockAgrees reports whether now's clock is within MaxClockSkew of the
// clocks of a strict majority of the replicas, itself among them: of the
// peers, those whose heartbeat's age, less half a beat, is within
// MaxClockSkew agree. So one replica whose clock is off (or whose
// heartbeats stopped while its session lives) makes only itself step
// down, not every other; of two replicas that disagree neither can tell
// which is off, and both step down (run three).
func ClockAgrees(now time.Time, peers []store.Heartbeat) bool {
	agree := 1
	for _, p := range peers {
		if d := now.Sub(p.Time) - BeatInterval/2; d <= MaxClockSkew && d >= -MaxClockSkew {
			agree++
		}
	}
	return 2*agree > len(peers)+1
}

// Change is one change the autopilot made.
type Change struct {
	Version string
	Action  string
	// From and To are the percentages (To is 100 when it completed, and
	// equals From for a halt).
	From, To int
	Verdict  regression.Verdict
}

// Evidence is an automatic change's audit evidence.
type Evidence struct {
	Verdict regression.Verdict `json:"verdict"`
	// Step is the plan step the decision was taken at (its index into the
	// plan's steps, from 0, as rollout.Plan.Step), Due when its bake ended.
	Step int       `json:"step"`
	Due  time.Time `json:"due"`
	// Rule states the health rule with the plan's numbers, so the entry
	// reads on its own.
	Rule string `json:"rule"`
	// Reason is the change's reason code (regression.Reason*); empty for an
	// advance.
	Reason string `json:"reason,omitempty"`
}

// ParseEvidence reads an audit entry's evidence JSON, and reports whether
// it is an automatic change's with a verdict to show (lpsctl's audit table
// and the dashboard print it).
func ParseEvidence(evidenceJSON string) (Evidence, bool) {
	var ev Evidence
	if evidenceJSON == "" || json.Unmarshal([]byte(evidenceJSON), &ev) != nil || ev.Verdict.Detail == "" {
		return Evidence{}, false
	}
	return ev, true
}

// Step looks once: it judges every rolling, unexpired release with a plan
// and halts, advances or pauses those that are due, and returns what it
// changed.
func (a *Autopilot) Step(ctx context.Context) ([]Change, error) {
	rels, _, err := a.st.Releases(ctx)
	if ue := (*store.UnreadableError)(nil); errors.As(err, &ue) {
		// The readable releases are judged; the others are served as
		// revoked (internal/lps) and left alone.
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("list releases: %w", err)
	}
	now := a.cfg.Now()
	frozen, err := Frozen(ctx, a.st)
	if a.cfg.OnFreeze != nil {
		a.cfg.OnFreeze(frozen)
	}
	changes, errs := a.expiries(ctx, rels, now)
	if err != nil {
		errs = append(errs, err)
	}
	var planned []rollout.Release
	for _, r := range rels {
		// An expired release is served to no node: its reports stop
		// coming and a step would widen a rollout that reaches nobody.
		if r.Rollout.Plan != nil && r.Rollout.State == rollout.Rolling && !r.Revoked && !r.WithNotAfter().Expired(now) {
			planned = append(planned, r)
		}
	}
	if len(planned) == 0 && a.cfg.OnAssess == nil {
		return changes, errors.Join(errs...)
	}
	fleet, err := assess.Assess(ctx, a.cfg.Evidence, rels, now)
	if err != nil {
		return changes, errors.Join(append(errs, err)...)
	}
	if a.cfg.OnAssess != nil {
		a.cfg.OnAssess(ctx, fleet)
	}
	if !maps.Equal(fleet.Unreadable, a.unreadable) {
		a.unreadable = fleet.Unreadable
		if len(fleet.Skipped) > 0 {
			a.cfg.Log.Warn("the store holds records this lpsd cannot read; they are left out of every look", "unreadable", fleet.Unreadable, "err", errors.Join(fleet.Skipped...))
		}
	}
	for _, r := range planned {
		p := *r.Rollout.Plan
		got := fleet.Releases[r.Version]
		v := got.Verdict
		ev := Evidence{Verdict: v, Step: p.Step, Due: p.Due(), Rule: regression.RuleText(p)}
		var action string
		var apply func(rollout.Release) (rollout.Release, error)
		switch {
		case v.Health == regression.Regressing:
			action, ev.Reason = ActionHalt, v.Reason
			apply = func(r rollout.Release) (rollout.Release, error) { return r.Transition(rollout.Halted) }
		case v.Health == regression.Healthy && !now.Before(p.Due()) && (frozen || !a.cfg.AdvanceWindow.Open(now)):
			// Due, but every rollout is frozen, or outside the
			// operators' window: wait.
			continue
		case v.Health == regression.Healthy && !now.Before(p.Due()):
			action, apply = ActionAdvance, func(r rollout.Release) (rollout.Release, error) { return r.Advance(now) }
		case v.Health == regression.Insufficient && now.After(p.StepDeadline()):
			// Never advance on missing evidence, and never wait for it
			// silently either.
			action, ev.Reason = ActionPause, regression.ReasonInconclusive
			if got.Counts.Served() == 0 {
				ev.Reason = regression.ReasonStalled
			}
			apply = func(r rollout.Release) (rollout.Release, error) { return r.Transition(rollout.Paused) }
		default:
			continue
		}
		if action == ActionAdvance {
			// Read again just before the write: a freeze committed since
			// the look began (the evidence takes a while to read) holds
			// this advance. The store cannot make the two one write.
			if f, _ := Frozen(ctx, a.st); f {
				continue
			}
		}
		if ev.Reason != "" {
			inner := apply
			apply = func(r rollout.Release) (rollout.Release, error) {
				out, err := inner(r)
				out.Rollout.Reason = ev.Reason
				return out, err
			}
		}
		c, err := a.change(ctx, r, action, apply, ev, func(cur, next rollout.Release) string { return reason(action, cur, next, ev) }, now)
		c.Verdict = ev.Verdict
		switch {
		case errors.Is(err, errMoved):
			a.cfg.Log.Info("autopilot left a release that changed meanwhile", "version", r.Version, "action", action)
		case err != nil:
			errs = append(errs, err)
		default:
			changes = append(changes, c)
		}
	}
	return changes, errors.Join(errs...)
}

// Frozen reports whether every rollout is frozen, when st keeps a freeze
// (store.Freezer); the autopilot and the components' schedule both hold
// their advances on it. A freeze that cannot be read counts as one: it
// must not let a step advance.
func Frozen(ctx context.Context, st any) (bool, error) {
	fz, ok := st.(store.Freezer)
	if !ok {
		return false, nil
	}
	f, _, err := fz.Freeze(ctx)
	if ue := (*store.UnreadableError)(nil); errors.As(err, &ue) {
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("read the freeze (no step advances this look): %w", err)
	}
	return f.Frozen, nil
}

// reason summarises an automatic change for the audit log's reason, in
// one line; the evidence has the numbers in full.
func reason(action string, cur, next rollout.Release, ev Evidence) string {
	what := fmt.Sprintf("step %d %d%% -> %s %d%%", ev.Step+1, cur.Rollout.Percent, next.Rollout.State, next.Rollout.Percent)
	switch action {
	case ActionHalt:
		what = fmt.Sprintf("halted at step %d (%d%%), %s", ev.Step+1, cur.Rollout.Percent, ev.Reason)
	case ActionPause:
		what = fmt.Sprintf("paused at step %d (%d%%), %s: its deadline %s passed without the evidence to advance",
			ev.Step+1, cur.Rollout.Percent, ev.Reason, cur.Rollout.Plan.StepDeadline().UTC().Format(time.RFC3339))
	}
	s := what + ": " + ev.Verdict.Health
	if ev.Verdict.Rule != "" {
		s += " (" + ev.Verdict.Rule + ")"
	}
	if ev.Verdict.Detail != "" {
		s += ": " + ev.Verdict.Detail
	}
	return s
}

// oneLine makes s an audit reason: at most 1024 bytes, graphic characters
// only.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsGraphic(r) {
			return r
		}
		return ' '
	}, clip.Bytes(s, 1024))
}

// errMoved: the release changed between the look and the write (another
// replica or an operator acted first).
var errMoved = errors.New("release changed meanwhile")

// changed reports whether cur differs from judged in anything the decision
// rested on: its rollout (state, percentage, scope, plan), revocation, or
// recorded expiry.
func changed(judged, cur rollout.Release) (bool, error) {
	if judged.Revoked != cur.Revoked || judged.ExpiryRecorded != cur.ExpiryRecorded {
		return true, nil
	}
	// A request for a second operator changes nothing the judgement
	// rests on: it must not make a halt wait for the next look.
	x, y := judged.Rollout, cur.Rollout
	x.Approval, y.Approval = nil, nil
	a, err := json.Marshal(x)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(y)
	if err != nil {
		return false, err
	}
	return !bytes.Equal(a, b), nil
}

// change applies apply to the stored release if it is still the one judged,
// with a compare-and-swap on its revision, and audits it with evidence and
// the reason why gives.
func (a *Autopilot) change(ctx context.Context, judged rollout.Release, action string, apply func(rollout.Release) (rollout.Release, error), ev any, why func(cur, next rollout.Release) string, now time.Time) (Change, error) {
	cur, rev, err := a.st.Release(ctx, judged.Version)
	if err != nil {
		return Change{}, fmt.Errorf("read release %s: %w", judged.Version, err)
	}
	if moved, err := changed(judged, cur); err != nil || moved {
		return Change{}, cmp.Or(err, errMoved)
	}
	next, err := apply(cur)
	if err != nil {
		return Change{}, fmt.Errorf("%s %s: %w", action, cur.Version, err)
	}
	next.UpdatedAt = now
	before, err := json.Marshal(cur)
	if err != nil {
		return Change{}, err
	}
	after, err := json.Marshal(next)
	if err != nil {
		return Change{}, err
	}
	evidence, err := json.Marshal(ev)
	if err != nil {
		return Change{}, err
	}
	_, err = a.st.PutRelease(ctx, next, rev, store.AuditEntry{
		Time: now, Actor: Actor, Action: action, Target: cur.Version, Before: before, After: after, Evidence: evidence,
		Reason: oneLine(why(cur, next)),
	}, nil)
	if errors.Is(err, store.ErrConflict) {
		return Change{}, errMoved
	}
	if err != nil {
		return Change{}, fmt.Errorf("%s %s: %w", action, cur.Version, err)
	}
	c := Change{Version: cur.Version, Action: action, From: cur.Rollout.Percent, To: next.Rollout.Percent}
	a.cfg.Log.Info("autopilot changed a rollout", "version", c.Version, "action", action, "from", c.From, "to", c.To,
		"state", next.Rollout.State, "reason", oneLine(why(cur, next)))
	return c, nil
}
