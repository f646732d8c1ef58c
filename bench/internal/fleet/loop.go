package fleet

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"nodehotfix/internal/autopilot"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
	"nodehotfix/test/harness"
)

// LoopVer is the planned release of a closed-loop run, on Base. In such a
// run Base has no other release but RevokedVer, so a node outside LoopVer's
// percentage runs its baked agent: the control cohort.
const LoopVer = "202604.01.4"

// bakedVer is the simulated nodes' baked agent.
const bakedVer = Base + ".0"

// Loop closes the loop in a run: the replicas store outcome reports and run
// the autopilot, LoopVer rolls under Plan, and every answered node reports
// how its provisioning went, as launch does after provisioning.
type Loop struct {
	// FailRate is the share of LoopVer's nodes whose hotfix fails (they
	// fall back to the baked agent); ControlFailRate the share of the other
	// nodes that fail. Which nodes fail follows from their vmIds.
	FailRate, ControlFailRate float64
	// RefuseRate is the share of LoopVer's nodes that refuse it as signed
	// (its key is not in their image) and run the baked agent.
	RefuseRate float64
	// HangRate is the share of LoopVer's nodes that hang in it: they send
	// their started report, as launch does before it runs a hotfix, and
	// never an outcome. Drawn apart from failing and refusing.
	HangRate float64
	// Linger is how long the run waits after its last node for LoopVer's
	// halt (at least a second): a hang is seen only once its nodes'
	// silent-after (Plan.SilentAfter) has passed.
	Linger time.Duration
	// Second makes LoopVer its base's second hotfix: CompleteVer, complete
	// at 100 %, is what every other node runs (failing at
	// ControlFailRate, falling back), so LoopVer's baseline is its
	// incumbent, and no node runs the baked agent by choice.
	Second bool
	// Plan is LoopVer's plan, started when the run's releases are
	// published.
	Plan rollout.Plan
	// AutopilotInterval is each replica's autopilot interval.
	AutopilotInterval time.Duration
	// ResendEvery: every ResendEvery-th node reports a second time,
	// through the next replica: alternately the same boot again (a retry or
	// a replay, which must replace the first) and a new boot (a reboot,
	// which must not add a vote); 0 never.
	ResendEvery int
	// ReportDelay is how long after its answer a node reports: its
	// provisioning, during which its replica may die.
	ReportDelay time.Duration
}

// LoopPlan is the plan fleetsim and its test use, scaled to a run of
// nodes arriving over arrival: a canary of 1 % of the nodes (at least 100),
// then 25 %, then everyone, each step baking a sixth of the run.
func LoopPlan(arrival time.Duration, nodes int) rollout.Plan {
	bake := arrival / 6
	return rollout.Plan{
		Steps: []rollout.PlanStep{
			{Nodes: max(100, nodes/100), Bake: bake, MinReports: 50},
			{Percent: 25, Bake: bake, MinReports: 200},
			{Percent: 100, Bake: bake, MinReports: 500},
		},
		Margin:         0.05,
		MaxFailureRate: 0.20,
	}
}

// ReportOutcome is what became of one node's outcome report.
type ReportOutcome string

// Report outcomes.
const (
	ReportNone    ReportOutcome = ""        // not sent: the node was not answered
	ReportAcked   ReportOutcome = "acked"   // the service answered: stored durably
	ReportFailed  ReportOutcome = "failed"  // no answer (the replica was down): the node moves on
	ReportRefused ReportOutcome = "refused" // an authoritative refusal: never acceptable here
)

// LoopResult is what a closed-loop run's reports and autopilot did.
type LoopResult struct {
	// Sent, Acked, Failed and Refused count the nodes' first reports;
	// Resent the second ones (each acked or not).
	Sent, Acked, Failed, Refused, Resent int
	// Stored is the reports in the store after the run; Lost the acked
	// ones missing from it; Unknown the stored ones no node sent.
	Stored, Lost, Unknown int
	// Tally is the store's counts; Want what they must be for the stored
	// reports' nodes, each counted once.
	Tally, Want struct{ Release, Control, Incumbent tally.Counts }
	// Halt is the autopilot's halt, nil if none; Advances its advances.
	Halt     *AutoChange
	Advances []AutoChange
	// HaltReach is, per replica, from the halt's audit time to the replica
	// building a snapshot with LoopVer halted; -1 for a replica that was
	// down meanwhile (it loads the halt when it starts again). HaltMissed
	// counts replicas up throughout that never showed the halt.
	HaltReach  []time.Duration
	HaltMissed int
	// ServedLoop and Answered are the nodes served LoopVer and the nodes
	// answered at all: how far the release reached. Recorded is the served
	// records of LoopVer in the store: every node served it that declared
	// its boot (all of them here), unless a record's write ran out of time.
	ServedLoop, Answered, Recorded int
	// Seats is how many nodes hold LoopVer's canary seats in the store;
	// Unseated counts the nodes served as seat holders that hold none.
	Seats, Unseated int
	// Final is LoopVer at the end.
	Final rollout.Rollout
}

// AutoChange is one of the autopilot's audit entries.
type AutoChange struct {
	At     time.Duration // since the run started
	Action string
	// Percent and State are the release's after the change.
	Percent int
	State   rollout.State
	// Detail is the health verdict it was decided on.
	Detail string
	// Reason is the change's reason code (empty for an advance).
	Reason string
}

// failing reports whether the node with vmID fails at rate, from its vmId
// alone, so that runs with one seed fail the same nodes.
func failing(vmID string, rate float64) bool { return drawn("fleetsim-fail", vmID, rate) }

// refusing reports whether the node with vmID refuses LoopVer at rate,
// drawn apart from failing.
func refusing(vmID string, rate float64) bool { return drawn("fleetsim-refuse", vmID, rate) }

// hanging reports whether the node with vmID hangs in LoopVer at rate.
func hanging(vmID string, rate float64) bool { return drawn("fleetsim-hang", vmID, rate) }

func drawn(salt, vmID string, rate float64) bool {
	sum := sha256.Sum256([]byte(salt + "\x00" + vmID))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11)/(1<<53) < rate
}

// bootID is the node's boot, a UUID derived from its vmId; boot 1 is a
// reboot's.
func bootID(vmID string, boot int) string {
	b := sha256.Sum256([]byte(fmt.Sprintf("fleetsim-boot\x00%s\x00%d", vmID, boot)))
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// outcomeReport is the report of a node that was served LoopVer, or
// CompleteVer (the incumbent of a Second run), or neither, as launch would
// send it.
func outcomeReport(vmID string, servedLoop, servedIncumbent bool, l *Loop) *nodev1.ReportOutcomeRequest {
	r := &nodev1.ReportOutcomeRequest{
		BootId: bootID(vmID, 0), BakedVersion: bakedVer, Agent: nodev1.Agent_AGENT_BAKED, AgentVersion: bakedVer,
		Decision: "revoked", CheckHotfixOutcome: "lpsRead", ProvisionMs: 60_000,
	}
	switch {
	case servedLoop:
		r.RequestedVersion = LoopVer
	case servedIncumbent:
		r.RequestedVersion, r.HotfixVersion, r.Decision, r.DownloadHotfixOutcome, r.Route = CompleteVer, CompleteVer, "hotfix", "alreadyStaged", "none"
		if failing(vmID, l.ControlFailRate) {
			r.Fallback, r.FallbackReason = true, "the hotfix's provision exited 2 before the bootstrap"
		} else {
			r.Agent, r.AgentVersion = nodev1.Agent_AGENT_HOTFIX, CompleteVer
		}
		return r
	}
	switch {
	case servedLoop && refusing(vmID, l.RefuseRate):
		r.Decision, r.DownloadHotfixOutcome, r.Route = "untrusted", "untrusted", "none"
	case servedLoop && failing(vmID, l.FailRate):
		r.HotfixVersion, r.Decision, r.DownloadHotfixOutcome, r.Route = LoopVer, "hotfix", "staged", "direct"
		r.Fallback, r.FallbackReason = true, "the hotfix's provision exited 2 before the bootstrap"
	case servedLoop:
		r.Agent, r.AgentVersion = nodev1.Agent_AGENT_HOTFIX, LoopVer
		r.HotfixVersion, r.Decision, r.DownloadHotfixOutcome, r.Route = LoopVer, "hotfix", "staged", "direct"
	case failing(vmID, l.ControlFailRate):
		r.ProvisionExitCode = 1
	}
	return r
}

// report sends an answered node's outcome report through r after the
// loop's delay and records what became of it in res; every ResendEvery-th
// node then sends it again through next, every other time as a reboot.
func report(ctx context.Context, l *Loop, res *NodeResult, timeout time.Duration, vmID, token string, r, next *replica, clusterCA *x509.CertPool) {
	select {
	case <-time.After(l.ReportDelay):
	case <-ctx.Done():
		return
	}
	if res.Loop && hanging(vmID, l.HangRate) {
		// About to run the hotfix, which never comes back.
		res.Hung = true
		res.Report = sendStarted(ctx, timeout, r, token, &nodev1.ReportStartedRequest{
			BootId: bootID(vmID, 0), BakedVersion: bakedVer, HotfixVersion: LoopVer,
		}, clusterCA)
		return
	}
	req := outcomeReport(vmID, res.Loop, res.Incumbent, l)
	res.Report = sendReport(ctx, timeout, r, token, req, clusterCA)
	if l.ResendEvery > 0 && res.Node%l.ResendEvery == 0 {
		res.Resent = true
		if res.Node/l.ResendEvery%2 == 1 {
			res.Rebooted = true
			req.BootId = bootID(vmID, 1)
		}
		if sendReport(ctx, timeout, next, token, req, clusterCA) == ReportRefused {
			res.Report = ReportRefused
		}
	}
}

// sendReport sends one report through r and classifies the result.
func sendReport(ctx context.Context, timeout time.Duration, r *replica, token string, req *nodev1.ReportOutcomeRequest, clusterCA *x509.CertPool) ReportOutcome {
	return send(ctx, timeout, r, clusterCA, func(ctx context.Context, t lpsclient.Target) error {
		_, err := lpsclient.Report(ctx, t, token, req)
		return err
	})
}

// sendStarted sends one started report through r and classifies the
// result.
func sendStarted(ctx context.Context, timeout time.Duration, r *replica, token string, req *nodev1.ReportStartedRequest, clusterCA *x509.CertPool) ReportOutcome {
	return send(ctx, timeout, r, clusterCA, func(ctx context.Context, t lpsclient.Target) error {
		_, err := lpsclient.Started(ctx, t, token, req)
		return err
	})
}

// send makes one call to r's current address within timeout: acked when
// it answered, refused when it refused, failed when it was unreachable.
func send(ctx context.Context, timeout time.Duration, r *replica, clusterCA *x509.CertPool, call func(context.Context, lpsclient.Target) error) ReportOutcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.mu.Lock()
	addr := r.addr
	r.mu.Unlock()
	err := call(ctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: clusterCA})
	if err == nil {
		return ReportAcked
	}
	if le := (*lpsclient.Error)(nil); errors.As(err, &le) && le.Class != lpsclient.ClassUnreachable {
		return ReportRefused
	}
	return ReportFailed
}

// haltWatch records, per replica, the build time of its first snapshot
// with LoopVer halted.
type haltWatch struct {
	mu    sync.Mutex
	first []time.Time
}

// seen reports whether some replica has shown the halt.
func (w *haltWatch) seen() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.first {
		if !t.IsZero() {
			return true
		}
	}
	return false
}

// run polls reps every millisecond until ctx ends. A snapshot's Built
// stamp is when it was loaded, so the poll's own period does not add to
// what it records.
func (w *haltWatch) run(ctx context.Context, reps []*replica) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		for i, r := range reps {
			if !w.first[i].IsZero() {
				continue
			}
			if s := r.current(); s != nil && loopState(s) == rollout.Halted {
				w.first[i] = s.Built
			}
		}
		w.mu.Unlock()
	}
}

func loopState(s *lps.Snapshot) rollout.State {
	for _, r := range s.Releases {
		if r.Version == LoopVer {
			return r.Rollout.State
		}
	}
	return ""
}

// settle reads what the store holds after the run and checks it against
// what the nodes sent.
func settle(ctx context.Context, st store.Store, start time.Time, nodes []NodeResult, vmIDs []string, l *Loop, w *haltWatch, reps []*replica) (*LoopResult, error) {
	res := &LoopResult{}
	seats, err := st.Seats(ctx, LoopVer)
	if err != nil {
		return nil, fmt.Errorf("read canary seats: %w", err)
	}
	res.Seats = len(seats)
	byVM := make(map[string]*NodeResult, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		byVM[vmIDs[i]] = n
		if n.Outcome == Served {
			res.Answered++
			if n.Loop {
				res.ServedLoop++
			}
			if n.Seated && !slices.ContainsFunc(seats, func(s store.Seat) bool { return s.VMID == vmIDs[i] }) {
				res.Unseated++
			}
		}
		switch n.Report {
		case ReportAcked:
			res.Acked++
		case ReportFailed:
			res.Failed++
		case ReportRefused:
			res.Refused++
		}
		if n.Report != ReportNone {
			res.Sent++
		}
		if n.Resent {
			res.Resent++
		}
	}
	// One time for the counts and for what they must be: a node served
	// LoopVer with no outcome is silent past the plan's silent-after (the
	// replicas were up throughout, so lpsd's uptime is wall-clock time),
	// pending before.
	now := time.Now()
	rels, _, err := st.Releases(ctx)
	if err != nil {
		return nil, fmt.Errorf("read releases: %w", err)
	}
	noOutcome := func(c *tally.Counts, version string, since time.Time) {
		after := rollout.DefaultSilentAfter
		for _, r := range rels {
			if r.Version == version && r.Rollout.Plan != nil {
				after = r.Rollout.Plan.SilenceDeadline()
			}
		}
		if now.Sub(since) > after {
			c.Silent++
		} else {
			c.Pending++
		}
	}
	served, err := st.Served(ctx)
	if err != nil {
		return nil, fmt.Errorf("read served records: %w", err)
	}
	servedAt := map[string]time.Time{}
	for _, sv := range served {
		if sv.Version == LoopVer && sv.Boot == bootID(sv.VMID, 0) {
			servedAt[sv.VMID] = sv.Time
		}
	}
	reports, err := st.Reports(ctx)
	if err != nil {
		return nil, fmt.Errorf("read reports: %w", err)
	}
	res.Stored = len(reports)
	firstBoot := make(map[string]bool, len(reports))
	counted := make(map[string]bool, len(reports))
	for _, r := range reports {
		n := byVM[r.VMID]
		switch {
		case n == nil || n.Report == ReportNone:
			res.Unknown++
			continue
		case r.Boot == bootID(r.VMID, 0):
			firstBoot[r.VMID] = true
		case n.Rebooted && r.Boot == bootID(r.VMID, 1):
		default:
			res.Unknown++
			continue
		}
		// A VM votes once, however many boots it reported.
		if counted[r.VMID] {
			continue
		}
		counted[r.VMID] = true
		// What this node's report must count as, from what it was served.
		c := &res.Want.Control
		switch {
		case n.Loop:
			c = &res.Want.Release
		case n.Incumbent:
			c = &res.Want.Incumbent
		}
		switch {
		case n.Hung:
			since, ok := servedAt[r.VMID]
			if !ok {
				since = r.Time
			}
			noOutcome(c, LoopVer, since)
		case n.Incumbent && failing(r.VMID, l.ControlFailRate):
			c.Fallback++
		case n.Loop && refusing(r.VMID, l.RefuseRate):
			c.RefusedIntegrity++
		case n.Loop && failing(r.VMID, l.FailRate):
			c.Fallback++
		case !n.Loop && failing(r.VMID, l.ControlFailRate):
			c.Failed++
		default:
			c.OK++
		}
	}
	for i := range nodes {
		if nodes[i].Report == ReportAcked && !firstBoot[vmIDs[i]] {
			res.Lost++
		}
	}
	// A node served LoopVer whose report the store lacks (it went to a
	// replica that died) has no outcome either.
	pending := map[string]bool{}
	for _, sv := range served {
		want := &res.Want.Release
		switch sv.Version {
		case LoopVer:
			res.Recorded++
		case CompleteVer:
			want = &res.Want.Incumbent
		default:
			continue
		}
		if !counted[sv.VMID] && !pending[sv.Version+"/"+sv.VMID] {
			pending[sv.Version+"/"+sv.VMID] = true
			noOutcome(want, sv.Version, sv.Time)
		}
	}
	t := tally.Of(rels, reports, served, now)
	res.Tally.Release, res.Tally.Control, res.Tally.Incumbent = t.Releases[LoopVer], t.Control[Base], t.Releases[CompleteVer]

	rel, _, err := st.Release(ctx, LoopVer)
	if err != nil {
		return nil, err
	}
	res.Final = rel.Rollout
	entries, err := st.Audit(ctx, 0, 1000)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	for _, e := range entries {
		if e.Actor != autopilot.Actor || e.Target != LoopVer {
			continue
		}
		var after rollout.Release
		if err := json.Unmarshal(e.After, &after); err != nil {
			return nil, fmt.Errorf("audit %d: %w", e.Seq, err)
		}
		c := AutoChange{At: e.Time.Sub(start), Action: e.Action, Percent: after.Rollout.Percent, State: after.Rollout.State}
		var ev autopilot.Evidence
		if json.Unmarshal(e.Evidence, &ev) == nil {
			c.Detail, c.Reason = ev.Verdict.Health+": "+ev.Verdict.Detail, ev.Reason
		}
		switch e.Action {
		case autopilot.ActionHalt:
			res.Halt = &c
			w.mu.Lock()
			for i, built := range w.first {
				end := built
				if end.IsZero() {
					end = time.Now()
				}
				switch {
				case reps[i].downDuring(e.Time, end):
					res.HaltReach = append(res.HaltReach, -1)
					continue
				case built.IsZero():
					res.HaltMissed++
					res.HaltReach = append(res.HaltReach, -1)
					continue
				}
				res.HaltReach = append(res.HaltReach, built.Sub(e.Time))
			}
			w.mu.Unlock()
		case autopilot.ActionAdvance:
			res.Advances = append(res.Advances, c)
		}
	}
	return res, nil
}

// HaltedOnCanary returns nil if the run's halt came on p's first step, its
// canary, and no more nodes were served the release than the canary has
// seats (when it is a canary of nodes); else what happened instead.
func (l *LoopResult) HaltedOnCanary(p rollout.Plan) error {
	first := p.Steps[0]
	switch {
	case l.Halt == nil:
		return fmt.Errorf("not halted; ended %s at %d%%", l.Final.State, l.Final.Percent)
	case len(l.Advances) > 0 || l.Halt.Percent != first.Percent:
		return fmt.Errorf("halted at %d%% after %d advances, not on its canary", l.Halt.Percent, len(l.Advances))
	case first.Canary() && (l.ServedLoop > first.Nodes || l.Seats > first.Nodes):
		return fmt.Errorf("%d nodes served, %d seated, on a canary of %d seats", l.ServedLoop, l.Seats, first.Nodes)
	}
	return nil
}

// HaltReached reports whether every replica that stayed up showed the
// halt, at least one did, and the longest any took.
func (l *LoopResult) HaltReached() (longest time.Duration, ok bool) {
	up := 0
	for _, d := range l.HaltReach {
		if d >= 0 {
			up++
			longest = max(longest, d)
		}
	}
	return longest, up > 0 && l.HaltMissed == 0
}

// CountsExact reports whether the store's counts are what the nodes sent,
// each node once, no acked report was lost, and there was something to
// count.
func (l *LoopResult) CountsExact() bool {
	return l.Stored > 0 && l.Acked > 0 && l.Lost == 0 && l.Unknown == 0 && l.Tally == l.Want
}

// print writes the closed loop's part of the report.
func (l *LoopResult) print(w io.Writer, cfg Config) {
	fmt.Fprintf(w, "closed loop: %s at %.0f%% failing and %.0f%% refusing it as signed vs control %.0f%% failing, autopilot every %s\n",
		LoopVer, 100*cfg.Loop.FailRate, 100*cfg.Loop.RefuseRate, 100*cfg.Loop.ControlFailRate, cfg.Loop.AutopilotInterval)
	fmt.Fprintf(w, "  reports: %d sent, %d acked, %d failed (replica down), %d refused; %d resent; %d stored, %d acked but lost, %d unknown\n",
		l.Sent, l.Acked, l.Failed, l.Refused, l.Resent, l.Stored, l.Lost, l.Unknown)
	fmt.Fprintf(w, "  counts: release %+v control %+v incumbent %s %+v; want release %+v control %+v incumbent %+v (exact: %v)\n",
		l.Tally.Release, l.Tally.Control, CompleteVer, l.Tally.Incumbent, l.Want.Release, l.Want.Control, l.Want.Incumbent, l.CountsExact())
	for _, a := range l.Advances {
		fmt.Fprintf(w, "  t=%6.3fs autopilot advanced: %s at %d%% (%s)\n", a.At.Seconds(), a.State, a.Percent, a.Detail)
	}
	if h := l.Halt; h != nil {
		m, ok := l.HaltReached()
		fmt.Fprintf(w, "  t=%6.3fs autopilot halted at %d%%, reason %s (%s); the replicas that showed it did within %s (all up had it: %v, %d never did; per replica %v, -1 down or never)\n",
			h.At.Seconds(), h.Percent, h.Reason, h.Detail, m, ok, l.HaltMissed, l.HaltReach)
	}
	fmt.Fprintf(w, "  reach: %d of %d answered nodes (%.2f%%) were served %s (%d served records); it ends %s at %d%%; %d canary seats held, %d served as holders without one\n",
		l.ServedLoop, l.Answered, 100*float64(l.ServedLoop)/float64(max(1, l.Answered)), LoopVer, l.Recorded, l.Final.State, l.Final.Percent, l.Seats, l.Unseated)
	c := l.Tally.Release
	fmt.Fprintf(w, "  reconciled: served %d = ok %d + failed %d + fellBack %d + refusedIntegrity %d + refusedDelivery %d + notApplicable %d + silent %d + pending %d\n",
		c.Served(), c.OK, c.Failed, c.Fallback, c.RefusedIntegrity, c.RefusedDelivery, c.NotApplicable, c.Silent, c.Pending)
}
