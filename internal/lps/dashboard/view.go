package dashboard

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/history"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// expiringWithin is how close to its expiry a release is listed as
// expiring.
const expiringWithin = 7 * 24 * time.Hour

// view is what pages render: the admin API's Status when it was built.
type view struct {
	Built    time.Time
	Err      string // the last refresh's failure, if it failed
	Pending  bool   // no refresh has finished yet
	Region   string
	Releases []releaseView
	Control  map[string]*adminv1.Counts
	Requests []*adminv1.OutcomeCount
	Sizes    []sizeView
	Expiring []releaseView
	Budget   int
	// ServedNow is what each part of each base's nodes gets now, and
	// why; RateDefinition how its failure rate is counted.
	ServedNow      []*adminv1.ServedBase
	RateDefinition string
	// Freeze is the fleet-wide freeze; nil on a store without one.
	Freeze *adminv1.Freeze
	// Policy is the rollout policy lpsd enforces.
	Policy *adminv1.Policy
	// Replicas are the replicas serving from the store, with their
	// heartbeats' ages by the answering replica's clock.
	Replicas []*adminv1.Replica
}

type releaseView struct {
	R        *adminv1.Release
	Step     string // "2/3 at 10%", "1/3 canary 7/20 nodes", or ""
	NextDue  time.Time
	NotAfter time.Time
	Expired  bool
	Control  *adminv1.Counts
	// FailureRate and ControlRate are the health rule's failure rates
	// (percentFailed); -1 with nobody judged.
	FailureRate, ControlRate float64
	// ServesNone says, when the served-now table gives the release no
	// node, why (its role there: superseded, halted, draft...); "" while
	// it serves some, or the table does not list it.
	ServesNone string
}

type sizeView struct {
	Base              string
	Declared, Trimmed int
	OverBudget        bool
}

func buildView(st *adminv1.StatusResponse, now time.Time) *view {
	v := &view{Built: now, Region: st.GetRegion(), Requests: st.GetRequests(), Control: map[string]*adminv1.Counts{}, Budget: lps.ServedBudget,
		ServedNow: st.GetServedNow(), RateDefinition: st.GetFailureRateDefinition(), Freeze: st.GetFreeze(), Policy: st.GetPolicy(),
		Replicas: st.GetReplicas()}
	for _, c := range st.GetControl() {
		v.Control[c.GetBase()] = c.GetCounts()
	}
	var recs []rollout.Release
	bases := map[string]bool{}
	for _, r := range st.GetReleases() {
		rv := releaseView{R: r, Control: v.Control[r.GetBase()], FailureRate: failureRate(r.GetCounts()), ControlRate: failureRate(v.Control[r.GetBase()]),
			ServesNone: servesNone(r.GetVersion(), st.GetServedNow())}
		if na := r.GetNotAfter(); na != nil {
			rv.NotAfter = na.AsTime()
		}
		rv.Expired = rv.NotAfter.IsZero() || !now.Before(rv.NotAfter)
		ro := r.GetRollout()
		if p := ro.GetPlan(); p != nil && p.GetStep() >= 0 && int(p.GetStep()) < len(p.GetSteps()) {
			s := p.GetSteps()[p.GetStep()]
			if s.GetNodes() > 0 {
				rv.Step = fmtStep(int(p.GetStep())+1, len(p.GetSteps()), "canary", int(ro.GetCanarySeats()), int(s.GetNodes()))
			} else {
				rv.Step = fmtStep(int(p.GetStep())+1, len(p.GetSteps()), "at", int(ro.GetPercent()), -1)
			}
			if ro.GetState() == string(rollout.Rolling) && ro.GetHealth().GetNextDue() != nil {
				rv.NextDue = ro.GetHealth().GetNextDue().AsTime()
			}
		}
		v.Releases = append(v.Releases, rv)
		if !r.GetRevoked() && (rv.Expired || rv.NotAfter.Sub(now) < expiringWithin) {
			v.Expiring = append(v.Expiring, rv)
		}
		recs = append(recs, rollout.Release{Version: r.GetVersion(), Base: r.GetBase(), Envelope: json.RawMessage(r.GetEnvelopeJson()), Revoked: r.GetRevoked(), NotAfter: rv.NotAfter})
		bases[r.GetBase()] = true
	}
	for _, b := range slices.Sorted(maps.Keys(bases)) {
		d, t, err := rollout.PointerSizes(recs, b, now)
		if err != nil {
			continue
		}
		v.Sizes = append(v.Sizes, sizeView{Base: b, Declared: d, Trimmed: t, OverBudget: d > lps.ServedBudget})
	}
	return v
}

// failureRate is the health rule's failure rate of c (tally.Counts'
// Failures over Judged), in percent, or -1 with no node judged.
func failureRate(c *adminv1.Counts) float64 { return percentFailed(admin.CountsOf(c)) }

func percentFailed(c tally.Counts) float64 {
	if r, ok := c.FailureRate(); ok {
		return 100 * r
	}
	return -1
}

// servesNone is a release's ServesNone in served.
func servesNone(version string, served []*adminv1.ServedBase) string {
	why := ""
	for _, b := range served {
		for _, c := range b.GetCohorts() {
			for _, sh := range c.GetShares() {
				if sh.GetVersion() != version {
					continue
				}
				switch sh.GetRole() {
				case rollout.RoleIncumbent, rollout.RoleCandidate, rollout.RoleCanary:
					return ""
				}
				if why == "" {
					why = sh.GetRole()
				}
			}
		}
	}
	return why
}

func (v *view) release(version string) (releaseView, bool) {
	for _, r := range v.Releases {
		if r.R.GetVersion() == version {
			return r, true
		}
	}
	return releaseView{}, false
}

// maxSamples bounds the points a chart draws.
const maxSamples = 720

// sample is one release's (or its baseline's) counts at a time, and the
// release's percentage and state then.
type sample struct {
	T time.Time
	tally.Counts
	Reported uint64
	Served   uint64
	Percent  int
	State    string
	// Revoked says the release was revoked by then.
	Revoked bool
}

// pointsChart is a release's chart from its recorded points (oldest
// first): its counts, percentage and state, and its baseline's counts, at
// each point, the last held to now. At most maxSamples points (thin): the
// first, the last and every change of state or percentage kept.
func pointsChart(ps []*adminv1.HistoryPoint, now time.Time) chartData {
	var c chartData
	for _, p := range ps {
		t, counts := p.GetTime().AsTime(), admin.CountsOf(p.GetCounts())
		c.Release = append(c.Release, sample{T: t, Counts: withSeated(counts, p.GetSeated()), Reported: p.GetCounts().GetReported(),
			Served: counts.Served(), Percent: int(p.GetPercent()), State: p.GetState(), Revoked: p.GetRevoked()})
		c.Control = append(c.Control, sample{T: t, Counts: admin.CountsOf(p.GetBaselineCounts()), Reported: p.GetBaselineCounts().GetReported()})
		c.Baseline = p.GetBaseline()
	}
	if c.Baseline != "" && c.Baseline != history.ControlBaseline {
		c.Baseline = "baseline " + c.Baseline
	}
	if n := len(c.Release); n > 0 && c.Release[n-1].T.Before(now) {
		last, base := c.Release[n-1], c.Control[n-1]
		last.T, base.T = now, now
		c.Release, c.Control = append(c.Release, last), append(c.Control, base)
	}
	c.Release, c.Control = thin(c.Release, c.Control)
	return c
}

func withSeated(c tally.Counts, seated uint64) tally.Counts {
	c.Seated = seated
	return c
}

// thin returns at most maxSamples of rel and of base (the same indexes
// of each, so a point's baseline stays beside it), the first and the
// last kept, and every point where the release's state, revocation or
// percentage changed (a halt of one look must not vanish from the
// rollout chart), the rest evenly spaced.
func thin(rel, base []sample) ([]sample, []sample) {
	n := len(rel)
	if n <= maxSamples {
		return rel, base
	}
	keep := []int{0}
	for i := 1; i < n-1; i++ {
		if a, b := rel[i-1], rel[i]; a.State != b.State || a.Revoked != b.Revoked || a.Percent != b.Percent {
			keep = append(keep, i)
		}
	}
	keep = append(keep, n-1)
	if len(keep) >= maxSamples {
		// More changes than a chart draws (another writer's points, a
		// flapping release): evenly spaced among them.
		keep = spaced(keep, maxSamples)
	} else {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		// keep and the spaced indexes share the first and the last.
		keep = append(keep, spaced(all, maxSamples-len(keep)+2)...)
		slices.Sort(keep)
		keep = slices.Compact(keep)
	}
	r, b := make([]sample, len(keep)), make([]sample, len(keep))
	for j, i := range keep {
		r[j], b[j] = rel[i], base[i]
	}
	return r, b
}

// spaced returns k of is (k ≥ 2), evenly spaced, the first and the last
// kept.
func spaced(is []int, k int) []int {
	out := make([]int, 0, k)
	for i := range k {
		out = append(out, is[i*(len(is)-1)/(k-1)])
	}
	return out
}

// historyCache keeps each release page's history for one view, so a page
// refreshing itself costs one read of the release's history per view.
type historyCache struct {
	mu    sync.Mutex
	built time.Time
	m     map[string]chartData
}

func fmtStep(i, n int, kind string, a, b int) string {
	if b >= 0 {
		return fmt.Sprintf("%d/%d canary %d/%d nodes", i, n, a, b)
	}
	return fmt.Sprintf("%d/%d %s %d%%", i, n, kind, a)
}
