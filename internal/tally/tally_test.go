package tally

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"nodehotfix/internal/lpswire"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

const (
	base = "202604.01"
	v1   = "202604.01.1"
	v2   = "202604.01.2"
)

func rel(version string, state rollout.State) rollout.Release {
	return rollout.Release{Version: version, Base: base, NotAfter: t0.Add(30 * 24 * time.Hour), Rollout: rollout.Rollout{State: state}}
}

// ran is a report of a boot that ran version (or the baked agent for "").
func ran(vm, boot, version string, exit int) store.Report {
	return store.Report{VMID: vm, Boot: boot, Base: base, HotfixVersion: version, ExitCode: exit, Time: t0}
}

// refused is a report of a boot served version that ran the baked agent.
func refused(vm, boot, version, decision, download string) store.Report {
	return store.Report{VMID: vm, Boot: boot, Base: base, RequestedVersion: version, Decision: decision, DownloadHotfix: download, Time: t0}
}

func served(vm, boot, version string, at time.Time) store.Served {
	return store.Served{Version: version, VMID: vm, Boot: boot, Base: base, Time: at}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	fell := ran("a", "1", v1, 0)
	fell.Fallback = true
	for _, tt := range []struct {
		name  string
		r     store.Report
		want  Outcome
		about bool
	}{
		{"ran ok", ran("a", "1", v1, 0), OK, true},
		{"ran and failed", ran("a", "1", v1, 3), Failed, true},
		{"fell back", fell, FellBack, true},
		{"key not trusted", refused("a", "1", v1, "untrusted", "untrusted"), RefusedIntegrity, true},
		{"staged binary not the signed one", refused("a", "1", v1, "stagedMismatch", "alreadyStaged"), RefusedIntegrity, true},
		{"digest differs", refused("a", "1", v1, "notStaged", "artifactIntegrity"), RefusedIntegrity, true},
		{"repository contradicts its signatures", refused("a", "1", v1, "notStaged", "repositoryIntegrity"), RefusedIntegrity, true},
		{"download outage", refused("a", "1", v1, "notStaged", "failed"), RefusedDelivery, true},
		{"no package yet", refused("a", "1", v1, "notStaged", "noPackage"), RefusedDelivery, true},
		{"not newer than the baked agent", refused("a", "1", v1, "notNewer", "notNewer"), NotApplicable, true},
		{"revoked meanwhile", refused("a", "1", v1, "revoked", "revoked"), NotApplicable, true},
		{"another release", ran("a", "1", v2, 0), 0, false},
		{"baked, nothing requested", ran("a", "1", "", 0), 0, false},
	} {
		o, about := Classify(&tt.r, v1)
		if about != tt.about || (about && o != tt.want) {
			t.Errorf("%s: Classify = %v, %v; want %v, %v", tt.name, o, about, tt.want, tt.about)
		}
	}
}

// TestOfServedNodesCount: every node a release was served to counts for
// it with one outcome, refusals and silence included, and never in the
// base's control cohort.
func TestOfServedNodesCount(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	reports := []store.Report{
		ran("ok", "1", v1, 0),
		ran("failed", "1", v1, 1),
		refused("untrusted", "1", v1, "untrusted", "untrusted"),
		refused("outage", "1", v1, "notStaged", "failed"),
		ran("pinned", "1", "", 0), // served v1, but its pointer requested nothing of it
		ran("control", "1", "", 0),
		ran("control-failed", "1", "", 2),
	}
	ss := []store.Served{
		served("ok", "1", v1, t0), served("failed", "1", v1, t0), served("untrusted", "1", v1, t0),
		served("outage", "1", v1, t0), served("pinned", "1", v1, t0),
		served("hung", "1", v1, t0),                            // no report for 60 min: silent
		served("provisioning", "1", v1, now.Add(-time.Minute)), // still within silent-after
	}
	got := Of([]rollout.Release{rel(v1, rollout.Rolling)}, reports, ss, now)
	want := Counts{OK: 1, Failed: 1, RefusedIntegrity: 1, RefusedDelivery: 1, NotApplicable: 1, Silent: 1, Pending: 1}
	if c := got.Releases[v1]; c != want {
		t.Errorf("release = %+v\nwant      %+v", c, want)
	}
	if c := got.Releases[v1]; c.Served() != 7 || c.Judged() != 5 || c.Failures() != 2 || c.Reported() != 5 {
		t.Errorf("served %d judged %d failures %d reported %d; want 7, 5, 2, 5", c.Served(), c.Judged(), c.Failures(), c.Reported())
	}
	// "pinned" ran the baked agent with nothing requested: it is control,
	// as far as its base's first hotfix goes; the refusals are not.
	if c := got.Control[base]; c != (Counts{OK: 2, Failed: 1}) {
		t.Errorf("control = %+v, want the three baked nodes that requested nothing", c)
	}
}

// TestOfWithoutServedRecords: a report alone attributes its node (a served
// record lost to a slow store).
func TestOfWithoutServedRecords(t *testing.T) {
	t.Parallel()
	reports := []store.Report{ran("a", "1", v1, 0), refused("b", "1", v1, "untrusted", "untrusted")}
	if c := Of([]rollout.Release{rel(v1, rollout.Rolling)}, reports, nil, t0).Releases[v1]; c != (Counts{OK: 1, RefusedIntegrity: 1}) {
		t.Errorf("release = %+v", c)
	}
}

// TestOfOneVotePerNode: a node that invents boots or flips its outcome
// moves one vote, its own, and that vote is its worst outcome.
func TestOfOneVotePerNode(t *testing.T) {
	t.Parallel()
	var rs []store.Report
	var ss []store.Served
	for i := range 16 {
		rs = append(rs, ran("flipper", fmt.Sprint(i), v1, 0))
		ss = append(ss, served("squatter", fmt.Sprint(i), v1, t0))
	}
	rs = append(rs, ran("flipper", "last", v1, 1))
	got := Of([]rollout.Release{rel(v1, rollout.Rolling)}, rs, ss, t0.Add(time.Hour))
	if c := got.Releases[v1]; c != (Counts{Failed: 1, Silent: 1}) {
		t.Errorf("release = %+v, want one failed vote and one silent", c)
	}
	// A later good boot does not undo a hang.
	rs = []store.Report{ran("h", "2", v1, 0)}
	ss = []store.Served{served("h", "1", v1, t0), served("h", "2", v1, t0)}
	if c := Of([]rollout.Release{rel(v1, rollout.Rolling)}, rs, ss, t0.Add(time.Hour)).Releases[v1]; c != (Counts{Silent: 1}) {
		t.Errorf("a hang then a good boot = %+v, want silent", c)
	}
}

// TestOfOneBasePerVM: a vmId's reports vote for the base of its latest
// report only.
func TestOfOneBasePerVM(t *testing.T) {
	t.Parallel()
	first := ran("a", "1", "", 0)
	other := ran("a", "2", "", 1)
	other.Base, other.Time = "202605.01", t0.Add(time.Minute)
	got := Of(nil, []store.Report{other, first}, nil, t0.Add(time.Hour))
	if got.Control["202605.01"] != (Counts{Failed: 1}) || got.Control[base] != (Counts{}) {
		t.Errorf("control = %+v, want one vote in 202605.01 only", got.Control)
	}
}

// TestOfReimagedNodes: a node reimaged onto a new image (same vmId, new
// base, as AKS node-image upgrades do) votes for the new base: the new
// base's release it was served counts it, and the old base's release no
// longer does (it left that base; a vmId votes for one base). Before, a
// vmId voted for the base of its first report only, so 30 upgraded nodes
// that all failed a release of the new base counted for nothing.
func TestOfReimagedNodes(t *testing.T) {
	t.Parallel()
	const newBase, vNew = "202605.01", "202605.01.1"
	old := rel(v1, rollout.Rolling)
	next := rel(vNew, rollout.Rolling)
	next.Base = newBase
	var reports []store.Report
	var ss []store.Served
	for i := range 30 {
		vm := fmt.Sprintf("vm-%d", i)
		// Last week, on the old image: served v1, ran it.
		ss = append(ss, served(vm, "old-boot", v1, t0.Add(-7*24*time.Hour)))
		ok := ran(vm, "old-boot", v1, 0)
		ok.Time = t0.Add(-7*24*time.Hour + time.Minute)
		reports = append(reports, ok)
		// Today, reimaged: served the new base's release, failed.
		sv := served(vm, "new-boot", vNew, t0)
		sv.Base = newBase
		ss = append(ss, sv)
		bad := ran(vm, "new-boot", vNew, 1)
		bad.Base, bad.Time = newBase, t0.Add(time.Minute)
		reports = append(reports, bad)
	}
	got := Of([]rollout.Release{old, next}, reports, ss, t0.Add(2*time.Hour))
	if c := got.Releases[vNew]; c != (Counts{Failed: 30}) {
		t.Errorf("the new base's release = %+v, want the 30 reimaged nodes failed", c)
	}
	if c := got.Releases[v1]; c != (Counts{}) {
		t.Errorf("the old base's release = %+v, want none: they vote for their new base", c)
	}
	// Served the new base's release, no report yet: it counts there,
	// pending, though its last report is the old base's.
	pending := served("vm-new", "new-boot", vNew, t0)
	pending.Base = newBase
	oldRep := ran("vm-new", "old-boot", "", 0)
	oldRep.Time = t0.Add(-24 * time.Hour)
	if c := Of([]rollout.Release{next}, []store.Report{oldRep}, []store.Served{pending}, t0.Add(time.Minute)).Releases[vNew]; c != (Counts{Pending: 1}) {
		t.Errorf("a reimaged node served before it reports = %+v, want pending", c)
	}
}

// TestOfOneVMOneBase: a VM served the releases of two bases in two boots,
// that then reports the baked agent of a third, votes in one base only in
// a look, that of its latest record, seat or no seat; a seat holder with
// no record at all is pending, then silent; a late seat (not served, ran
// the baked agent) counts in the control only.
func TestOfOneVMOneBase(t *testing.T) {
	t.Parallel()
	const bA, bB, bC = "202604.01", "202605.01", "202606.01"
	rA, rB := rel("202604.01.1", rollout.Rolling), rel("202605.01.1", rollout.Rolling)
	rB.Base = bB
	sA := served("vm", "1", rA.Version, t0)
	sB := served("vm", "2", rB.Version, t0.Add(time.Minute))
	sB.Base = bB
	okA := ran("vm", "1", rA.Version, 0)
	okA.Time = t0.Add(30 * time.Second)
	okB := ran("vm", "2", rB.Version, 0)
	okB.Base, okB.Time = bB, t0.Add(90*time.Second)
	baked := ran("vm", "3", "", 0)
	baked.Base, baked.Time = bC, t0.Add(2*time.Minute)
	reports, ss := []store.Report{okA, okB, baked}, []store.Served{sA, sB}
	seats := map[string][]store.Seat{rB.Version: {{VMID: "vm", Since: t0.Add(time.Minute)}}}
	for _, seats := range []map[string][]store.Seat{nil, seats} {
		got := OfUptime([]rollout.Release{rA, rB}, reports, ss, seats, t0.Add(7*time.Hour), nil, nil)
		votes := got.Releases[rA.Version].Served() + got.Releases[rB.Version].Served() + got.Control[bC].Served() + got.Control[bA].Served() + got.Control[bB].Served()
		if votes != 1 || got.Control[bC] != (Counts{OK: 1}) {
			t.Errorf("seats %v: A %+v, B %+v, control %+v: want one vote, in %s's control", seats, got.Releases[rA.Version], got.Releases[rB.Version], got.Control, bC)
		}
	}
	late := ran("late", "1", "", 0)
	late.Base = bB
	seats = map[string][]store.Seat{rB.Version: {{VMID: "late", Since: t0}, {VMID: "lost", Since: t0}, {VMID: "lost-now", Since: t0.Add(6*time.Hour + 45*time.Minute)}}}
	got := OfUptime([]rollout.Release{rB}, []store.Report{late}, nil, seats, t0.Add(7*time.Hour), nil, nil)
	if c := got.Releases[rB.Version]; c != (Counts{Silent: 1, Pending: 1}) || got.Control[bB] != (Counts{OK: 1}) {
		t.Errorf("late seat, lost records: release %+v, control %+v; want the long-lost one silent, the recent one pending, the late one in the control", c, got.Control[bB])
	}
	if n := got.Nodes(rB.Version); len(n) != 2 || n[0].Seat == nil || n[0].Served != nil || n[0].Report != nil {
		t.Errorf("nodes = %+v, want two resting on their seats", n)
	}
}

// TestOfReimagedSeatHoldersNeverSilent: of a canary whose 20 holders all
// ran the release fine, 10 are reimaged onto a new image during the bake;
// they vote for the new base now and drop out of the release's count,
// never counted silent by their seats (a first build did, and halted the
// healthy canary on a node-image upgrade, 50 % silent).
func TestOfReimagedSeatHoldersNeverSilent(t *testing.T) {
	t.Parallel()
	const newBase = "202606.01"
	r := rel(v1, rollout.Rolling)
	var reports []store.Report
	var ss []store.Served
	var seats []store.Seat
	for i := range 20 {
		vm := fmt.Sprintf("vm-%02d", i)
		ss = append(ss, served(vm, "1", v1, t0))
		seats = append(seats, store.Seat{VMID: vm, Since: t0})
		ok := ran(vm, "1", v1, 0)
		ok.Time = t0.Add(2 * time.Minute)
		reports = append(reports, ok)
		if i < 10 {
			up := ran(vm, "2", "", 0)
			up.Base, up.Time = newBase, t0.Add(20*time.Minute)
			reports = append(reports, up)
		}
	}
	got := OfUptime([]rollout.Release{r}, reports, ss, map[string][]store.Seat{v1: seats}, t0.Add(7*time.Hour), nil, nil)
	if c := got.Releases[v1]; c != (Counts{OK: 10}) || got.Control[newBase] != (Counts{OK: 10}) {
		t.Errorf("release %+v, new base's control %+v; want the 10 that stayed ok and the 10 reimaged in the new control only", c, got.Control[newBase])
	}
}

// TestOfEvidenceWindow: what came before a release's evidence window (a
// resume after a halt) does not count for it.
func TestOfEvidenceWindow(t *testing.T) {
	t.Parallel()
	r := rel(v1, rollout.Rolling)
	r.Rollout.EvidenceSince = t0.Add(time.Minute)
	late := ran("late", "1", v1, 0)
	late.Time = t0.Add(2 * time.Minute)
	reports := []store.Report{ran("early", "1", v1, 1), late}
	ss := []store.Served{served("early-hung", "1", v1, t0), served("late", "1", v1, t0.Add(2*time.Minute))}
	if c := Of([]rollout.Release{r}, reports, ss, t0.Add(time.Hour)).Releases[v1]; c != (Counts{OK: 1}) {
		t.Errorf("release = %+v, want only the late node", c)
	}
}

// TestOfClockSlack: a report stamped a little before its served record
// (two replicas' clocks) is that boot's; one from long before is not.
func TestOfClockSlack(t *testing.T) {
	t.Parallel()
	skewed := ran("skewed", "1", v1, 0)
	skewed.Time = t0.Add(-10 * time.Second)
	stale := ran("stale", "1", v1, 0)
	stale.Time = t0.Add(-time.Hour)
	ss := []store.Served{served("skewed", "1", v1, t0), served("stale", "1", v1, t0)}
	c := Of([]rollout.Release{rel(v1, rollout.Rolling)}, []store.Report{skewed, stale}, ss, t0.Add(time.Hour)).Releases[v1]
	// The stale report is not the served boot's, so that boot is silent,
	// and silence is worse than the ok the stale report says.
	if c != (Counts{OK: 1, Silent: 1}) {
		t.Errorf("release = %+v, want skewed ok and stale silent", c)
	}
}

func TestIncumbent(t *testing.T) {
	t.Parallel()
	revoked := rel("202604.01.3", rollout.Complete)
	revoked.Revoked = true
	other := rel("202605.01.1", rollout.Complete)
	other.Base = "202605.01"
	// Expired: served to nobody, so its base's nodes run the baked agent
	// again.
	expired := rel("202607.01.1", rollout.Complete)
	expired.Base, expired.NotAfter = "202607.01", t0.Add(-time.Hour)
	rels := []rollout.Release{
		rel(v1, rollout.Complete), rel(v2, rollout.Halted), revoked, rel("202604.01.4", rollout.Rolling), other, expired,
	}
	for _, tt := range []struct{ version, want string }{
		{v1, IncumbentBaked},
		{v2, v1},
		{"202604.01.4", v1}, // a halted and a revoked one never were what the base ran
		{"202605.01.2", "202605.01.1"},
		{"202606.01.1", IncumbentBaked},
		{"202607.01.2", IncumbentBaked},
	} {
		if got := Incumbent(rels, rollout.Release{Version: tt.version}, t0); got != tt.want {
			t.Errorf("Incumbent(%s) = %s, want %s", tt.version, got, tt.want)
		}
	}
}

// TestBaseline: the second hotfix of a base is compared with the first,
// on the nodes not served it; with too few of those in the window, with
// the first's whole record.
func TestBaseline(t *testing.T) {
	t.Parallel()
	now := t0.Add(48 * time.Hour)
	old := func(r store.Report) store.Report { r.Time = t0; return r }
	recent := func(r store.Report) store.Report { r.Time = now.Add(-time.Hour); return r }
	rels := []rollout.Release{rel(v1, rollout.Complete), rel(v2, rollout.Rolling)}
	reports := []store.Report{
		old(ran("a", "1", v1, 0)), old(ran("b", "1", v1, 1)), old(ran("c", "1", v1, 0)),
		recent(ran("d", "1", v1, 0)), recent(ran("e", "1", v1, 0)),
		recent(ran("f", "1", v1, 0)), // also served v2 below: the candidate's, not the baseline's
		recent(ran("f", "2", v2, 0)),
		recent(ran("g", "1", "", 0)), // baked: not v1's baseline
	}
	ss := []store.Served{served("f", "2", v2, now.Add(-time.Hour))}
	tl := Of(rels, reports, ss, now)
	if b := tl.Baseline(rels, rels[1], 2); b.Incumbent != v1 || b.Recorded || b.Counts != (Counts{OK: 2}) {
		t.Errorf("Baseline(need 2) = %+v, want v1's two recent nodes outside v2", b)
	}
	// f, served v2, is the candidate's, not the baseline's, on the
	// recorded path too.
	if b := tl.Baseline(rels, rels[1], 3); b.Incumbent != v1 || !b.Recorded || b.Counts != (Counts{OK: 4, Failed: 1}) {
		t.Errorf("Baseline(need 3) = %+v, want v1's whole record outside v2's nodes", b)
	}
	// A base's first hotfix is compared with the baked agent.
	first := []rollout.Release{rel(v1, rollout.Rolling)}
	baked := []store.Report{recent(ran("x", "1", "", 0)), recent(ran("y", "1", "", 1)), recent(refused("z", "1", v1, "untrusted", "untrusted"))}
	if b := Of(first, baked, nil, now).Baseline(first, first[0], 1); b.Incumbent != IncumbentBaked || b.Counts != (Counts{OK: 1, Failed: 1}) {
		t.Errorf("first hotfix's Baseline = %+v, want the two baked nodes that requested nothing", b)
	}
}

// BenchmarkOf measures a look's counting as history grows: n reports and
// as many served records, over 4 releases of one base. The store's reads
// are not in it (bench/ has those).
func BenchmarkOf(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rels := []rollout.Release{rel(v1, rollout.Complete), rel(v2, rollout.Rolling), rel("202604.01.3", rollout.Rolling), rel("202604.01.4", rollout.Draft)}
			reports := make([]store.Report, n)
			served := make([]store.Served, n)
			for i := range reports {
				vm, v := fmt.Sprintf("vm-%07d", i), rels[i%3].Version
				reports[i] = ran(vm, "1", v, i%50/49)
				served[i] = store.Served{Version: v, VMID: vm, Boot: "1", Base: base, Time: t0}
			}
			b.ResetTimer()
			for b.Loop() {
				t := Of(rels, reports, served, t0.Add(time.Hour))
				_ = t.Baseline(rels, rels[1], 100)
			}
		})
	}
}

// TestNodes: each node counted for a release, its vote and the evidence it
// rests on, most severe first.
func TestNodes(t *testing.T) {
	t.Parallel()
	reports := []store.Report{ran("b-ok", "1", v1, 0), ran("a-failed", "1", v1, 2), refused("c-refused", "1", v1, "untrusted", "untrusted")}
	ss := []store.Served{served("a-failed", "1", v1, t0), served("d-hung", "1", v1, t0)}
	got := Of([]rollout.Release{rel(v1, rollout.Rolling)}, reports, ss, t0.Add(time.Hour)).Nodes(v1)
	var order []string
	for _, n := range got {
		order = append(order, n.VMID+"="+n.Outcome.String())
	}
	if want := []string{"a-failed=failed", "c-refused=refusedIntegrity", "d-hung=silent", "b-ok=ok"}; !slices.Equal(order, want) {
		t.Fatalf("Nodes = %v, want %v", order, want)
	}
	if n := got[0]; n.Report == nil || n.Report.ExitCode != 2 || n.Served == nil {
		t.Errorf("the failed node's evidence = %+v", n)
	}
	if n := got[2]; n.Report != nil || n.Served == nil || n.Served.Boot != "1" {
		t.Errorf("the silent node's evidence = %+v, want its served record only", n)
	}
	if n := got[3]; n.Report == nil || n.Served != nil {
		t.Errorf("the ok node's evidence = %+v, want its report only", n)
	}
}

// startedAt is a started report: the boot was about to run version.
func startedAt(vm, boot, version string, at time.Time) store.Report {
	return store.Report{VMID: vm, Boot: boot, Base: base, Agent: "hotfix", HotfixVersion: version, Phase: store.PhaseStarted, Time: at}
}

// TestOfStartedReports: a started report with no outcome is pending, then
// silent after silent-after, with or without a served record, and never
// ok (its exit code is zero); it is not a baseline report either.
func TestOfStartedReports(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	reports := []store.Report{
		startedAt("hung", "1", v1, t0),                        // served, started, no outcome for an hour
		startedAt("unrecorded", "1", v1, t0),                  // no served record (it timed out): silent too
		startedAt("starting", "1", v1, now.Add(-time.Minute)), // within silent-after
		startedAt("other", "1", v2, t0),                       // about another release
	}
	ss := []store.Served{served("hung", "1", v1, t0), served("starting", "1", v1, now.Add(-time.Minute))}
	rels := []rollout.Release{rel(v1, rollout.Rolling), rel(v2, rollout.Rolling)}
	got := Of(rels, reports, ss, now)
	if c, want := got.Releases[v1], (Counts{Silent: 2, Pending: 1}); c != want {
		t.Errorf("release = %+v, want %+v", c, want)
	}
	if c := got.Control[base]; c != (Counts{}) {
		t.Errorf("control = %+v, want no started report in it", c)
	}
	st := startedAt("a", "1", v1, t0)
	if o, about := Classify(&st, v1); o != Pending || !about {
		t.Errorf("Classify(started) = %v, %v; want pending, about it", o, about)
	}
	if b := got.Baseline(rels, rels[1], 0); b.Counts.Judged() != 0 {
		t.Errorf("baseline of v2 = %+v, want no judged node from started reports", b)
	}
}

// TestOfSilenceCountsUptime: a served boot turns silent only once lpsd was
// up for silent-after since it was served: a 40-minute outage does not
// turn a boot served 60 minutes ago silent, nor one only started; an older
// one is silent, and so is every boot MaxStretch past its deadline
// whatever the outages. Without marks, wall-clock time.
func TestOfSilenceCountsUptime(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	var marks []time.Time
	for m := t0.Add(-3 * time.Hour); !m.After(now); m = m.Add(time.Minute) {
		if m.Before(t0.Add(10*time.Minute)) || !m.Before(t0.Add(50*time.Minute)) {
			marks = append(marks, m) // down from t0+10m to t0+50m
		}
	}
	up := NewUptime(marks, now.Add(-UptimeWindow), now)
	if got := up.Between(t0, now); got != 20*time.Minute {
		t.Errorf("Between(t0, now) = %v, want 20m (60m less the 40m outage)", got)
	}
	rels := []rollout.Release{rel(v1, rollout.Rolling)}
	ss := []store.Served{served("recent", "1", v1, t0), served("old", "1", v1, t0.Add(-2*time.Hour))}
	reports := []store.Report{startedAt("started", "1", v1, t0)}
	if c, want := OfUptime(rels, reports, ss, nil, now, up, nil).Releases[v1], (Counts{Pending: 2, Silent: 1}); c != want {
		t.Errorf("with uptime: %+v, want %+v", c, want)
	}
	if c, want := Of(rels, reports, ss, now).Releases[v1], (Counts{Silent: 3}); c != want {
		t.Errorf("wall clock: %+v, want %+v", c, want)
	}
	// lpsd down ever since the boot was served, MaxStretch and more ago.
	long := now.Add(-(rollout.DefaultSilentAfter + MaxStretch + time.Minute))
	down := NewUptime([]time.Time{long.Add(-time.Minute)}, now.Add(-UptimeWindow), now)
	if c := OfUptime(rels, nil, []store.Served{served("long", "1", v1, long)}, nil, now, down, nil).Releases[v1]; c != (Counts{Silent: 1}) {
		t.Errorf("past MaxStretch: %+v, want silent", c)
	}
	if NewUptime(nil, now.Add(-UptimeWindow), now) != nil {
		t.Errorf("NewUptime without marks is not wall-clock time (nil)")
	}
}

// TestParseOutcome: every outcome's name reads back to it; nothing else does.
func TestParseOutcome(t *testing.T) {
	t.Parallel()
	for o := Pending; o <= Failed; o++ {
		if got, ok := ParseOutcome(o.String()); !ok || got != o {
			t.Errorf("ParseOutcome(%q) = %v, %v", o.String(), got, ok)
		}
	}
	for _, bad := range []string{"", "unknown", "OK", "refused"} {
		if _, ok := ParseOutcome(bad); ok {
			t.Errorf("ParseOutcome(%q) accepted", bad)
		}
	}
}

// TestNodesResendAsLongAsReportsCount: a node keeps resending a report as
// long as one can turn its boot's silence into an outcome, the longest
// silent-after stretched by the longest outage forgiven; no longer.
func TestNodesResendAsLongAsReportsCount(t *testing.T) {
	if lpswire.ReportDeadline != UptimeWindow {
		t.Errorf("nodes resend reports for %v, silence is decided within %v (silent-after up to %v, stretched up to %v): they must agree", lpswire.ReportDeadline, UptimeWindow, rollout.MaxSilentAfter, MaxStretch)
	}
}

func TestSpreadCap(t *testing.T) {
	t.Parallel()
	ten := func(n int, more ...int) []int {
		s := append(slices.Repeat([]int{n}, 10), more...)
		return s
	}
	for _, tt := range []struct {
		sizes []int
		want  int
	}{
		{ten(1), 1},
		{ten(5, 200), 5},   // 5 ≤ (50+5)/10; 6 > (50+6)/10
		{ten(10, 100), 11}, // 11 ≤ (100+11)/10
		{ten(3, 3), 3},     // nothing over the cap
	} {
		if got := spreadCap(tt.sizes); got != tt.want {
			t.Errorf("spreadCap(%v) = %d, want %d", tt.sizes, got, tt.want)
		}
	}
}

// TestBaselineSpreadOverSubscriptions: the VMs of one subscription cannot
// make up a base's baseline once it spans ten subscriptions. 200 VMs one
// tenant attests, beside ten subscriptions of 5 nodes of which one fails
// in each: failing, they count as 5 of the control's 55 votes (15
// failures: 27 %, not 84 %); healthy, the baseline is read unspread (250
// votes, 4 %), the stricter reading, which only makes a halt likelier.
// Which 5 count is the same whatever their outcomes. Nine subscriptions
// are not capped.
func TestBaselineSpreadOverSubscriptions(t *testing.T) {
	t.Parallel()
	var reports []store.Report
	for s := range 10 {
		for n := range 5 {
			exit := 0
			if n == 0 {
				exit = 1
			}
			r := ran(fmt.Sprintf("vm-%d-%d", s, n), "1", "", exit)
			r.SubscriptionID = fmt.Sprintf("sub-%d", s)
			reports = append(reports, r)
		}
	}
	for n := range 200 {
		r := ran(fmt.Sprintf("squat-%d", n), "1", "", 0)
		r.SubscriptionID = "squatter"
		reports = append(reports, r)
	}
	tl := Of([]rollout.Release{rel(v1, rollout.Rolling)}, reports, nil, t0)
	if c := tl.Control[base]; c.Judged() != 250 || c.Failures() != 10 {
		t.Errorf("control with healthy squatters = %+v, want the unspread 250 judged, 10 failures", c)
	}

	failing := slices.Clone(reports)
	for i := range failing {
		if failing[i].SubscriptionID == "squatter" {
			failing[i].ExitCode = 1
		}
	}
	tl = Of([]rollout.Release{rel(v1, rollout.Rolling)}, failing, nil, t0)
	if c := tl.Control[base]; c.Judged() != 55 || c.Failures() != 15 {
		t.Errorf("control with failing squatters = %+v, want 55 judged, 15 failures", c)
	}
	if b := tl.Baseline([]rollout.Release{rel(v1, rollout.Rolling)}, rel(v1, rollout.Rolling), 1); b.Counts.Judged() != 55 || b.Counts.Failures() != 15 {
		t.Errorf("baseline with failing squatters = %+v, want 55 judged, 15 failures", b)
	}

	var nine []store.Report // the squatter and 8 others
	for _, r := range failing {
		if r.SubscriptionID != "sub-8" && r.SubscriptionID != "sub-9" {
			nine = append(nine, r)
		}
	}
	if c := Of(nil, nine, nil, t0).Control[base]; c.Judged() != 240 {
		t.Errorf("control over 9 subscriptions = %d judged, want all 240", c.Judged())
	}
}

// TestOfClocksCorrectSkewedReplicas: records are read on the reader's
// clock, by the age of the freshest time read off their replica. A replica
// whose clock is minutes behind neither makes a node it just served
// silent nor leaves a report it accepted out of the boot another replica
// served (clockSlack). Times are only ever read later: one ahead is read
// as stamped (its lead only delays silence). A live replica whose
// heartbeat is stale but whose records are fresh is not corrected by the
// heartbeat's age, a correction is at most MaxClockCorrection, and a
// replica within ClockTolerance, or without a heartbeat, is read as it
// stamped.
func TestOfClocksCorrectSkewedReplicas(t *testing.T) {
	t.Parallel()
	now := t0.Add(6 * time.Hour)
	behind, ahead := 3*time.Minute, 2*time.Minute
	beats := []store.Heartbeat{
		{ID: "behind", Time: now.Add(-behind - 2*time.Second)}, // written 2 s ago
		{ID: "ahead", Time: now.Add(ahead - 3*time.Second)},
		{ID: "ontime", Time: now.Add(-time.Second)},
		{ID: "stale-beat", Time: now.Add(-5 * time.Hour)}, // its writes fail; it still serves
		{ID: "far", Time: now.Add(-2 * time.Hour)},
		{ID: "joining"}, // joined, no heartbeat yet
	}
	fresh := served("fresh", "1", v1, now.Add(-10*time.Second-behind)) // served 10 s ago
	fresh.Replica = "behind"
	boot := served("reported", "1", v1, now.Add(-30*time.Second))
	boot.Replica = "ontime"
	// Its report, accepted 5 s ago by the replica behind, says the baked
	// agent ran (a custom-data pin): not applicable, if it is the boot's.
	rep := ran("reported", "1", "", 0)
	rep.Time, rep.Replica = now.Add(-5*time.Second-behind), "behind"
	late := served("late", "1", v1, now.Add(-30*time.Second+ahead)) // served 30 s ago
	late.Replica = "ahead"
	hung := served("hung", "1", v1, now.Add(-4*time.Hour))
	hung.Replica = "stale-beat"
	recent := served("recent", "1", v2, now.Add(-5*time.Second))
	recent.Replica = "stale-beat"
	ss := []store.Served{fresh, boot, late, hung, recent}
	reports := []store.Report{rep}

	clocks := NewClocks(beats, reports, ss, now)
	if want := (Clocks{"behind": behind + 2*time.Second, "far": MaxClockCorrection}); !maps.Equal(clocks, want) {
		t.Fatalf("NewClocks = %v, want %v", clocks, want)
	}
	p := rollout.Plan{SilentAfter: time.Minute}
	r := rel(v1, rollout.Rolling)
	r.Rollout.Plan = &p
	rels := []rollout.Release{r}
	if c, want := OfUptime(rels, reports, ss, nil, now, nil, nil).Releases[v1], (Counts{Silent: 2, Pending: 2}); c != want {
		t.Errorf("read as stamped: %+v, want %+v (the case for the correction)", c, want)
	}
	if c, want := OfUptime(rels, reports, ss, nil, now, nil, clocks).Releases[v1], (Counts{Pending: 2, NotApplicable: 1, Silent: 1}); c != want {
		t.Errorf("on the reader's clock: %+v, want %+v", c, want)
	}
}
