// Package tally counts nodes' provisioning outcome reports per release and
// per base's control cohort.
package tally

import "nodehotfix/internal/store"

// Counts are nodes' reports, one per node: a vmId counts once per cohort,
// by its latest report, however many boots it reported. Reported is the sum
// of the other three.
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
}

// Failures is what counts against a cohort: failed plus fallen back.
func (c Counts) Failures() uint64 { return c.Failed + c.Fallback }

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
