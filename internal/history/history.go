// Package history keeps each release's assessment over time in the store
// (store.History) and reads it back: what the dashboard's charts and
// `lpsctl history` draw, the same on every replica, after restarts, and
// after the reports it was counted from are pruned or the release is
// revoked or expires.
//
// The deciding replica's autopilot records a point after each look
// (Recorder.Record): the counts that look judged on, the rollout's state,
// percentage and step, and the baseline the release was compared with. A
// point is written only when one of those changed since the release's last
// point, so a quiet release costs nothing, and the store keeps one point a
// minute: the minute's last look's, holding, as Point.Earlier, the looks
// of the minute after which the rollout moved (at most MaxEarlier), so no
// halt, pause or rise is lost to a quick resume, and each point keeps its
// look's exact time. Points are written while a release is served
// (not revoked or expired), and once more when it stops; after that its
// counts only follow what retention deletes, which is not history. (A
// complete release served for longer than the reports' retention records
// counts that fall as its reports are pruned: what the looks counted.) They
// are kept for the release's life and store.HistoryRetention after it:
// the Recorder deletes them then.
//
// Points are the one assessment's numbers, not counters of their own: the
// tally's rules (a vmId's worst outcome over its boots, silence in lpsd's
// uptime, evidence windows reopened by a resume, spread baselines) are not
// sums of reports, so counters written beside each report would disagree
// with what the autopilot decided on.
package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// Point is one release's assessment at one look.
type Point struct {
	// Time is the look's: At, within the minute the store keys the point
	// by (the minute's start for a point stored without At).
	Time time.Time `json:"-"`
	// At is the look's exact time, as stored.
	At time.Time `json:"at,omitzero"`
	// Earlier are the points of the minute's earlier looks after which
	// the rollout moved (movedFrom): the store keeps one point a minute,
	// its last look's, and these inside it, so a halt resumed within the
	// minute stays in the history. Oldest first, at most MaxEarlier (the
	// latest kept); never nested. Read returns them as points of their
	// own.
	Earlier []Point `json:"earlier,omitempty"`
	// Counts are the release's nodes by outcome, Seated included.
	Counts  tally.Counts  `json:"counts"`
	State   rollout.State `json:"state"`
	Percent int           `json:"percent"`
	// Step and Steps are the plan's current step (1-based, as lpsctl
	// shows it) and its length; 0 without a plan.
	Step  int `json:"step,omitempty"`
	Steps int `json:"steps,omitempty"`
	// Reason is the rollout's reason code (an automatic pause's or halt's).
	Reason  string `json:"reason,omitempty"`
	Revoked bool   `json:"revoked,omitempty"`
	Expired bool   `json:"expired,omitempty"`
	// Health is the verdict of a planned release (insufficient, healthy,
	// regressing); "" without a plan.
	Health string `json:"health,omitempty"`
	// Baseline names what the release was compared with: the incumbent
	// (tally.Baseline) for a planned release, ControlBaseline (its base's
	// nodes that ran the baked agent) without a plan; BaselineCounts are
	// its counts.
	Baseline       string       `json:"baseline,omitempty"`
	BaselineCounts tally.Counts `json:"baseline_counts"`
}

// ControlBaseline is Point.Baseline of a release without a plan: its
// base's control cohort.
const ControlBaseline = "control"

// MaxEarlier bounds Point.Earlier, so a stored point stays well inside
// store.MaxPointSize: six changes of the rollout in one minute, besides
// the minute's last look.
const MaxEarlier = 6

// movedFrom reports whether what the operators and the autopilot move
// differs between a and p: the state, percentage, step, reason code,
// health, or whether it is revoked or expired.
func (p Point) movedFrom(a Point) bool {
	return p.State != a.State || p.Percent != a.Percent || p.Step != a.Step || p.Steps != a.Steps || p.Reason != a.Reason ||
		p.Health != a.Health || p.Revoked != a.Revoked || p.Expired != a.Expired
}

// assessment returns p without its times and its earlier points: what
// the Recorder compares to tell whether a look changed anything.
func (p Point) assessment() Point {
	p.Time, p.At, p.Earlier = time.Time{}, time.Time{}, nil
	return p
}

// Of returns rel's point in f, the look that assessed it.
func Of(rel rollout.Release, f assess.Fleet) Point {
	ro := rel.Rollout
	p := Point{Time: f.Now, State: ro.State, Percent: ro.Percent, Reason: ro.Reason, Revoked: rel.Revoked,
		Expired: rel.WithNotAfter().Expired(f.Now)}
	a := f.Releases[rel.Version]
	p.Counts = a.Counts
	if pl := ro.Plan; pl != nil {
		p.Step, p.Steps = pl.Step+1, len(pl.Steps)
	}
	if a.Planned {
		p.Health = a.Verdict.Health
		p.Baseline, p.BaselineCounts = a.Verdict.Baseline.Incumbent, a.Verdict.Baseline.Counts
	} else {
		p.Baseline, p.BaselineCounts = ControlBaseline, f.Tally.Control[rel.Base]
	}
	return p
}

// Moving reports whether p's release is still served: not revoked or
// expired. Points are recorded while it is, and once when it stops.
func (p Point) Moving() bool { return !p.Revoked && !p.Expired }

// encode is p's stored form: its JSON, without Time (the store's key).
func encode(p Point) ([]byte, error) { return json.Marshal(p) }

// within returns t held to the minute starting at m: a look's time in the
// minute it was stored at (a clock behind that minute's, or none stored,
// reads as its start).
func within(t, m time.Time) time.Time {
	if t.Before(m) || !t.Before(m.Add(time.Minute)) {
		return m
	}
	return t
}

// lastTime bounds a point's time: one keyed beyond it (another writer of
// the store, damage; an etcd key holds 12 digits of minutes) is not a
// look's, and neither RFC 3339 nor encoding/json can write it.
var lastTime = time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC)

// decode reads a stored point; its Earlier points are given their times
// too, each no later than the one after it (a clock that stepped back
// within the minute keeps them in order), none after the point's.
func decode(sp store.Point) (Point, error) {
	if sp.Time.After(lastTime) {
		return Point{}, fmt.Errorf("history point of %s at minute %d: after %v, not a look's", sp.Version, store.PointMinute(sp.Time), lastTime.Year())
	}
	var p Point
	if err := json.Unmarshal(sp.Data, &p); err != nil {
		return Point{}, fmt.Errorf("history point of %s at %v: %w", sp.Version, sp.Time, err)
	}
	p.Time = within(p.At, sp.Time)
	next := p.Time
	for i := len(p.Earlier) - 1; i >= 0; i-- {
		e := &p.Earlier[i]
		e.Earlier, e.Time = nil, within(e.At, sp.Time)
		if e.Time.After(next) {
			e.Time = next
		}
		next = e.Time
	}
	return p, nil
}

// Read returns release version's newest points, at most limit (0: the
// store's most, store.MaxPointsRead), oldest first: each stored point's
// Earlier ones as points of their own before it. Points that cannot be
// decoded (a newer encoding, damage) are left out and returned, counted,
// in an *store.UnreadableError beside the others, as the store's lists
// do.
func Read(ctx context.Context, st store.History, version string, limit int) ([]Point, error) {
	// Each stored point may carry MaxEarlier more, so the limit is the
	// points returned, not those stored.
	limit = store.PointsLimit(limit)
	sps, err := st.Points(ctx, version, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Point, 0, len(sps))
	bad := store.NewUnreadable("history point")
	for _, sp := range sps {
		p, err := decode(sp)
		if err != nil {
			bad.Add(err)
			continue
		}
		out = append(out, p.Earlier...)
		p.Earlier = nil
		out = append(out, p)
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, bad.Err()
}

// Recorder writes the points of each look. It remembers each release's
// last point, so it writes only what changed; a new Recorder (a new
// leader, a restart) reads the last stored point of a release before it
// writes one. Not safe for concurrent use: one autopilot calls it.
type Recorder struct {
	st   store.History
	log  *slog.Logger
	last map[string]recorded
	// pruned holds the releases past store.HistoryRetention whose points
	// this Recorder deleted, so it deletes them once.
	pruned map[string]bool
}

// recorded is a release's last point as stored (ok: one is), the
// encoding of its assessment (what a look is compared with), and the
// minute it is stored at (store.PointMinute).
type recorded struct {
	point  Point
	ok     bool
	data   []byte
	minute int64
}

// maxBehind is how far (in minutes) a look's clock may be behind the
// release's last stored point for its point to be written at that
// point's minute instead: a new leader whose clock is behind the old
// one's (autopilot.MaxClockSkew, 30 s, is tolerated between replicas),
// or a clock stepped back. Its point then replaces that minute's, so a
// release's last point is the last look's, never one a slower clock
// wrote under an earlier key. A stored point further ahead (a clock that
// was wildly wrong, another writer) is left where it is rather than
// pinning every later point to its minute.
const maxBehind = 2

// NewRecorder returns a Recorder writing to st; log (nil: discard) hears
// of failures.
func NewRecorder(st store.History, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{st: st, log: log, last: map[string]recorded{}, pruned: map[string]bool{}}
}

// Forget drops what r remembers of the points stored, so the next Record
// reads them again: another replica may have written since (lpsd calls it
// when its replica becomes the leader).
func (r *Recorder) Forget() { clear(r.last) }

// Record writes, in one call to the store, the point of each release f
// assessed (f.Records) whose point differs from its last one, while it
// moves or when it stops, and deletes the points of releases whose life
// ended more than store.HistoryRetention ago (Ended). A failure loses that
// look's points only: the next look writes what differs then.
func (r *Recorder) Record(ctx context.Context, f assess.Fleet) error {
	var put []store.Point
	var kept []string
	fresh := map[string]recorded{}
	var errs []error
	for _, rel := range f.Records {
		if past(rel, f.Now) {
			if !r.pruned[rel.Version] {
				n, err := r.st.DeletePoints(ctx, rel.Version)
				if err != nil {
					errs = append(errs, fmt.Errorf("delete the history of %s: %w", rel.Version, err))
					continue
				}
				r.pruned[rel.Version] = true
				delete(r.last, rel.Version)
				if n > 0 {
					r.log.Info("deleted a release's history: its life ended longer ago than history is kept", "version", rel.Version, "points", n, "kept", store.HistoryRetention)
				}
			}
			continue
		}
		p := Of(rel, f)
		data, err := encode(p.assessment())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		last, ok := r.last[rel.Version]
		if !ok {
			last, err = r.read(ctx, rel.Version)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.last[rel.Version] = last
		}
		if bytes.Equal(data, last.data) || (!p.Moving() && last.ok && !last.point.Moving()) {
			continue
		}
		at := f.Now
		if m := store.PointMinute(at); m < last.minute && last.minute-m <= maxBehind {
			at = time.Unix(last.minute*60, 0).UTC()
		}
		p.At = f.Now
		if last.ok && store.PointMinute(at) == last.minute {
			p.Earlier = earlier(last.point, p)
		}
		stored, err := encode(p)
		for err == nil && len(stored) > store.MaxPointSize && len(p.Earlier) > 0 {
			p.Earlier = p.Earlier[1:]
			stored, err = encode(p)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		put = append(put, store.Point{Version: rel.Version, Time: at, Data: stored})
		kept = append(kept, rel.Version)
		fresh[rel.Version] = recorded{point: p, ok: true, data: data, minute: store.PointMinute(at)}
	}
	if len(put) > 0 {
		if err := r.st.PutPoints(ctx, put); err != nil {
			// Forget what the store may or may not hold: the next look
			// reads it again.
			for _, v := range kept {
				delete(r.last, v)
			}
			errs = append(errs, fmt.Errorf("record history: %w", err))
		} else {
			for v, rec := range fresh {
				r.last[v] = rec
			}
		}
	}
	return errors.Join(errs...)
}

// earlier returns the Earlier points of p, which replaces last, the
// point stored at its minute: last's, and last itself when the rollout
// moved after it (a change of counts alone is the minute's to forget),
// at most MaxEarlier, the latest kept.
func earlier(last, p Point) []Point {
	out := slices.Clone(last.Earlier)
	if p.movedFrom(last) {
		e := last
		e.Earlier = nil
		out = append(out, e)
	}
	if len(out) > MaxEarlier {
		out = out[len(out)-MaxEarlier:]
	}
	return out
}

// read returns version's last stored point; none (nothing stored, or it
// cannot be decoded) has no data, which every point differs from.
func (r *Recorder) read(ctx context.Context, version string) (recorded, error) {
	sps, err := r.st.Points(ctx, version, 1)
	if err != nil {
		return recorded{}, fmt.Errorf("read the last history point of %s: %w", version, err)
	}
	if len(sps) == 0 {
		return recorded{}, nil
	}
	minute := store.PointMinute(sps[0].Time)
	p, err := decode(sps[0])
	if err != nil {
		return recorded{minute: minute}, nil
	}
	// Compare in this lpsd's encoding, so an older one's point is
	// replaced only when the assessment changed.
	data, err := encode(p.assessment())
	if err != nil {
		return recorded{minute: minute}, nil
	}
	return recorded{point: p, ok: true, data: data, minute: minute}, nil
}

// Ended returns when rel's life ended, and whether it has: revoked, at
// its record's last update; expired, at its envelope's NotAfter (at its
// last update when that is unknown).
func Ended(rel rollout.Release, now time.Time) (time.Time, bool) {
	switch rel = rel.WithNotAfter(); {
	case rel.Revoked:
		return rel.UpdatedAt, true
	case rel.Expired(now) && !rel.NotAfter.IsZero():
		return rel.NotAfter, true
	case rel.Expired(now):
		return rel.UpdatedAt, true
	}
	return time.Time{}, false
}

// past reports whether rel's life ended more than store.HistoryRetention
// before now, so its points are no longer kept.
func past(rel rollout.Release, now time.Time) bool {
	end, ok := Ended(rel, now)
	return ok && now.Sub(end) > store.HistoryRetention
}
