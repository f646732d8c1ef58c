// Package fleet simulates a region's nodes fetching their hotfix from
// replicated live-patching services on etcd, checking every answer against
// the configured rollouts.
//
// Everything runs in one process on loopback: embedded etcd members, lpsd
// replicas assembled by internal/lpsd from lpsd's flags, as cmd/lpsd runs,
// and one goroutine per node doing what check-hotfix does on the wire
// (lpsclient.Fetch over a new TLS connection, with the node's own attested
// document). Failures can be injected mid-run: an etcd member (the leader)
// stopped, a replica killed and restarted, a rollout percentage raised.
package fleet

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"nodehotfix/bench/internal/mint"
	"nodehotfix/bench/internal/procstat"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/etcdstore/etcdembed"
	"nodehotfix/test/harness"
)

// Releases the simulator publishes. Every node gets Base's Complete release
// or, inside the rolling percentage, Rolling; OtherBase's release rolls to a
// fixed half of the nodes; Revoked is in every answer's revoked list.
const (
	Base          = "202604.01"
	CompleteVer   = "202604.01.1"
	RollingVer    = "202604.01.2"
	RevokedVer    = "202604.01.3"
	OtherBase     = "202605.01"
	OtherVer      = "202605.01.1"
	OtherPercent  = 50
	convergeLimit = 5 * time.Second // the poll's deadline, not the bound asserted
)

// Config describes a run. Events happen as a burst starts, alongside its
// nodes; an event at burst 0 is disabled.
type Config struct {
	// Nodes arrive in Bursts equal bursts spread evenly over Arrival.
	Nodes   int
	Bursts  int
	Arrival time.Duration
	// Paced holds each burst until the previous one has finished (and
	// Arrival's spacing has passed), bounding the calls in flight to a
	// burst: for a slow machine (CI under -race), where unbounded queueing
	// would turn into handshake timeouts and test the machine instead.
	Paced bool
	// Replicas is the number of lpsd replicas; node i uses replica i mod
	// Replicas, as an L4 balancer would pin it.
	Replicas int
	// MaxConnections is each replica's cap on open node connections
	// (lpsd --max-connections); 0 is lpsd's default, 4096.
	MaxConnections int
	// MaxHandshakes is each replica's cap on concurrent TLS handshakes
	// (lpsd --max-handshakes); 0 sizes it as an operator would for the
	// replica's share of the machine (see ReplicaHandshakes).
	MaxHandshakes int
	// Members is the etcd cluster size.
	Members int
	// Leaf signs the nodes' documents; ECDSA mints faster.
	Leaf mint.Leaf
	// Percent is RollingVer's starting percentage; ChangeTo, at burst
	// ChangeAt, raises it.
	Percent, ChangeTo int
	ChangeAt          int
	// StopMemberAt is the burst at which the etcd leader stops (for good).
	StopMemberAt int
	// KillReplicaAt is the burst at which replica 0 is killed;
	// RestartReplicaAt the one at which it starts again.
	KillReplicaAt, RestartReplicaAt int
	// NodeTimeout is each node's deadline for its call; check-hotfix
	// gives it 3 s.
	NodeTimeout time.Duration
	// Seed makes the vmIds (and so every bucket) reproducible.
	Seed string
	// Progress receives a line per event; nil discards.
	Progress io.Writer
	// Loop, when set, closes the loop: nodes report their outcome and the
	// replicas' autopilots step LoopVer's plan on the reports (loop.go).
	Loop *Loop
}

// Outcome classifies one node's call.
type Outcome string

// Outcomes.
const (
	// Served: the answer is exactly what the node must get.
	Served Outcome = "served"
	// Wrong: an answer that is not what the node must get, or an
	// authoritative rejection (NotFound, Unauthenticated, …) of a node that
	// must be served. Never acceptable.
	Wrong Outcome = "wrong"
	// FailedReplicaDown: no answer, and the node's replica was down at some
	// moment of the call. Expected: a node's check-hotfix falls back.
	FailedReplicaDown Outcome = "failed-replica-down"
	// FailedOther: no answer with the node's replica up: overload (the
	// deadline passed) or a bug.
	FailedOther Outcome = "failed-other"
)

// NodeResult is one node's call.
type NodeResult struct {
	Node     int
	Replica  int
	Start    time.Duration // since the run started
	Latency  time.Duration
	Outcome  Outcome
	Code     string // gRPC code of a failure
	Detail   string // why an answer is Wrong
	Rolling  bool   // served RollingVer
	Other    bool   // served OtherVer
	Percent  int    // RollingVer's percent in the replica's snapshot, if the same at both ends of the call
	Stable   bool   // the snapshot's RollingVer percent was the same at both ends
	Snapshot bool   // the replica had a snapshot at either end
	Loop     bool   // served LoopVer (closed-loop runs)
	// Incumbent: served CompleteVer in a closed-loop run where it is
	// LoopVer's incumbent (Loop.Second).
	Incumbent bool
	// Seated: the answer is right only if the node holds a canary seat,
	// which the run checks against the store when it ends.
	Seated bool
	// Report is what became of the node's outcome report, Resent whether
	// it sent a second one (closed-loop runs).
	Report   ReportOutcome
	Resent   bool
	Rebooted bool // the second report was of a new boot
	Hung     bool // it hung in LoopVer: a started report, no outcome (Loop.HangRate)
}

// Event is something the run did to the system.
type Event struct {
	At   time.Duration
	What string
}

// Convergence is how long a percentage change took to reach each replica's
// snapshot after the store acknowledged the write.
type Convergence struct {
	Percent int
	// Write is how long the change took to write (read, then a
	// compare-and-swap transaction acknowledged by the etcd quorum).
	Write      time.Duration
	PerReplica []time.Duration
	Max        time.Duration
	// Converged is false if some replica did not have the change within
	// the poll's deadline (5 s); its PerReplica entry is then 0.
	Converged bool
}

// Report is the outcome of a run.
type Report struct {
	Config      Config
	Nodes       []NodeResult
	Events      []Event
	Convergence *Convergence
	// Loop is the closed loop's result, nil unless Config.Loop is set.
	Loop     *LoopResult
	Elapsed  time.Duration
	MintTime time.Duration
	// Load is the machine's CPU use while the nodes ran: the simulator
	// shares it with whatever else runs there.
	Load procstat.Load
}

// Run sets up the cluster, replicas and releases under dir, drives the
// nodes and returns what happened. An error means the simulation itself
// could not run; what the nodes saw is in the Report.
func Run(ctx context.Context, dir string, cfg Config) (*Report, error) {
	if cfg.Nodes <= 0 || cfg.Replicas <= 0 || cfg.Members <= 0 {
		return nil, errors.New("fleet: Nodes, Replicas and Members must be positive")
	}
	if cfg.Bursts <= 0 {
		cfg.Bursts = 1
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 3 * time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	rep := &Report{Config: cfg}

	t0 := time.Now()
	m, err := mint.New(cfg.Leaf, 6*time.Hour)
	if err != nil {
		return nil, err
	}
	vmIDs := mint.VMIDs(cfg.Seed, cfg.Nodes)
	tokens, err := m.Tokens(vmIDs)
	if err != nil {
		return nil, err
	}
	rep.MintTime = time.Since(t0)
	fmt.Fprintf(cfg.Progress, "signed %d documents (%s) in %s\n", cfg.Nodes, cfg.Leaf, rep.MintTime.Round(time.Millisecond))

	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		return nil, err
	}
	clusterCA := x509.NewCertPool()
	clusterCA.AppendCertsFromPEM(tlsFiles.CAPEM)

	// Members fsync, as production members do.
	c, err := etcdembed.Start(filepath.Join(dir, "etcd"), cfg.Members, etcdembed.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	operator, err := etcdstore.Open(opCtx, c.Endpoints(), etcdstore.Config{})
	cancel()
	if err != nil {
		return nil, err
	}
	defer operator.Close()
	if err := publish(ctx, operator, cfg); err != nil {
		return nil, err
	}
	rootsFile := filepath.Join(dir, "imds-roots.pem")
	if err := os.WriteFile(rootsFile, m.RootPEM(), 0o644); err != nil {
		return nil, err
	}
	flags, err := replicaFlags(dir, tlsFiles, rootsFile, c.Endpoints(), cfg)
	if err != nil {
		return nil, err
	}
	lpsdLog, err := os.Create(filepath.Join(dir, "lpsd.log"))
	if err != nil {
		return nil, err
	}
	defer lpsdLog.Close()
	reps := make([]*replica, cfg.Replicas)
	for i := range reps {
		reps[i] = &replica{idx: i, flags: flags, log: slog.New(slog.NewJSONHandler(lpsdLog, nil))}
		if err := reps[i].start(ctx); err != nil {
			return nil, fmt.Errorf("start replica %d: %w", i, err)
		}
		defer reps[i].close()
	}
	fmt.Fprintf(cfg.Progress, "etcd %d members, %d lpsd replicas up; %d nodes in %d bursts over %s\n", cfg.Members, cfg.Replicas, cfg.Nodes, cfg.Bursts, cfg.Arrival)

	start := time.Now()
	meter := procstat.NewMeter()
	watch := &haltWatch{first: make([]time.Time, len(reps))}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { watch.run(watchCtx, reps); close(watched) }()
	var evMu sync.Mutex
	event := func(format string, a ...any) {
		e := Event{At: time.Since(start), What: fmt.Sprintf(format, a...)}
		evMu.Lock()
		rep.Events = append(rep.Events, e)
		evMu.Unlock()
		fmt.Fprintf(cfg.Progress, "t=%6.3fs %s\n", e.At.Seconds(), e.What)
	}
	// Events run one after another on one goroutine, in burst order, so a
	// slow one (a kill waits for nothing, but a store write may) never
	// overtakes an earlier one; the report records when each happened.
	steps := map[int][]func(){}
	add := func(burst int, do func()) {
		if burst > 0 {
			steps[burst] = append(steps[burst], do)
		}
	}
	// A member's graceful stop waits for its clients' streams (the
	// replicas' watches) for seconds; it runs on its own so the steps
	// after it are not held up. The member stops serving at once.
	var memberStopped sync.WaitGroup
	defer memberStopped.Wait()
	add(cfg.StopMemberAt, func() {
		l := c.Leader()
		if l == nil {
			event("no etcd leader to stop")
			return
		}
		event("stopping etcd member %s (the leader)", l.Name)
		memberStopped.Go(func() {
			l.Stop()
			event("etcd member %s stopped (graceful close returned)", l.Name)
		})
	})
	add(cfg.KillReplicaAt, func() {
		reps[0].kill()
		event("killed lpsd replica 0 (%s)", reps[0].addr)
	})
	add(cfg.RestartReplicaAt, func() {
		event("restarting lpsd replica 0")
		if err := reps[0].start(ctx); err != nil {
			event("restart of replica 0 failed: %v", err)
			return
		}
		event("lpsd replica 0 serving again")
	})
	add(cfg.ChangeAt, func() {
		event("raising %s to %d%%", RollingVer, cfg.ChangeTo)
		conv, err := change(ctx, operator, reps, cfg.ChangeTo)
		if err != nil {
			event("percentage change failed: %v", err)
			return
		}
		rep.Convergence = conv
		event("write acknowledged after %s; every replica's snapshot had %d%% %s after that (per replica %v)", conv.Write.Round(time.Millisecond), cfg.ChangeTo, conv.Max, conv.PerReplica)
	})
	queue := make(chan func(), 16)
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		for do := range queue {
			do()
		}
	}()

	rep.Nodes = make([]NodeResult, cfg.Nodes)
	var all sync.WaitGroup
	per := (cfg.Nodes + cfg.Bursts - 1) / cfg.Bursts
bursts:
	for b := 0; b < cfg.Bursts; b++ {
		if d := time.Until(start.Add(time.Duration(b) * cfg.Arrival / time.Duration(cfg.Bursts))); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				break bursts
			}
		}
		for _, do := range steps[b] {
			queue <- do
		}
		var burst sync.WaitGroup
		for i := b * per; i < min((b+1)*per, cfg.Nodes); i++ {
			burst.Add(1)
			all.Go(func() {
				r := reps[i%len(reps)]
				res := fetch(ctx, cfg, start, i, vmIDs[i], tokens[i], r, clusterCA)
				// A burst is its calls; the reports come after provisioning.
				burst.Done()
				if cfg.Loop != nil && res.Outcome == Served {
					report(ctx, cfg.Loop, &res, cfg.NodeTimeout, vmIDs[i], tokens[i], r, reps[(i+1)%len(reps)], clusterCA)
				}
				rep.Nodes[i] = res
			})
		}
		if cfg.Paced {
			burst.Wait()
		}
	}
	close(queue)
	all.Wait()
	rep.Elapsed = time.Since(start)
	rep.Load = meter.Stop()
	<-eventsDone
	if cfg.Loop != nil {
		// A hang is seen only once its nodes' silent-after has passed:
		// wait up to Linger for a halt. A halt decided on the last reports
		// reaches the replicas after the last node; give it the bound
		// under test to arrive.
		linger := time.NewTimer(cfg.Loop.Linger)
		poll := time.NewTicker(100 * time.Millisecond)
	wait:
		for !watch.seen() {
			select {
			case <-poll.C:
			case <-linger.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		linger.Stop()
		poll.Stop()
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	stopWatch()
	<-watched
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.Loop != nil {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if rep.Loop, err = settle(sctx, operator, start, rep.Nodes, vmIDs, cfg.Loop, watch, reps); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// fetch does one node's check-hotfix call and classifies it.
func fetch(ctx context.Context, cfg Config, runStart time.Time, i int, vmID, token string, r *replica, clusterCA *x509.CertPool) NodeResult {
	res := NodeResult{Node: i, Replica: r.idx}
	before := r.current()
	ctx, cancel := context.WithTimeout(ctx, cfg.NodeTimeout)
	t0 := time.Now()
	r.mu.Lock()
	addr := r.addr
	r.mu.Unlock()
	target := lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: clusterCA}
	var req lpsclient.Request
	if cfg.Loop != nil {
		// The node reports its outcome, as launch does: it declares its base
		// and its boot, and may take a canary seat.
		req = lpsclient.Request{Base: Base, Reports: true, Boot: bootID(vmID, 0)}
	}
	body, err := lpsclient.FetchRequest(ctx, target, token, req)
	t1 := time.Now()
	cancel()
	after := r.current()
	res.Start, res.Latency = t0.Sub(runStart), t1.Sub(t0)
	res.Snapshot = before != nil || after != nil
	pb, pa := rollingPercent(before), rollingPercent(after)
	res.Stable, res.Percent = before != nil && after != nil && pb == pa, pb

	if err != nil {
		var le *lpsclient.Error
		if errors.As(err, &le) {
			res.Code = le.Code.String()
			if le.Class != lpsclient.ClassUnreachable {
				res.Outcome, res.Detail = Wrong, err.Error()
				return res
			}
		}
		res.Outcome = FailedOther
		if r.downDuring(t0, t1) {
			res.Outcome = FailedReplicaDown
		}
		return res
	}
	got, err := hotfix.ParsePointer([]byte(body))
	if err != nil {
		res.Outcome, res.Detail = Wrong, "unparsable answer: "+err.Error()
		return res
	}
	res.Rolling = got.Hotfixes[Base] == RollingVer
	res.Other = got.Hotfixes[OtherBase] == OtherVer
	res.Loop = got.Hotfixes[Base] == LoopVer
	res.Incumbent = cfg.Loop != nil && got.Hotfixes[Base] == CompleteVer
	// The service answered from a snapshot it held during the call; with
	// one change at most per run, that is the one before or the one after.
	res.Outcome, res.Detail = Wrong, "no snapshot to check against"
	for _, seated := range []bool{false, true} {
		for _, s := range []*lps.Snapshot{before, after} {
			if s == nil {
				continue
			}
			if d := diff(got, expected(s.Releases, vmID, req.Base, seated)); d == "" {
				res.Outcome, res.Detail, res.Seated = Served, "", seated
				return res
			} else if !seated {
				res.Detail = d
			}
		}
	}
	return res
}

// rollingPercent returns RollingVer's percentage in s, -1 without s.
func rollingPercent(s *lps.Snapshot) int {
	if s == nil {
		return -1
	}
	for _, r := range s.Releases {
		if r.Version == RollingVer {
			return r.Rollout.Percent
		}
	}
	return -1
}

// publish stores the simulator's releases, signed by a fresh release key,
// through the store as the admin API would. A closed-loop run has LoopVer,
// under its plan, in place of CompleteVer and RollingVer.
func publish(ctx context.Context, st store.Store, cfg Config) error {
	_, priv, err := release.GenerateKey(nil)
	if err != nil {
		return err
	}
	type rel struct {
		version string
		state   rollout.State
		percent int
		revoked bool
	}
	rels := []rel{
		{CompleteVer, rollout.Complete, 100, false},
		{RollingVer, rollout.Rolling, cfg.Percent, false},
	}
	if cfg.Loop != nil {
		rels = []rel{{LoopVer, rollout.Draft, 0, false}}
		if cfg.Loop.Second {
			rels = append(rels, rel{CompleteVer, rollout.Complete, 100, false})
		}
	}
	rels = append(rels, rel{RevokedVer, rollout.Halted, 0, true}, rel{OtherVer, rollout.Rolling, OtherPercent, false})
	for _, r := range rels {
		env, err := sign(priv, r.version)
		if err != nil {
			return err
		}
		now := time.Now()
		rec := rollout.Release{
			Version: r.version, Base: r.version[:9], Envelope: env,
			Rollout: rollout.Rollout{State: r.state, Percent: r.percent}, Revoked: r.revoked,
			PublishedAt: now, UpdatedAt: now,
		}
		if r.version == LoopVer {
			if rec, err = rec.SetPlan(cfg.Loop.Plan, now); err != nil {
				return fmt.Errorf("plan %s: %w", r.version, err)
			}
		}
		if _, err := st.PutRelease(ctx, rec, 0, store.AuditEntry{Time: now, Actor: "fleetsim", Action: "publish", Target: r.version}, nil); err != nil {
			return fmt.Errorf("publish %s: %w", r.version, err)
		}
	}
	return nil
}

func sign(priv ed25519.PrivateKey, version string) ([]byte, error) {
	return release.Sign(release.Release{
		Base:    version[:9],
		Version: version,
		Artifacts: map[string]release.Artifact{
			release.Platform(runtime.GOOS, runtime.GOARCH): {
				URL:    "https://artifacts.invalid/aks-node-controller-" + version,
				SHA256: fmt.Sprintf("%064x", patch(version)),
				Size:   1 << 20,
			},
		},
		NotAfter: time.Now().Add(24 * time.Hour),
	}, priv)
}

// change raises RollingVer's percentage as the admin API does (read,
// SetScope, compare-and-swap write) and polls every replica's snapshot,
// with a deadline, until it shows the new percentage. A replica's time is
// from the acknowledgement to when it built that snapshot (its Built
// stamp), so a slow poll does not inflate it; it is negative if the
// replica had the change before the writer heard back.
func change(ctx context.Context, st store.Store, reps []*replica, percent int) (*Convergence, error) {
	began := time.Now()
	r, rev, err := st.Release(ctx, RollingVer)
	if err != nil {
		return nil, err
	}
	next, err := r.SetScope(percent, nil, nil)
	if err != nil {
		return nil, err
	}
	next.UpdatedAt = time.Now()
	if _, err := st.PutRelease(ctx, next, rev, store.AuditEntry{Time: next.UpdatedAt, Actor: "fleetsim", Action: "rollout-set", Target: RollingVer}, nil); err != nil {
		return nil, err
	}
	acked := time.Now()
	conv := &Convergence{Percent: percent, Write: acked.Sub(began), PerReplica: make([]time.Duration, len(reps))}
	pending := len(reps)
	done := make([]bool, len(reps))
	deadline := acked.Add(convergeLimit)
	for pending > 0 && time.Now().Before(deadline) {
		for i, rp := range reps {
			if done[i] {
				continue
			}
			if s := rp.current(); rollingPercent(s) == percent {
				conv.PerReplica[i] = s.Built.Sub(acked)
				conv.Max = max(conv.Max, conv.PerReplica[i])
				done[i] = true
				pending--
			}
		}
		time.Sleep(time.Millisecond)
	}
	if pending > 0 {
		conv.Converged = false
		return conv, nil
	}
	conv.Converged = true
	return conv, nil
}

// ReplicaHandshakes is the handshake limit of each of replicas replicas when
// Config leaves it 0: lpsd's default per CPU times a replica's share of this
// machine, which the replicas share with each other and with the simulated
// nodes' TLS clients (about half of the CPU when saturated). lpsd's own
// default assumes the machine's CPUs are its own, which here would admit
// several times more handshakes than the CPUs can finish within a node's
// deadline.
func ReplicaHandshakes(replicas int) int {
	return max(1, lps.DefaultHandshakesPerCPU*runtime.GOMAXPROCS(0)/(2*max(1, replicas)))
}

func (c Config) handshakes() int {
	if c.MaxHandshakes > 0 {
		return c.MaxHandshakes
	}
	return ReplicaHandshakes(c.Replicas)
}
