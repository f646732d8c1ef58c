// Package tally counts nodes' provisioning outcome reports per release and
// per base's control cohort.
package tally

import (
	"context"
	"fmt"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Counts are nodes' reports, one per node: a vmId counts once per cohort,
// by its latest report, however many boots it reported. Reported is the sum
// of OK, Failed and Fallback.
type Counts struct {
	Reported uint64 `json:"reported"`
	// OK: provisioned successfully by the agent the cohort is about (the
	// hotfix for a release, the baked agent for a control cohort).
	OK uint64 `json:"ok"`
	// Failed: provisioning failed (a non-zero exit) without a fallback.
	Failed uint64 `json:"failed"`
	// Fallback: the hotfix failed before the bootstrap started and the baked
	// agent provisioned in the same boot (whatever its result).
	Fallback uint64 `json:"fallback"`
	// Silent: nodes that took a seat of the release's canary and sent no
	// report within the plan's SilentAfter: hung or dead before launch
	// could report. Only a canary of nodes records whom it served, so
	// only its nodes can be silent; a control cohort has none.
	Silent uint64 `json:"silent,omitempty"`
	// Pending: canary seat holders that have not reported and are not
	// silent yet (still provisioning, as far as anyone knows). A release
	// with pending holders does not advance: they may yet be silent.
	Pending uint64 `json:"pending,omitempty"`
	// Seated is how many nodes hold a seat of the release's canary.
	Seated uint64 `json:"seated,omitempty"`
}

// Failures is what counts against a cohort: failed, fallen back and
// silent.
func (c Counts) Failures() uint64 { return c.Failed + c.Fallback + c.Silent }

// Judged is how many nodes the cohort is judged on: those that reported
// and those that stayed silent.
func (c Counts) Judged() uint64 { return c.Reported + c.Silent }

// Tally is the fleet's reports, counted.
type Tally struct {
	// Releases counts, per hotfix version, the nodes whose launch chose it.
	Releases map[string]Counts `json:"releases"`
	// Control counts, per image base, the nodes with the hotfix path on that
	// chose the baked agent: what a release of that base is compared with.
	Control map[string]Counts `json:"control"`
}

// Of counts reports. A node whose launch chose a hotfix is in that
// release's cohort even if it fell back; one that chose the baked agent is
// in its base's control cohort. Each vmId is one vote per cohort, its
// latest report's: a node inventing boot IDs, or flipping the outcome it
// reported, moves one vote, its own.
func Of(reports []store.Report) Tally {
	type key struct{ cohort, vm string }
	latest := make(map[key]store.Report, len(reports))
	for _, r := range reports {
		k := key{"control/" + r.Base, r.VMID}
		if r.HotfixVersion != "" {
			k.cohort = "release/" + r.HotfixVersion
		}
		if cur, ok := latest[k]; !ok || r.Time.After(cur.Time) || (r.Time.Equal(cur.Time) && r.Boot > cur.Boot) {
			latest[k] = r
		}
	}
	t := Tally{Releases: map[string]Counts{}, Control: map[string]Counts{}}
	for _, r := range latest {
		if r.HotfixVersion != "" {
			t.Releases[r.HotfixVersion] = add(t.Releases[r.HotfixVersion], r)
			continue
		}
		t.Control[r.Base] = add(t.Control[r.Base], r)
	}
	return t
}

func add(c Counts, r store.Report) Counts {
	c.Reported++
	switch {
	case r.Fallback:
		c.Fallback++
	case r.ExitCode == 0:
		c.OK++
	default:
		c.Failed++
	}
	return c
}

// SeatLister reads a release's canary seats (store.Store is one).
type SeatLister interface {
	Seats(ctx context.Context, version string) ([]store.Seat, error)
}

// ForRelease returns release r's counts in t, with, when r's plan has a
// canary of nodes, its silent seat holders at now: reports are the ones t
// was counted from. It is what the autopilot judges and what status and
// explain show.
func ForRelease(ctx context.Context, st SeatLister, t Tally, reports []store.Report, r rollout.Release, now time.Time) (Counts, error) {
	c := t.Releases[r.Version]
	if !r.HasCanary() {
		return c, nil
	}
	seats, err := st.Seats(ctx, r.Version)
	if err != nil {
		return c, fmt.Errorf("list canary seats of %s: %w", r.Version, err)
	}
	after := rollout.DefaultSilentAfter
	if p := r.Rollout.Plan; p != nil {
		after = p.SilenceDeadline()
	}
	c.Seated = uint64(len(seats))
	c.Silent, c.Pending = Unreported(reports, seats, r.Version, now.Add(-after))
	return c, nil
}

// clockSlack is how much earlier than its seat a holder's report may be
// stamped and still count as after it: the two times come from the clocks
// of the replicas that took the seat and the report.
const clockSlack = time.Minute

// Unreported counts the seat holders of release version that have
// reported nothing since taking their seat: silent when they took it
// before cutoff, pending otherwise. A holder has reported if it has any
// report in the release's cohort, or any report (a control one: it ran the
// baked agent) stamped after its seat, less clockSlack; a report from an
// earlier boot before its seat does not count.
func Unreported(reports []store.Report, seats []store.Seat, version string, cutoff time.Time) (silent, pending uint64) {
	since := make(map[string]time.Time, len(seats))
	for _, s := range seats {
		since[s.VMID] = s.Since
	}
	for _, r := range reports {
		if t, ok := since[r.VMID]; ok && (r.HotfixVersion == version || !r.Time.Before(t.Add(-clockSlack))) {
			delete(since, r.VMID)
		}
	}
	for _, t := range since {
		if t.Before(cutoff) {
			silent++
		} else {
			pending++
		}
	}
	return silent, pending
}
