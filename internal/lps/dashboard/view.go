package dashboard

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
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
}

type releaseView struct {
	R        *adminv1.Release
	Step     string // "2/3 at 10%", "1/3 canary 7/20 nodes", or ""
	NextDue  time.Time
	NotAfter time.Time
	Expired  bool
	Control  *adminv1.Counts
	// FailureRate and ControlRate are (failed+fallback+silent) over
	// reported+silent, as percentages; -1 without reports.
	FailureRate, ControlRate float64
}

type sizeView struct {
	Base              string
	Declared, Trimmed int
	OverBudget        bool
}

func buildView(st *adminv1.StatusResponse, now time.Time) *view {
	v := &view{Built: now, Region: st.GetRegion(), Requests: st.GetRequests(), Control: map[string]*adminv1.Counts{}, Budget: lps.ServedBudget}
	for _, c := range st.GetControl() {
		v.Control[c.GetBase()] = c.GetCounts()
	}
	var recs []rollout.Release
	bases := map[string]bool{}
	for _, r := range st.GetReleases() {
		rv := releaseView{R: r, Control: v.Control[r.GetBase()], FailureRate: failureRate(r.GetCounts()), ControlRate: failureRate(v.Control[r.GetBase()])}
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
func failureRate(c *adminv1.Counts) float64 { return percentFailed(fromProto(c)) }

func percentFailed(c tally.Counts) float64 {
	if c.Judged() == 0 {
		return -1
	}
	return 100 * float64(c.Failures()) / float64(c.Judged())
}

// fromProto reads the admin API's counts back into the tally's, so the
// dashboard computes rates as the rule does.
func fromProto(c *adminv1.Counts) tally.Counts {
	return tally.Counts{OK: c.GetOk(), Failed: c.GetFailed(), Fallback: c.GetFallback(), RefusedIntegrity: c.GetRefusedIntegrity(),
		RefusedDelivery: c.GetRefusedDelivery(), NotApplicable: c.GetNotApplicable(), Silent: c.GetSilent(), Pending: c.GetPending()}
}

func (v *view) release(version string) (releaseView, bool) {
	for _, r := range v.Releases {
		if r.R.GetVersion() == version {
			return r, true
		}
	}
	return releaseView{}, false
}

// maxSamples is how many points of history each release keeps: an hour at
// the default refresh.
const maxSamples = 720

// sample is one release's (or control cohort's) counts at a time.
type sample struct {
	T time.Time
	tally.Counts
	Reported uint64
	Served   uint64
}

// history keeps each release's and each control cohort's counts over
// time, in memory.
type history struct {
	mu       sync.Mutex
	releases map[string][]sample
	control  map[string][]sample
}

func newHistory() *history {
	return &history{releases: map[string][]sample{}, control: map[string][]sample{}}
}

// add records st's counts at now: for the releases that can still be
// served (not revoked, not expired), whose charts matter, so history stays
// bounded by the live releases however many the store keeps.
func (h *history) add(now time.Time, st *adminv1.StatusResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	bases := map[string]bool{}
	for _, r := range st.GetReleases() {
		if r.GetRevoked() || r.GetNotAfter() == nil || !now.Before(r.GetNotAfter().AsTime()) {
			continue
		}
		seen[r.GetVersion()] = true
		bases[r.GetBase()] = true
		s := toSample(now, r.GetCounts())
		s.Served = r.GetServed()
		h.releases[r.GetVersion()] = appendSample(h.releases[r.GetVersion()], s)
	}
	for v := range h.releases {
		if !seen[v] {
			delete(h.releases, v)
		}
	}
	for _, c := range st.GetControl() {
		if bases[c.GetBase()] {
			h.control[c.GetBase()] = appendSample(h.control[c.GetBase()], toSample(now, c.GetCounts()))
		}
	}
	for b := range h.control {
		if !bases[b] {
			delete(h.control, b)
		}
	}
}

func toSample(t time.Time, c *adminv1.Counts) sample {
	return sample{T: t, Counts: fromProto(c), Reported: c.GetReported()}
}

func appendSample(s []sample, x sample) []sample {
	if len(s) >= maxSamples {
		s = slices.Delete(s, 0, len(s)-maxSamples+1)
	}
	return append(s, x)
}

func (h *history) of(version, base string) (rel, control []sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.releases[version]), slices.Clone(h.control[base])
}

func fmtStep(i, n int, kind string, a, b int) string {
	if b >= 0 {
		return fmt.Sprintf("%d/%d canary %d/%d nodes", i, n, a, b)
	}
	return fmt.Sprintf("%d/%d %s %d%%", i, n, kind, a)
}
