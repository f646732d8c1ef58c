package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"nodehotfix/bench/internal/mint"
	"nodehotfix/bench/internal/procstat"
	"nodehotfix/bench/internal/rig"
	"nodehotfix/test/harness"
)

// sampleEvery is how often lpsd's metrics and descriptors are read.
const sampleEvery = time.Second

// fdSlack is descriptors kept free for everything but connections.
const fdSlack = 256

type options struct {
	probes                  int
	interval                time.Duration
	baseline                time.Duration
	silent                  int
	silentDur               time.Duration
	idle                    int
	idleDur                 time.Duration
	trickle, openCall       int
	trickleDur, openCallDur time.Duration
	reopen                  time.Duration
	parallel                int
	attacker                string
	lpsdArgs                []string
	output                  string
	check                   bool
	keep                    bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("abuse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.probes, "probes", 16, "probe nodes")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "each probe starts a call this often, whatever happened to its last")
	fs.DurationVar(&o.baseline, "baseline", 5*time.Second, "length of the phase without an attack")
	fs.IntVar(&o.silent, "silent", 2000, "phase silent: TCP sockets that connect and never send a byte (0: skip the phase)")
	fs.DurationVar(&o.silentDur, "silent-dur", 30*time.Second, "length of phase silent")
	fs.IntVar(&o.idle, "idle", 4500, "phase idle-h2: connections with TLS (ALPN h2), the HTTP/2 preface and SETTINGS done, then never a call (0: skip the phase)")
	fs.DurationVar(&o.idleDur, "idle-dur", 30*time.Second, "length of phase idle-h2")
	fs.IntVar(&o.trickle, "trickle", 512, "phase trickle: connections sending a ClientHello a byte per 400 ms (0: skip the phase)")
	fs.DurationVar(&o.trickleDur, "trickle-dur", 30*time.Second, "length of phase trickle")
	fs.IntVar(&o.openCall, "open-call", 2000, "phase open-call: idle-h2 connections with one call opened and its request never sent (0: skip the phase)")
	fs.DurationVar(&o.openCallDur, "open-call-dur", 45*time.Second, "length of phase open-call (longer than lpsd's 30 s connection age, which is what closes them)")
	fs.DurationVar(&o.reopen, "reopen", time.Second, "the attacker opens a connection lpsd closed again after about this long (0: never)")
	fs.IntVar(&o.parallel, "parallel", 64, "attacker connections being set up at once")
	fs.StringVar(&o.attacker, "attacker-ip", "127.0.0.2", "the attacker's local address (the probes use 127.0.0.1), so per-peer limits tell them apart")
	fs.Func("lpsd-arg", "extra lpsd flag, e.g. -lpsd-arg=--max-handshakes=64 (repeatable)", func(s string) error {
		o.lpsdArgs = append(o.lpsdArgs, s)
		return nil
	})
	fs.StringVar(&o.output, "o", "text", "output: text or json")
	fs.BoolVar(&o.check, "check", false, fmt.Sprintf("exit 1 unless every attack phase served at least %.0f%% of probe calls", minServedPct))
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (lpsd's log)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	local := net.ParseIP(o.attacker)
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "abuse: unexpected arguments: %v\n", fs.Args())
		return 2
	case o.output != "text" && o.output != "json":
		fmt.Fprintf(stderr, "abuse: -o %q: want text or json\n", o.output)
		return 2
	case o.probes < 1 || o.interval <= 0 || o.parallel < 1 || o.silent < 0 || o.idle < 0 || o.trickle < 0 || o.openCall < 0:
		fmt.Fprintln(stderr, "abuse: -probes, -interval and -parallel must be positive, -silent, -idle, -trickle and -open-call not negative")
		return 2
	case local == nil:
		fmt.Fprintf(stderr, "abuse: -attacker-ip %q is not an IP address\n", o.attacker)
		return 2
	}
	dir, err := os.MkdirTemp("", "bench-abuse-")
	if err != nil {
		fmt.Fprintln(stderr, "abuse:", err)
		return 1
	}
	if o.keep {
		fmt.Fprintln(stderr, "work directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	meter := procstat.NewMeter()
	res, err := measure(ctx, o, &net.TCPAddr{IP: local}, dir, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "abuse:", err)
		return 1
	}
	if o.output == "json" {
		if err := writeJSON(stdout, res); err != nil {
			fmt.Fprintln(stderr, "abuse:", err)
			return 1
		}
	} else {
		writeText(stdout, res)
		fmt.Fprintf(stdout, "\nduring the whole run (build included): %s\n", meter.Stop())
	}
	if o.check && len(res.Check) > 0 {
		return 1
	}
	return 0
}

// phaseSpec is one phase to run: an attack of kind with n connections, or
// none (n 0).
type phaseSpec struct {
	name string
	n    int
	dur  time.Duration
}

func measure(ctx context.Context, o options, local *net.TCPAddr, dir string, progress io.Writer) (result, error) {
	cfg := config{
		Probes: o.probes, IntervalMs: float64(o.interval) / float64(time.Millisecond), BudgetS: nodeBudget.Seconds(),
		ProbeLocal: "127.0.0.1", AttackLocal: local.IP.String(), ReopenS: o.reopen.Seconds(), Parallel: o.parallel, LPSDArgs: o.lpsdArgs,
	}
	// Probe connections in flight are at most one per budget per probe.
	probeFDs := o.probes * int(math.Ceil(float64(nodeBudget)/float64(o.interval)))
	var err error
	if cfg.NoFile, err = raiseNoFile(uint64(max(o.silent, o.idle, o.trickle, o.openCall) + probeFDs + fdSlack)); err != nil {
		return result{}, err
	}
	if room := int(cfg.NoFile) - probeFDs - fdSlack; max(o.silent, o.idle, o.trickle, o.openCall) > room {
		cfg.Notes = append(cfg.Notes, fmt.Sprintf("RLIMIT_NOFILE %d allows %d attacker connections: -silent %d, -idle %d, -trickle %d and -open-call %d capped to it", cfg.NoFile, room, o.silent, o.idle, o.trickle, o.openCall))
		o.silent, o.idle, o.trickle, o.openCall = min(o.silent, room), min(o.idle, room), min(o.trickle, room), min(o.openCall, room)
	}
	specs := []phaseSpec{{"baseline", 0, o.baseline}}
	if o.silent > 0 {
		specs = append(specs, phaseSpec{kindSilent, o.silent, o.silentDur})
	}
	if o.idle > 0 {
		specs = append(specs, phaseSpec{kindIdleH2, o.idle, o.idleDur})
	}
	if o.trickle > 0 {
		specs = append(specs, phaseSpec{kindTrickle, o.trickle, o.trickleDur})
	}
	if o.openCall > 0 {
		specs = append(specs, phaseSpec{kindOpenCall, o.openCall, o.openCallDur})
	}

	fmt.Fprintln(progress, "building lpsd, lpsctl, imds-emulator ...")
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return result{}, err
	}
	bins, err := harness.Build(ctx, binDir)
	if err != nil {
		return result{}, err
	}
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		return result{}, err
	}
	m, err := mint.New(mint.RSA, 6*time.Hour)
	if err != nil {
		return result{}, err
	}
	rootsFile := filepath.Join(dir, "imds-roots.pem")
	if err := os.WriteFile(rootsFile, m.RootPEM(), 0o644); err != nil {
		return result{}, err
	}
	l, err := harness.StartLPSD(ctx, bins, dir, harness.LPSDOptions{
		Store: "mem:", IMDSRoots: rootsFile, TLS: tlsFiles, Extra: append([]string{"--imds-no-aia"}, o.lpsdArgs...),
	})
	if err != nil {
		return result{}, err
	}
	defer l.Stop(5 * time.Second)
	if cfg.LPSDNoFile, err = maxOpenFiles(l.Pid()); err != nil {
		return result{}, err
	}
	if _, err := rig.PublishRelease(ctx, l, dir, rig.HotfixVersion); err != nil {
		return result{}, err
	}

	var total time.Duration
	for _, s := range specs {
		total += s.dur
	}
	perProbe := int(math.Ceil(1.2*float64(total)/float64(o.interval)/usesPerDocument)) + 1
	fmt.Fprintf(progress, "lpsd at %s; signing %d attested documents (%d per probe node, each used %d times) ...\n", l.GRPCAddr, perProbe*o.probes, perProbe, usesPerDocument)
	docs := make([][]string, o.probes)
	for i := range docs {
		if docs[i], err = m.Tokens(mint.VMIDs(fmt.Sprintf("abuse-probe-%d", i), perProbe)); err != nil {
			return result{}, err
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(tlsFiles.CAPEM)
	var cur atomic.Pointer[probeStats]
	p := &probes{target: newTarget(l.GRPCAddr, roots), docs: docs, interval: o.interval, phase: cur.Load}
	// One call first, so a broken setup fails here rather than as a phase
	// of failed probes.
	if err := p.call(ctx, docs[0][len(docs[0])-1]); err != nil {
		if served, _, _ := outcome(err); !served {
			return result{}, fmt.Errorf("first probe call: %w", err)
		}
	}

	stats := make([]*probeStats, len(specs))
	for i := range stats {
		stats[i] = &probeStats{}
	}
	stats[0].begin = time.Now()
	cur.Store(stats[0])
	var probesDone sync.WaitGroup
	probesDone.Go(func() { p.run(ctx) })

	var watch atomic.Pointer[lpsdWatch]
	samplerCtx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-samplerCtx.Done():
				return
			case <-t.C:
				if w := watch.Load(); w != nil {
					w.sample(samplerCtx)
				}
			}
		}
	})

	phases := make([]phaseReport, len(specs))
	for i, s := range specs {
		w := newLPSDWatch(ctx, l.HTTPAddr, l.Pid())
		watch.Store(w)
		if i > 0 {
			stats[i].begin = time.Now()
		}
		cur.Store(stats[i])
		fmt.Fprintf(progress, "phase %s: %s\n", s.name, describe(s))
		start := time.Now()
		m0, self0 := readMachine()
		var a *attacker
		var attack sync.WaitGroup
		actx, stopAttack := context.WithCancel(ctx)
		if s.n > 0 {
			a = &attacker{kind: s.name, target: s.n, addr: l.GRPCAddr, local: local, reopen: o.reopen, parallel: o.parallel}
			attack.Go(func() { a.run(actx) })
		}
		sleep(ctx, s.dur)
		window := time.Since(start)
		if a != nil {
			// Every call of the phase ends under attack: calls started in
			// the next budget are not counted, then the attack stops.
			cur.Store(&probeStats{begin: time.Now()})
			sleep(ctx, nodeBudget)
		}
		stopAttack()
		attack.Wait()
		phases[i] = phaseReport{Name: s.name, Seconds: window.Seconds(), LPSD: w.finish(ctx)}
		phases[i].Machine = machineUse(m0, self0, phases[i].LPSD.cpu)
		if a != nil {
			phases[i].Attacker = a.report()
		}
		if ctx.Err() != nil {
			break
		}
	}
	watch.Store(nil)
	stopSampler()
	sampler.Wait()
	cur.Store(nil)
	probesDone.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	for i := range phases {
		phases[i].Probe = stats[i].report()
	}
	return result{Config: cfg, Phases: phases, Check: check(phases, minServedPct), MinServedPct: minServedPct}, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func describe(s phaseSpec) string {
	switch s.name {
	case kindSilent:
		return fmt.Sprintf("%d TCP sockets that never send a byte, for %s + %s", s.n, s.dur, nodeBudget)
	case kindIdleH2:
		return fmt.Sprintf("%d idle HTTP/2 connections (TLS, preface, SETTINGS, no call), for %s + %s", s.n, s.dur, nodeBudget)
	case kindTrickle:
		return fmt.Sprintf("%d connections sending a ClientHello a byte per %s, for %s + %s", s.n, trickleEvery, s.dur, nodeBudget)
	case kindOpenCall:
		return fmt.Sprintf("%d HTTP/2 connections each with a call opened and never sent, for %s + %s", s.n, s.dur, nodeBudget)
	}
	return fmt.Sprintf("no attack, for %s", s.dur)
}

func readMachine() (procstat.Machine, time.Duration) {
	m, _ := procstat.ReadMachine()
	return m, procstat.Self()
}

// machineUse says how busy the machine was since m0 and self0, and how much
// of it was neither this process nor lpsd (lpsdCPU): other work competing.
func machineUse(m0 procstat.Machine, self0, lpsdCPU time.Duration) machineReport {
	m1, self1 := readMachine()
	capacity := m1.Total - m0.Total
	if capacity <= 0 {
		return machineReport{}
	}
	busy := m1.Busy - m0.Busy
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(capacity) }
	return machineReport{BusyPct: pct(busy), ToolPct: pct(self1 - self0), LPSDPct: pct(lpsdCPU), OthersPct: pct(max(busy-(self1-self0)-lpsdCPU, 0))}
}

// raiseNoFile raises this process's RLIMIT_NOFILE soft limit towards need,
// up to the hard limit, and returns the soft limit in force.
func raiseNoFile(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur >= need {
		return lim.Cur, nil
	}
	lim.Cur = min(need, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Cur, err)
	}
	return lim.Cur, nil
}
