// Package tally counts, per release, every node the release was served to
// by the one outcome each had, and per image base the nodes that ran the
// baked agent, from lpsd's served records and the nodes' outcome reports.
//
// A node counts for a release when lpsd recorded serving it the release
// (store.Served: a boot of a node that declared it reports), when it said
// it was about to run it (a started report: pending, then silent, never a
// success, until that boot's outcome replaces it), or when its
// report says it ran the release or refused it (store.Report's
// HotfixVersion or RequestedVersion, the latter kept only for a release
// lpsd offered that VM). Each vmId is one vote per release, its worst
// outcome over its boots, so a node that invents boots or flips what it
// reported moves one vote, its own. A vmId votes for one base only, that
// of its latest record (report or served record): a node reimaged onto a
// new image (same vmId, new base) counts for the new base's releases, and
// no longer for the old base's. A holder of a canary seat with no record
// at all (its served record lost, no report yet) counts for its release,
// pending, then silent: a seat goes only to a node lpsd served the
// release.
package tally

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Outcome is what one node's provisioning was, for a release.
type Outcome int

// Outcomes, least severe first: a vmId counts by its most severe one.
const (
	// Pending: served, no report yet, and not silent yet.
	Pending Outcome = iota
	// NotApplicable: served, and its report says the release was not for
	// it: not newer than its baked agent, revoked meanwhile, or its staged
	// pointer requested another version (a custom-data pin won). Never
	// judged.
	NotApplicable
	// OK: provisioned successfully by the release.
	OK
	// RefusedDelivery: it could not get the release (a download or
	// repository outage, a package not there yet) and ran the baked agent.
	RefusedDelivery
	// Silent: served, and no report within the plan's silent-after: it
	// hung, died, or lost its report.
	Silent
	// RefusedIntegrity: it refused the release as signed (key not
	// trusted, digest, size or version not the signed ones) and ran the
	// baked agent: an unusable release.
	RefusedIntegrity
	// FellBack: the release failed before the bootstrap started and the
	// baked agent provisioned in the same boot.
	FellBack
	// Failed: provisioning failed (a non-zero exit) without a fallback.
	Failed
)

var outcomeNames = [...]string{"pending", "notApplicable", "ok", "refusedDelivery", "silent", "refusedIntegrity", "fellBack", "failed"}

// String returns the outcome's name, as status, audit, metrics and the
// dashboard show it.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// ParseOutcome returns the outcome String names, and whether it names one.
func ParseOutcome(name string) (Outcome, bool) {
	for o := Pending; int(o) < len(outcomeNames); o++ {
		if outcomeNames[o] == name {
			return o, true
		}
	}
	return 0, false
}

// Counts are a cohort's nodes, one per vmId, by outcome.
type Counts struct {
	OK               uint64 `json:"ok"`
	Failed           uint64 `json:"failed"`
	Fallback         uint64 `json:"fallback"`
	RefusedIntegrity uint64 `json:"refused_integrity,omitempty"`
	RefusedDelivery  uint64 `json:"refused_delivery,omitempty"`
	NotApplicable    uint64 `json:"not_applicable,omitempty"`
	Silent           uint64 `json:"silent,omitempty"`
	Pending          uint64 `json:"pending,omitempty"`
	// Seated is how many nodes hold a seat of the release's canary (set
	// by the caller that reads the seats).
	Seated uint64 `json:"seated,omitempty"`
}

func (c *Counts) add(o Outcome) {
	if n := c.Of(o); n != nil {
		*n++
	}
}

// Of returns where c counts outcome o; nil for an unknown outcome.
func (c *Counts) Of(o Outcome) *uint64 {
	switch o {
	case Pending:
		return &c.Pending
	case NotApplicable:
		return &c.NotApplicable
	case OK:
		return &c.OK
	case RefusedDelivery:
		return &c.RefusedDelivery
	case Silent:
		return &c.Silent
	case RefusedIntegrity:
		return &c.RefusedIntegrity
	case FellBack:
		return &c.Fallback
	case Failed:
		return &c.Failed
	}
	return nil
}

// Reported is how many nodes sent a report: every outcome but silent and
// pending.
func (c Counts) Reported() uint64 {
	return c.OK + c.Failed + c.Fallback + c.RefusedIntegrity + c.RefusedDelivery + c.NotApplicable
}

// Served is every node counted: reported, silent or pending.
func (c Counts) Served() uint64 { return c.Reported() + c.Silent + c.Pending }

// Judged is how many nodes the cohort is judged on: all but the pending
// and those the release was not applicable to.
func (c Counts) Judged() uint64 { return c.Served() - c.Pending - c.NotApplicable }

// Failures is what the failure rate counts: failed, fallen back and
// refused as signed. Silent and refused-for-delivery nodes are rates of
// their own (internal/regression).
func (c Counts) Failures() uint64 { return c.Failed + c.Fallback + c.RefusedIntegrity }

// FailureRate is Failures over Judged, a fraction, and false when nobody
// is judged yet: the rate the health rule compares, as status, history
// and the dashboard show it.
func (c Counts) FailureRate() (float64, bool) {
	if c.Judged() == 0 {
		return 0, false
	}
	return float64(c.Failures()) / float64(c.Judged()), true
}

// Classify returns what report r says of release version, and whether it
// is about that release at all: it ran it (HotfixVersion) or was served it
// and did not run it (RequestedVersion).
//
// A started report (the node was about to run version) is never an
// outcome: Pending here; Of turns it silent after the plan's
// silent-after.
func Classify(r *store.Report, version string) (Outcome, bool) {
	switch {
	case r.Started():
		return Pending, r.HotfixVersion == version
	case r.HotfixVersion == version:
		switch {
		case r.Fallback:
			return FellBack, true
		case r.ExitCode == 0:
			return OK, true
		}
		return Failed, true
	case r.RequestedVersion != version:
		return 0, false
	}
	// Served, and the baked agent provisioned: why it did not run it.
	switch hotfix.Reason(r.Decision) {
	case hotfix.ReasonUntrusted, hotfix.ReasonStagedMismatch:
		return RefusedIntegrity, true
	case hotfix.ReasonNotNewer, hotfix.ReasonRevoked, hotfix.ReasonUnparsableVersion:
		return NotApplicable, true
	}
	switch r.DownloadHotfix {
	case "untrusted", "repositoryIntegrity", "artifactIntegrity":
		return RefusedIntegrity, true
	}
	return RefusedDelivery, true
}

// baked classifies a report of the baked agent provisioning for its own
// sake (no release requested): what a base's baseline counts.
func baked(r *store.Report) (Outcome, bool) {
	if r.HotfixVersion != "" || r.RequestedVersion != "" {
		return 0, false
	}
	if r.ExitCode == 0 {
		return OK, true
	}
	return Failed, true
}

// BaselineWindow is how far back a baseline's reports count; past it, a
// baseline with too few is read from its whole record.
const BaselineWindow = 24 * time.Hour

// clockSlack is how much earlier than its served record a boot's report
// may be stamped and still be that boot's: the two times come from the
// clocks of the replicas that took them.
const clockSlack = time.Minute

// Tally is the fleet's evidence, counted.
type Tally struct {
	// Releases counts, per release version, every node it was served to.
	Releases map[string]Counts `json:"releases"`
	// Control counts, per image base, the nodes that ran the baked agent
	// with no release requested: the baseline of a base's first hotfix.
	Control map[string]Counts `json:"control"`

	now     time.Time
	clocks  Clocks
	reports []store.Report
	served  []store.Served
	byBase  map[string][]int  // indexes into reports of each base's votes
	vmBase  map[string]claim  // each vmId's latest record's base
	cohort  map[string]ballot // version -> the vmIds counted for it
	// seatOf are, by version and vmId, the seat holders counted by their
	// seat alone.
	seatOf map[string]map[string]*store.Seat
}

// Of counts the evidence for rels at now: their served records and the
// reports, each release from its rollout's evidence window
// (rollout.Rollout.EvidenceSince) on, a served boot with no report silent
// after its plan's silent-after, in wall-clock time.
func Of(rels []rollout.Release, reports []store.Report, served []store.Served, now time.Time) Tally {
	return OfUptime(rels, reports, served, nil, now, nil, nil)
}

// OfUptime is Of with silence counted in lpsd's uptime (nil: wall-clock
// time): a served or started boot turns silent once lpsd was up for its
// plan's silent-after since, or, whatever the outages, MaxStretch after
// that in wall-clock time; with every record's time read on now's clock
// (clocks: nil reads them as stamped); and with seats, by release version,
// the holders of its current canary seats (store.Store.Seats of its
// SeatSet), each counted pending, then silent from its seat's time, when
// nothing else counts it for the release.
func OfUptime(rels []rollout.Release, reports []store.Report, served []store.Served, seats map[string][]store.Seat, now time.Time, up *Uptime, clocks Clocks) Tally {
	// Maps sized for the records (one vmId each at most), so filling them
	// never grows them: at 100k records growing was most of the time.
	t := Tally{Releases: map[string]Counts{}, Control: map[string]Counts{}, now: now, clocks: clocks,
		reports: reports, byBase: map[string][]int{}, vmBase: make(map[string]claim, len(reports)), cohort: map[string]ballot{}}
	latest := func(vm, base string, at time.Time) {
		if l, ok := t.vmBase[vm]; !ok || !at.Before(l.at) {
			t.vmBase[vm] = claim{base, at}
		}
	}
	for i := range reports {
		latest(reports[i].VMID, reports[i].Base, t.reportTime(&reports[i]))
	}
	for i := range served {
		latest(served[i].VMID, served[i].Base, clocks.At(served[i].Replica, served[i].Time))
	}
	// One pass indexes the reports (by position: a Report is too big to
	// copy around): every one by boot, for its served record; those that
	// vote by the releases they are about (at most two: the one run, the
	// one requested) and by base; each release then reads only its own.
	type boot struct{ vm, boot string }
	byBoot := make(map[boot]int, len(reports))
	about := map[string][]int{}
	for i := range reports {
		r := &reports[i]
		byBoot[boot{r.VMID, r.Boot}] = i
		if !t.votes(r.VMID, r.Base) {
			continue
		}
		t.byBase[r.Base] = append(t.byBase[r.Base], i)
		if r.HotfixVersion != "" {
			about[r.HotfixVersion] = append(about[r.HotfixVersion], i)
		}
		if r.RequestedVersion != "" && r.RequestedVersion != r.HotfixVersion {
			about[r.RequestedVersion] = append(about[r.RequestedVersion], i)
		}
	}
	servedOf := map[string][]int{}
	for i := range served {
		servedOf[served[i].Version] = append(servedOf[served[i].Version], i)
	}
	for _, rel := range rels {
		since := rel.Rollout.EvidenceSince
		after := rollout.DefaultSilentAfter
		if p := rel.Rollout.Plan; p != nil {
			after = p.SilenceDeadline()
		}
		silent := func(since time.Time) bool {
			return up.Between(since, now) > after || now.Sub(since) > after+MaxStretch
		}
		worst := ballot{}
		for _, j := range servedOf[rel.Version] {
			s := &served[j]
			at := clocks.At(s.Replica, s.Time)
			if at.Before(since) || !t.votes(s.VMID, s.Base) {
				continue
			}
			i, ok := byBoot[boot{s.VMID, s.Boot}]
			var r *store.Report
			if ok {
				r = &reports[i]
			}
			switch {
			case ok && !r.Started() && !t.reportTime(r).Before(at.Add(-clockSlack)):
				o, about := Classify(r, rel.Version)
				if !about {
					o = NotApplicable
				}
				worst.cast(s.VMID, vote{o, i, j})
			case silent(at):
				worst.cast(s.VMID, vote{Silent, -1, j})
			default:
				worst.cast(s.VMID, vote{Pending, -1, j})
			}
		}
		for _, i := range about[rel.Version] {
			r := &reports[i]
			if t.reportTime(r).Before(since) {
				continue
			}
			o, ok := Classify(r, rel.Version)
			switch {
			case !ok:
			case r.Started() && silent(t.reportTime(r)):
				// Started and no outcome since: it hung, died, or lost
				// its report, served record or not.
				worst.cast(r.VMID, vote{Silent, i, -1})
			default:
				worst.cast(r.VMID, vote{o, i, -1})
			}
		}
		for k := range seats[rel.Version] {
			st := &seats[rel.Version][k]
			if _, any := t.vmBase[st.VMID]; any || st.VMID == "" {
				// It has records: they count it here, or they are of
				// another base (it was reimaged, or claims another base
				// since: one base per vmId), or of this one without the
				// release (a seat the store gave late, so it was not
				// served and ran the baked agent). Counted where those
				// count; counting it here too would give it two bases,
				// and count as silent a node that left the base.
				continue
			}
			// A seat holder with no record at all (its served record
			// lost, no report yet): pending, then silent from its seat's
			// time, never out of the count. A seat's time names no
			// replica, so it is read as late as any correction could
			// make it (MaxClockCorrection): a seat stamped by a clock
			// behind never turns silent early. A seat whose time could
			// not be read stays pending.
			o := Pending
			if !st.Since.IsZero() && silent(st.Since.Add(MaxClockCorrection)) {
				o = Silent
			}
			worst.cast(st.VMID, vote{o, -1, -1})
			if t.seatOf == nil {
				t.seatOf = map[string]map[string]*store.Seat{}
			}
			if t.seatOf[rel.Version] == nil {
				t.seatOf[rel.Version] = map[string]*store.Seat{}
			}
			t.seatOf[rel.Version][st.VMID] = st
		}
		t.Releases[rel.Version] = worst.counts()
		t.cohort[rel.Version] = worst
	}
	t.served = served
	for base, is := range t.byBase {
		control := ballot{}
		for _, i := range is {
			if o, ok := baked(&reports[i]); ok {
				control.cast(reports[i].VMID, vote{o, i, -1})
			}
		}
		if len(control) > 0 {
			t.Control[base] = t.baseline(control, base)
		}
	}
	return t
}

// Spread bounds: a baseline cohort whose votes come from at least
// SpreadSubscriptions subscriptions counts at most MaxSubscriptionShare of
// its votes from any one of them.
const (
	SpreadSubscriptions  = 10
	MaxSubscriptionShare = 0.1
)

// baseline counts b, a baseline's ballot, as the stricter of it as it is
// and of it spread (spread): the one with the lower failure rate, so a
// release is compared with the healthier reading. Squatting VMs can make
// a baseline look worse, which would let a regressing release through, in
// two ways: many failing VMs of a few subscriptions (which the spread caps)
// or a few failing VMs in many tiny subscriptions (which the spread would
// amplify, and the raw ballot does not); to move both readings they need
// many failing VMs in many subscriptions of their own. A baseline that
// looks healthier than it is only makes halts likelier, the safe side.
func (t Tally) baseline(b ballot, salt string) Counts {
	raw := b.counts()
	spread := t.spread(b, salt).counts()
	if rate(spread) < rate(raw) {
		return spread
	}
	return raw
}

// rate is c's failure rate; a cohort with nobody judged reads as 1, never
// the stricter reading.
func rate(c Counts) float64 {
	if r, ok := c.FailureRate(); ok {
		return r
	}
	return 1
}

// spread returns b, a baseline's ballot, with no subscription holding more
// than MaxSubscriptionShare of its votes when they come from at least
// SpreadSubscriptions subscriptions, so that VMs one tenant attests cannot
// make up a baseline (squatters forming a control cohort a release then
// advances against). The cap is the largest c with c ≤ a tenth of the
// votes left once every subscription counts at most c; which of an
// over-cap subscription's votes count is decided by a hash of the vmId
// salted with salt, never by their outcomes, so the capped baseline is a
// fair sample of each subscription. Fewer subscriptions: b as it is (a
// small fleet, or a scope of a few). baseline uses it, never alone.
//
// A release's own cohort is not spread: a regression confined to one
// subscription's nodes must still halt it, and its canary's seats are
// spread already (rollout.Release.SeatsPerSubscription).
func (t Tally) spread(b ballot, salt string) ballot {
	bySub := map[string][]string{}
	for vm, v := range b {
		sub := ""
		switch {
		case v.report >= 0:
			sub = t.reports[v.report].SubscriptionID
		case v.served >= 0:
			sub = t.served[v.served].SubscriptionID
		}
		bySub[sub] = append(bySub[sub], vm)
	}
	if len(bySub) < SpreadSubscriptions {
		return b
	}
	sizes := make([]int, 0, len(bySub))
	for _, vms := range bySub {
		sizes = append(sizes, len(vms))
	}
	c := spreadCap(sizes)
	out := make(ballot, len(b))
	type keyed struct {
		key uint64
		vm  string
	}
	for _, vms := range bySub {
		if len(vms) > c {
			ks := make([]keyed, len(vms))
			for i, vm := range vms {
				ks[i] = keyed{spreadKey(vm, salt), vm}
			}
			slices.SortFunc(ks, func(x, y keyed) int { return cmp.Or(cmp.Compare(x.key, y.key), strings.Compare(x.vm, y.vm)) })
			for i := range c {
				vms[i] = ks[i].vm
			}
			vms = vms[:c]
		}
		for _, vm := range vms {
			out[vm] = b[vm]
		}
	}
	return out
}

// spreadCap returns the largest c ≥ 1 with c ≤ MaxSubscriptionShare of
// Σ min(n, c) over sizes: each subscription's most under it. With at least
// SpreadSubscriptions sizes c = 1 qualifies; the condition only fails
// from some c on, so a binary search finds it.
func spreadCap(sizes []int) int {
	left := func(c int) int {
		n := 0
		for _, s := range sizes {
			n += min(s, c)
		}
		return n
	}
	lo, hi := 1, slices.Max(sizes)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if float64(mid) <= MaxSubscriptionShare*float64(left(mid)) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// spreadKey orders a subscription's vmIds for spread.
func spreadKey(vm, salt string) uint64 {
	h := sha256.Sum256([]byte(salt + "/" + strings.ToLower(vm)))
	return binary.BigEndian.Uint64(h[:8])
}

// vote is one vmId's vote and its evidence: the report and served record
// it rests on, by position (-1: none).
type vote struct {
	o              Outcome
	report, served int
}

// ballot holds each vmId's one vote: its most severe outcome's.
type ballot map[string]vote

func (b ballot) cast(vm string, v vote) {
	if cur, ok := b[vm]; !ok || v.o > cur.o {
		b[vm] = v
	}
}

func (b ballot) counts() Counts {
	var c Counts
	for _, v := range b {
		c.add(v.o)
	}
	return c
}

// Node is one vmId's vote for a release, with its evidence.
type Node struct {
	VMID    string
	Outcome Outcome
	// Report is the report the outcome rests on; nil for a silent or
	// pending node, which sent none.
	Report *store.Report
	// Served is lpsd's record of serving it; nil when only its report
	// says it had the release.
	Served *store.Served
	// Seat is its canary seat when nothing but the seat counts it (its
	// served record lost, or it claims another base since); else nil.
	Seat *store.Seat
}

// Nodes returns the nodes counted for release version, most severe
// outcome first, then by vmId.
func (t Tally) Nodes(version string) []Node {
	b := t.cohort[version]
	out := make([]Node, 0, len(b))
	for vm, v := range b {
		n := Node{VMID: vm, Outcome: v.o}
		if v.report >= 0 {
			n.Report = &t.reports[v.report]
		}
		if v.served >= 0 {
			n.Served = &t.served[v.served]
		}
		if v.report < 0 && v.served < 0 {
			n.Seat = t.seatOf[version][vm]
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int {
		return cmp.Or(cmp.Compare(b.Outcome, a.Outcome), strings.Compare(a.VMID, b.VMID))
	})
	return out
}

// votes reports whether vm's evidence about base counts: a vmId votes for
// the base of its latest record only (or any base before it has one).
func (t Tally) votes(vm, base string) bool {
	c, ok := t.vmBase[vm]
	return !ok || c.base == base
}

// claim is a vmId's latest record's base, and that record's time.
type claim struct {
	base string
	at   time.Time
}

// Baseline is what a release is compared with: its base's incumbent, the
// agent that base's nodes ran before it, on nodes not served the release.
type Baseline struct {
	// Incumbent is the base's previous complete hotfix, or "baked".
	Incumbent string `json:"incumbent"`
	// Recorded says Counts are the incumbent's whole record, because its
	// nodes outside the release sent too few reports within
	// BaselineWindow; false: those reports.
	Recorded bool   `json:"recorded,omitempty"`
	Counts   Counts `json:"counts"`
}

// IncumbentBaked names the baked agent as a baseline's incumbent.
const IncumbentBaked = "baked"

// Incumbent returns the agent rel's base runs at now besides rel: the
// highest complete release of the same base below rel's patch that is
// neither revoked nor expired (its envelope's not_after when the record
// has none: an expired one is served to nobody, so its nodes run the
// baked agent again), or IncumbentBaked.
func Incumbent(rels []rollout.Release, rel rollout.Release, now time.Time) string {
	v, err := hotfix.ParseVersion(rel.Version)
	if err != nil {
		return IncumbentBaked
	}
	best, bestPatch := IncumbentBaked, -1
	for _, r := range rels {
		w, err := hotfix.ParseVersion(r.Version)
		if err != nil || w.Base() != v.Base() || w.Patch() >= v.Patch() || w.Patch() <= bestPatch {
			continue
		}
		if r.Rollout.State == rollout.Complete && !r.Revoked && !r.WithNotAfter().Expired(now) {
			best, bestPatch = r.Version, w.Patch()
		}
	}
	return best
}

// Baseline returns rel's baseline: its incumbent on the nodes of rel's
// base that were not counted for rel, from their reports within
// BaselineWindow when those are at least need judged nodes, else from the
// incumbent's whole record (all its reports, and for a hotfix its served
// nodes' outcomes too, outside rel's cohort).
func (t Tally) Baseline(rels []rollout.Release, rel rollout.Release, need uint64) Baseline {
	b := Baseline{Incumbent: Incumbent(rels, rel, t.now)}
	b.Counts = t.incumbent(rel, b.Incumbent, t.now.Add(-BaselineWindow))
	if b.Counts.Judged() >= need {
		return b
	}
	b.Recorded = true
	if b.Incumbent == IncumbentBaked {
		b.Counts = t.incumbent(rel, b.Incumbent, time.Time{})
		return b
	}
	// The incumbent's own tally, which counted its silent nodes too.
	// The incumbent's own cohort, which counted its silent nodes too,
	// outside rel's.
	out := t.cohort[rel.Version]
	mine := ballot{}
	for vm, v := range t.cohort[b.Incumbent] {
		if _, counted := out[vm]; !counted {
			mine[vm] = v
		}
	}
	b.Counts = t.baseline(mine, rel.Version)
	return b
}

// incumbent counts the reports since from on the incumbent's nodes of
// rel's base outside rel's cohort.
func (t Tally) incumbent(rel rollout.Release, incumbent string, from time.Time) Counts {
	out := t.cohort[rel.Version]
	worst := ballot{}
	for _, i := range t.byBase[rel.Base] {
		r := &t.reports[i]
		if _, counted := out[r.VMID]; counted || t.reportTime(r).Before(from) {
			continue
		}
		var o Outcome
		var ok bool
		if incumbent == IncumbentBaked {
			o, ok = baked(r)
		} else {
			o, ok = Classify(r, incumbent)
		}
		if ok {
			worst.cast(r.VMID, vote{o, i, -1})
		}
	}
	return t.baseline(worst, rel.Version)
}

// reportTime is when r was accepted, on the reader's clock.
func (t Tally) reportTime(r *store.Report) time.Time { return t.clocks.At(r.Replica, r.Time) }

// ClockTolerance is how far a replica's clock may seem behind the
// reader's, by the age of the freshest time read off it, before the times
// it stamped are corrected: three of autopilot.BeatInterval (5 s), since a
// heartbeat is up to a beat old when read, and a loaded replica beats late.
const ClockTolerance = 15 * time.Second

// MaxClockCorrection bounds a correction, and so how much it can delay a
// node's silence when the age it measures is not the offset the records
// were stamped with (a clock that stepped back since, a replica whose
// heartbeat writes fail while its session lives).
const MaxClockCorrection = 10 * time.Minute

// Clocks are, by replica ID, how much later than stamped a reader reads
// the times a replica stamped on reports and served records: how far its
// clock seems behind the reader's, as the age, on the reader's clock, of
// the freshest time known to have been read off it (its last heartbeat, or
// the newest record it stamped), once past ClockTolerance, at most
// MaxClockCorrection. A time is read off a clock before anyone reads it,
// so that age is at least the replica's offset then: with a steady offset
// a corrected time is never earlier than the true one, and a replica whose
// clock is behind cannot make the nodes it served silent early, leave a
// report it accepted out of the boot another replica served, or put
// evidence before a resume's window. Times are only ever read later than
// stamped, never earlier, so a clock that stepped since its older records
// (the offset measured now is not theirs) or one that runs ahead only
// delays their silence, the safe side, as reading them as stamped does for
// one ahead. A nil Clocks corrects nothing.
type Clocks map[string]time.Duration

// NewClocks returns the corrections of the live replicas whose heartbeats
// beats are, read at now, each by the freshest of its heartbeat and the
// reports and served records it stamped. A replica within ClockTolerance,
// or without a heartbeat (gone: its records age, its clock does not), is
// read as it stamped.
func NewClocks(beats []store.Heartbeat, reports []store.Report, served []store.Served, now time.Time) Clocks {
	fresh := map[string]time.Time{}
	for _, b := range beats {
		if b.ID != "" && !b.Time.IsZero() {
			fresh[b.ID] = b.Time
		}
	}
	see := func(id string, t time.Time) {
		if f, live := fresh[id]; live && t.After(f) {
			fresh[id] = t
		}
	}
	for i := range reports {
		see(reports[i].Replica, reports[i].Time)
	}
	for i := range served {
		see(served[i].Replica, served[i].Time)
	}
	var c Clocks
	for id, t := range fresh {
		if age := now.Sub(t); age > ClockTolerance {
			if c == nil {
				c = Clocks{}
			}
			c[id] = min(age, MaxClockCorrection)
		}
	}
	return c
}

// At returns t, stamped by replica's clock, on the reader's.
func (c Clocks) At(replica string, t time.Time) time.Time { return t.Add(c[replica]) }

// MaxStretch bounds how far lpsd's outages stretch a boot's silence: past
// its silent-after plus this, in wall-clock time, a boot without an
// outcome is silent however long lpsd was down.
const MaxStretch = 24 * time.Hour

// UptimeWindow is how far back Uptime needs marks: the longest
// silent-after (rollout.MaxSilentAfter) plus MaxStretch: how long a node
// keeps resending a report (lpswire.ReportDeadline).
const UptimeWindow = rollout.MaxSilentAfter + MaxStretch

// Uptime is lpsd's uptime over a window, from the minutes in which some
// replica marked itself up (store.Beats). A minute before the window's
// first mark counts as up (nothing says it was not: the marks began, or
// were kept, later), and so do the last two minutes (a replica may not
// have marked them yet). A nil *Uptime is wall-clock time.
type Uptime struct {
	start time.Time
	// cum[i] is the number of up minutes in [start, start+i minutes).
	cum []int
}

// NewUptime returns the uptime from from to now given the marked minutes
// (any order, duplicates allowed), or nil, wall-clock time, without any
// mark in the window.
func NewUptime(marks []time.Time, from, now time.Time) *Uptime {
	start := from.UTC().Truncate(time.Minute)
	n := int(now.Sub(start)/time.Minute) + 1
	if n <= 0 {
		return nil
	}
	up := make([]bool, n)
	first := n
	for _, m := range marks {
		if i := int(m.Sub(start) / time.Minute); i >= 0 && i < n {
			up[i] = true
			first = min(first, i)
		}
	}
	if first == n {
		return nil
	}
	u := &Uptime{start: start, cum: make([]int, n+1)}
	for i := range n {
		if i < first || i >= n-2 {
			up[i] = true
		}
		u.cum[i+1] = u.cum[i]
		if up[i] {
			u.cum[i+1]++
		}
	}
	return u
}

// Between returns how long lpsd was up from a to b, to the minute: b − a
// less the minutes of the window within it that no replica marked. Time
// outside the window counts as up.
func (u *Uptime) Between(a, b time.Time) time.Duration {
	wall := b.Sub(a)
	if u == nil || wall <= 0 {
		return wall
	}
	idx := func(t time.Time) int {
		return max(0, min(len(u.cum)-1, int(t.Sub(u.start)/time.Minute)))
	}
	ia, ib := idx(a), idx(b)
	down := (ib - ia) - (u.cum[ib] - u.cum[ia])
	return max(wall-time.Duration(down)*time.Minute, 0)
}
