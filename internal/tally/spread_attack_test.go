package tally

import (
	"fmt"
	"testing"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Attack: the cap amplifying a tenant with many tiny
// subscriptions. Honest fleet: 3 subscriptions of 100 healthy VMs each (no
// cap: fewer than 10 subscriptions). The attacker adds 7 subscriptions of
// one failing VM each: now 10 subscriptions, the cap is 1, and the 7
// squatters are 7 of the 10 votes counted: a 70 % failure baseline from 7
// VMs beside 300. Without the spread they would be 7 of 307 (2 %).
func TestSpreadDoesNotAmplifyTinySubscriptions(t *testing.T) {
	t.Parallel()
	var reports []store.Report
	for s := range 3 {
		for n := range 100 {
			r := ran(fmt.Sprintf("vm-%d-%d", s, n), "1", "", 0)
			r.SubscriptionID = fmt.Sprintf("honest-%d", s)
			reports = append(reports, r)
		}
	}
	for s := range 7 {
		r := ran(fmt.Sprintf("squat-%d", s), "1", "", 1)
		r.SubscriptionID = fmt.Sprintf("attacker-%d", s)
		reports = append(reports, r)
	}
	c := Of(nil, reports, nil, t0).Control[base]
	if rate := float64(c.Failures()) / float64(c.Judged()); rate > 0.10 {
		t.Errorf("control = %d judged, %d failures (%.0f%%): 7 attacker VMs in 7 subscriptions outweigh 300 honest VMs; unspread they are %.1f%%",
			c.Judged(), c.Failures(), 100*rate, 100*7.0/307)
	}
}

// Attack: the spread skipped on the incumbent's recorded path. The
// windowed incumbent baseline is too small, so Baseline falls back to the
// incumbent's whole record: 100 failing squatters of one subscription must
// not make it up there either (they count as 1 of 11), and the candidate's
// own nodes are left out of it.
func TestRecordedIncumbentSpread(t *testing.T) {
	t.Parallel()
	const v2 = "202604.01.2"
	inc := rel(v1, rollout.Complete)
	next := rel(v2, rollout.Rolling)
	rels := []rollout.Release{inc, next}
	var reports []store.Report
	for s := range 10 {
		r := ran(fmt.Sprintf("vm-%d", s), "1", v1, 0) // honest: healthy on the incumbent
		r.SubscriptionID = fmt.Sprintf("honest-%d", s)
		reports = append(reports, r)
	}
	for n := range 100 {
		r := ran(fmt.Sprintf("squat-%d", n), "1", v1, 1)
		r.SubscriptionID = "squatter"
		reports = append(reports, r)
	}
	tl := Of(rels, reports, nil, t0.Add(time.Minute))
	b := tl.Baseline(rels, next, 20)
	if !b.Recorded || b.Counts.Judged() != 11 || b.Counts.Failures() != 1 {
		t.Errorf("baseline = %+v (recorded %v): want the incumbent's record spread, 11 judged, 1 failure", b.Counts, b.Recorded)
	}
}
