package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"nodehotfix/bench/internal/mint"
	"nodehotfix/bench/internal/procstat"
	"nodehotfix/bench/internal/rig"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/test/harness"
)

const version = "202604.01.1"

type options struct {
	mode     string
	dur      time.Duration
	warm     time.Duration
	conc     []int
	docs     int
	leaf     string
	sample   time.Duration
	out      string
	keep     bool
	openDur  time.Duration
	loadFrac []float64
	logExtra int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", "throughput", "throughput (lpsd vs floor), report (an outcome report's server CPU vs a GetComponentConfig's, same lpsd), evidence (server CPU per GetComponentConfig with release-trust evidence vs without), memory (lpsd RSS under distinct documents) or profile (pprof of the request path)")
	fs.DurationVar(&o.dur, "dur", 10*time.Second, "length of each closed-loop phase (memory: of the run; 0 = until every document was used once)")
	fs.DurationVar(&o.openDur, "open-dur", 10*time.Second, "length of each open-loop phase")
	fs.DurationVar(&o.warm, "warmup", 2*time.Second, "closed-loop warm-up before measuring each server")
	conc := fs.String("conc", "4,16,64", "closed-loop concurrencies tried for max throughput (memory and profile use the first)")
	load := fs.String("load", "0.5,0.8", "open-loop rates as fractions of each server's max throughput")
	fs.IntVar(&o.docs, "docs", 60000, "attested documents to sign before measuring, one vmId each")
	fs.StringVar(&o.leaf, "leaf", "rsa", "document signing key: rsa (as Azure) or ecdsa (mints ~15x faster, for memory runs)")
	fs.DurationVar(&o.sample, "sample", 5*time.Second, "memory: RSS sampling interval")
	fs.StringVar(&o.out, "out", "", "profile: directory for the profiles (default: the work directory, kept)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	fs.IntVar(&o.logExtra, "log-extra", 13, "evidence: releases of other bases published after the served one, to grow the log (each also an lpsctl sign, co-sign and publish per lpsd)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.conc, err = parseList(*conc, strconv.Atoi); err == nil {
		o.loadFrac, err = parseList(*load, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	}
	if err != nil || len(o.conc) == 0 {
		fmt.Fprintf(stderr, "loadgen: bad -conc or -load: %v\n", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "bench-loadgen-")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if o.mode == "profile" && o.out == "" {
		o.out, o.keep = dir, true
	}
	if o.keep {
		fmt.Fprintln(stdout, "work directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := bench(ctx, o, dir, stdout); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	return 0
}

// env is what every mode shares.
type env struct {
	dir    string
	bins   harness.Binaries
	floor  string
	tls    harness.TLSFiles
	roots  *x509.CertPool // cluster CA, as nodes trust it
	rootsF string         // attested-document roots for lpsd
	toks   *tokens
	out    io.Writer
	procs  []*harness.Proc
}

func bench(ctx context.Context, o options, dir string, out io.Writer) error {
	e := &env{dir: dir, out: out}
	defer func() {
		for _, p := range e.procs {
			p.Stop(5 * time.Second)
		}
	}()
	var err error
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	if e.bins, err = harness.Build(ctx, binDir); err != nil {
		return err
	}
	e.floor = filepath.Join(binDir, "lpsfloor")
	if err := harness.GoBuild(ctx, "./bench/floor/lpsfloor", e.floor, ""); err != nil {
		return err
	}
	if e.tls, err = harness.MintTLS(dir); err != nil {
		return err
	}
	e.roots = x509.NewCertPool()
	e.roots.AppendCertsFromPEM(e.tls.CAPEM)
	m, err := mint.New(mint.Leaf(o.leaf), 6*time.Hour)
	if err != nil {
		return err
	}
	e.rootsF = filepath.Join(dir, "imds-roots.pem")
	if err := os.WriteFile(e.rootsF, m.RootPEM(), 0o644); err != nil {
		return err
	}
	start := time.Now()
	all, err := m.Tokens(mint.VMIDs("loadgen", o.docs))
	if err != nil {
		return err
	}
	e.toks = &tokens{all: all}
	fmt.Fprintf(out, "signed %d attested documents (%s leaf, one vmId each) in %s, before any measurement\n", o.docs, o.leaf, time.Since(start).Round(100*time.Millisecond))
	switch o.mode {
	case "throughput":
		return throughput(ctx, o, e)
	case "report":
		return reportCost(ctx, o, e)
	case "evidence":
		return evidenceCost(ctx, o, e)
	case "memory":
		return memory(ctx, o, e)
	case "profile":
		return profile(ctx, o, e)
	}
	return fmt.Errorf("unknown -mode %q", o.mode)
}

// startLPSD starts the real lpsd (in-memory store, attestation on with the
// bench CA's root, no AIA) and publishes a release rolled out to 100%, so
// every node is served the pointer.
func (e *env) startLPSD(ctx context.Context, extra ...string) (*harness.LPSD, string, error) {
	l, err := harness.StartLPSD(ctx, e.bins, e.dir, harness.LPSDOptions{
		Store: "mem:", IMDSRoots: e.rootsF, TLS: e.tls, Extra: append(rig.LPSDFlags(), extra...),
	})
	if err != nil {
		return nil, "", err
	}
	e.procs = append(e.procs, l.Proc)
	envFile, err := rig.PublishRelease(ctx, l, e.dir, version)
	if err != nil {
		return nil, "", err
	}
	return l, envFile, nil
}

// served makes one call and returns the config, checking it is the
// published release.
func (e *env) served(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	cfg, err := lpsclient.Fetch(ctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: e.roots}, e.toks.take())
	if err != nil {
		return "", err
	}
	if !strings.Contains(cfg, version) {
		return "", fmt.Errorf("served config lacks %s: %s", version, cfg)
	}
	return cfg, nil
}

func (e *env) startFloor(ctx context.Context, config string, extra ...string) (target, error) {
	return e.startFloorNamed(ctx, "floor", config, extra...)
}

// startAttestingFloor starts the floor that verifies each call's attested
// document as lpsd does (lpsfloor -imds-roots, lpsd's roots), so each call
// needs a document of its own: it takes them from the pool in its own
// order, independently of lpsd's.
func (e *env) startAttestingFloor(ctx context.Context, config string) (target, error) {
	t, err := e.startFloorNamed(ctx, "attesting-floor", config, "-imds-roots", e.rootsF)
	t.name, t.toks = "attesting floor (grpc-go TLS, attest.Verify, constant)", &tokens{all: e.toks.all}
	return t, err
}

func (e *env) startFloorNamed(ctx context.Context, name, config string, extra ...string) (target, error) {
	cfgFile, addrFile := filepath.Join(e.dir, name+"-config.json"), filepath.Join(e.dir, name+".addr")
	if err := os.WriteFile(cfgFile, []byte(config), 0o644); err != nil {
		return target{}, err
	}
	argv := append([]string{e.floor, "-tls-cert", e.tls.CertFile, "-tls-key", e.tls.KeyFile, "-addr-file", addrFile, "-config-file", cfgFile}, extra...)
	p, err := harness.Start("lpsfloor", filepath.Join(e.dir, "lps"+name+".log"), argv, nil)
	if err != nil {
		return target{}, err
	}
	e.procs = append(e.procs, p)
	addr, err := harness.WaitFile(ctx, p, addrFile)
	if err != nil {
		return target{}, err
	}
	return target{name: "floor (bare grpc-go TLS, constant)", addr: addr, pid: p.Pid(), toks: &tokens{all: e.toks.all[:1], constant: true}}, nil
}

// refuses checks that the attesting floor at addr refuses a call whose
// document is not one: it attests, rather than answering everyone.
func refuses(ctx context.Context, addr string, roots *x509.CertPool) error {
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	_, err := lpsclient.Fetch(ctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: roots}, "bm90LWEtZG9jdW1lbnQ=")
	var le *lpsclient.Error
	if !errors.As(err, &le) || le.Code != codes.Unauthenticated {
		return fmt.Errorf("attesting floor answered a call without a valid document: %v", err)
	}
	return nil
}

func throughput(ctx context.Context, o options, e *env) error {
	l, _, err := e.startLPSD(ctx)
	if err != nil {
		return err
	}
	cfg, err := e.served(ctx, l.GRPCAddr)
	if err != nil {
		return err
	}
	fl, err := e.startFloor(ctx, cfg)
	if err != nil {
		return err
	}
	af, err := e.startAttestingFloor(ctx, cfg)
	if err != nil {
		return err
	}
	if err := refuses(ctx, af.addr, e.roots); err != nil {
		return err
	}
	lpsd := target{name: "lpsd (attestation on)", addr: l.GRPCAddr, pid: l.Pid(), toks: e.toks}
	fmt.Fprintf(e.out, "\nnew TLS connection + one GetComponentConfig per node (lpsclient.Fetch, %s deadline); closed loop %s per concurrency, open loop %s per rate; the servers alternate phase by phase\n", nodeTimeout, o.dur, o.openDur)
	fmt.Fprintf(e.out, "  floor: %s\n  afloor: %s\n  lpsd:  %s\n\n", fl.name, af.name, lpsd.name)
	targets := []target{fl, af, lpsd}
	names := map[string]string{fl.name: "floor", af.name: "afloor", lpsd.name: "lpsd"}
	meter := procstat.NewMeter()
	srv0 := map[string]time.Duration{}
	for _, t := range targets {
		srv0[t.name], _ = procstat.CPU(t.pid)
		closedLoop(ctx, t, e.roots, o.conc[0], o.warm)
	}
	best := map[string]float64{}
	cpu := map[string]float64{}
	allCPU := map[string]time.Duration{}
	allOK := map[string]int64{}
	for _, c := range o.conc {
		for _, t := range targets {
			p := closedLoop(ctx, t, e.roots, c, o.dur)
			lat := p.latencies()
			fmt.Fprintf(e.out, "  %-6s closed conc %-4d %7.0f req/s  p50 %6.1fms p99 %6.1fms  failed %d %v  server CPU %4.0fus/req  client CPU %4.0fus/req\n",
				names[t.name], c, p.rate(), lat.Median, lat.P99, p.failures(), p.failed, p.perReq(p.serverCPU), p.perReq(p.clientCPU))
			if p.rate() > best[t.name] {
				best[t.name], cpu[t.name] = p.rate(), p.perReq(p.serverCPU)
			}
			allCPU[t.name] += p.serverCPU
			allOK[t.name] += p.ok
		}
	}
	for _, f := range o.loadFrac {
		for _, t := range targets {
			rate := f * best[t.name]
			p := openLoop(ctx, t, e.roots, rate, o.openDur)
			lat := p.latencies()
			fmt.Fprintf(e.out, "  %-6s open %3.0f%% = %5.0f/s  achieved %5.0f/s  p50 %6.1fms p99 %6.1fms  failed %d %v dropped %d  server CPU %4.0fus/req\n",
				names[t.name], 100*f, rate, float64(p.ok)/o.openDur.Seconds(), lat.Median, lat.P99, p.failures(), p.failed, p.dropped, p.perReq(p.serverCPU))
		}
	}
	load := meter.Stop()
	var servers time.Duration
	for _, t := range targets {
		s1, _ := procstat.CPU(t.pid)
		servers += s1 - srv0[t.name]
	}
	fmt.Fprintf(e.out, "  %s; of it the servers %.0f%%\n", load, 100*float64(servers)/float64(load.MachineCapacity))
	if mean, err := verifyMean(ctx, l.HTTPAddr); err == nil {
		fmt.Fprintf(e.out, "\nlpsd's mean attestation verification (its /metrics, whole run): %s\n", mean.Round(time.Microsecond))
	}
	fmt.Fprintf(e.out, "\nmax throughput: lpsd %.0f req/s, floor %.0f req/s: ratio %.2f (target >= 0.7)\n", best[lpsd.name], best[fl.name], best[lpsd.name]/best[fl.name])
	fmt.Fprintf(e.out, "server CPU per request at max: lpsd %.0fus, floor %.0fus: capacity ratio %.2f (floor CPU / lpsd CPU, client cost excluded)\n",
		cpu[lpsd.name], cpu[fl.name], cpu[fl.name]/cpu[lpsd.name])
	perReq := func(n string) float64 { return float64(allCPU[n].Microseconds()) / float64(allOK[n]) }
	fmt.Fprintf(e.out, "server CPU per request over all closed-loop phases: lpsd %.0fus, floor %.0fus: capacity ratio %.2f\n",
		perReq(lpsd.name), perReq(fl.name), perReq(fl.name)/perReq(lpsd.name))
	fmt.Fprintf(e.out, "attesting floor: max %.0f req/s (lpsd ratio %.2f); server CPU per request at max %.0fus: capacity ratio %.2f (target >= 0.9); over all closed-loop phases %.0fus: capacity ratio %.2f\n",
		best[af.name], best[lpsd.name]/best[af.name], cpu[af.name], cpu[af.name]/cpu[lpsd.name], perReq(af.name), perReq(af.name)/perReq(lpsd.name))
	if n := e.toks.wrapped.Load(); n > 0 {
		fmt.Fprintf(e.out, "note: %d calls reused a document (pool of %d exhausted; reuse within attest MaxUses is still accepted)\n", n, len(e.toks.all))
	}
	return nil
}

// memory drives the real lpsd at max throughput with a distinct document
// per call and samples its memory.
func memory(ctx context.Context, o options, e *env) error {
	l, _, err := e.startLPSD(ctx)
	if err != nil {
		return err
	}
	if _, err := e.served(ctx, l.GRPCAddr); err != nil {
		return err
	}
	t := target{name: "lpsd", addr: l.GRPCAddr, pid: l.Pid(), toks: e.toks}
	m0, _ := procstat.ReadMemory(t.pid)
	fmt.Fprintf(e.out, "\nlpsd memory at max throughput (closed loop, conc %d), one distinct document per call; attest replay cache holds at most %d documents\n", o.conc[0], attest.DefaultReplayCacheSize)
	fmt.Fprintf(e.out, "  %-8s %10s %12s %10s %10s\n", "t", "calls", "distinct", "RSS", "peak RSS")
	fmt.Fprintf(e.out, "  %-8s %10d %12d %10s %10s\n", "idle", 0, e.toks.used(), procstat.MiB(m0.RSS), procstat.MiB(m0.HWM))
	dur := o.dur
	if dur == 0 {
		dur = 24 * time.Hour
	}
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	start := time.Now()
	done := make(chan phase, 1)
	go func() {
		// Stop once every document was used once, when -dur is 0.
		pctx, pcancel := context.WithCancel(runCtx)
		defer pcancel()
		if o.dur == 0 {
			go func() {
				for pctx.Err() == nil && e.toks.next.Load() < int64(len(e.toks.all)) {
					time.Sleep(100 * time.Millisecond)
				}
				pcancel()
			}()
		}
		done <- closedLoop(pctx, t, e.roots, o.conc[0], dur)
	}()
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	var p phase
	for running := true; running; {
		label := ""
		select {
		case p = <-done:
			running, label = false, "end "
		case <-tick.C:
		}
		m, err := procstat.ReadMemory(t.pid)
		if err != nil {
			return err
		}
		label += time.Since(start).Round(time.Second).String()
		fmt.Fprintf(e.out, "  %-8s %10d %12d %10s %10s\n", label, e.toks.next.Load(), e.toks.used(), procstat.MiB(m.RSS), procstat.MiB(m.HWM))
	}
	fmt.Fprintf(e.out, "\n%d calls answered at %.0f req/s, %d failed %v; documents reused: %d\n", p.ok, p.rate(), p.failures(), p.failed, e.toks.wrapped.Load())
	if mean, err := verifyMean(ctx, l.HTTPAddr); err == nil {
		fmt.Fprintf(e.out, "lpsd's mean attestation verification (its /metrics): %s\n", mean.Round(time.Microsecond))
	}
	return nil
}

// profile drives lpsd as it ships, with its --debug-listen pprof on, then
// the floor, each at the first -conc for -dur while taking a CPU profile,
// then a heap profile, and prints the top of each with the CPU per request.
func profile(ctx context.Context, o options, e *env) error {
	lpsdPprof, err := harness.FreePort()
	if err != nil {
		return err
	}
	l, _, err := e.startLPSD(ctx, "--debug-listen", lpsdPprof)
	if err != nil {
		return err
	}
	cfg, err := e.served(ctx, l.GRPCAddr)
	if err != nil {
		return err
	}
	if err := e.profileTarget(ctx, o, "lpsd", target{name: "lpsd", addr: l.GRPCAddr, pid: l.Proc.Pid(), toks: e.toks}, lpsdPprof); err != nil {
		return err
	}
	l.Stop(5 * time.Second)
	pprofAddr, err := harness.FreePort()
	if err != nil {
		return err
	}
	fl, err := e.startFloor(ctx, cfg, "-pprof-listen", pprofAddr)
	if err != nil {
		return err
	}
	return e.profileTarget(ctx, o, "floor", fl, pprofAddr)
}

func (e *env) profileTarget(ctx context.Context, o options, name string, t target, pprofAddr string) error {
	closedLoop(ctx, t, e.roots, o.conc[0], o.warm)
	cpuFile, heapFile := filepath.Join(o.out, name+"-cpu.pprof"), filepath.Join(o.out, name+"-heap.pprof")
	got := make(chan error, 1)
	go func() {
		got <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, int(o.dur.Seconds())), cpuFile)
	}()
	ph := closedLoop(ctx, t, e.roots, o.conc[0], o.dur+time.Second)
	if err := <-got; err != nil {
		return err
	}
	if err := fetchTo(ctx, "http://"+pprofAddr+"/debug/pprof/heap", heapFile); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "\n=== %s: profiled %s at conc %d: %.0f req/s, server CPU %.0fus/req, failed %d %v\n", name, o.dur, o.conc[0], ph.rate(), ph.perReq(ph.serverCPU), ph.failures(), ph.failed)
	fmt.Fprintf(e.out, "profiles: %s %s (requests in the CPU profile window: about %.0f)\n", cpuFile, heapFile, ph.rate()*o.dur.Seconds())
	for _, args := range [][]string{
		{"-top", "-nodecount=20", cpuFile},
		{"-top", "-cum", "-nodecount=45", cpuFile},
		{"-top", "-sample_index=inuse_space", "-nodecount=8", heapFile},
	} {
		outp, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go tool pprof %v: %v\n%s", args, err, outp)
		}
		fmt.Fprintf(e.out, "\n$ go tool pprof %s\n%s", strings.Join(args, " "), outp)
	}
	return nil
}

func fetchTo(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// scrape returns the Prometheus sample lines of url that start with one of
// prefixes (a metric name, with or without labels).
func scrape(ctx context.Context, url string, prefixes ...string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return out, nil
}

// verifyMean returns lpsd's own mean attestation verification time for
// accepted documents, from its /metrics.
func verifyMean(ctx context.Context, httpAddr string) (time.Duration, error) {
	lines, err := scrape(ctx, "http://"+httpAddr+"/metrics",
		`lpsd_attestation_verify_seconds_sum{result="accepted"}`, `lpsd_attestation_verify_seconds_count{result="accepted"}`)
	if err != nil {
		return 0, err
	}
	var sum, count float64
	for _, l := range lines {
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		if strings.Contains(l, "_sum") {
			sum = v
		} else {
			count = v
		}
	}
	if count == 0 {
		return 0, fmt.Errorf("no accepted verifications in %v", lines)
	}
	return time.Duration(sum / count * float64(time.Second)), nil
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := parse(p)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// reportCost compares, on one lpsd, the server CPU of an outcome report
// (ReportOutcome: verify, validate, a batched store write) with a
// GetComponentConfig's, phase by phase, each a new TLS connection per node.
func reportCost(ctx context.Context, o options, e *env) error {
	l, _, err := e.startLPSD(ctx)
	if err != nil {
		return err
	}
	fetch := target{name: "GetComponentConfig", addr: l.GRPCAddr, pid: l.Pid(), toks: e.toks}
	rep := target{name: "ReportOutcome", addr: l.GRPCAddr, pid: l.Pid(), toks: e.toks, op: report}
	fmt.Fprintf(e.out, "\none lpsd (%s store); new TLS connection + one call per node; closed loop %s per concurrency, the two calls alternating\n", "mem:", o.dur)
	closedLoop(ctx, fetch, e.roots, o.conc[0], o.warm)
	closedLoop(ctx, rep, e.roots, o.conc[0], o.warm)
	cpu := map[string]time.Duration{}
	ok := map[string]int64{}
	for _, c := range o.conc {
		for _, t := range []target{fetch, rep} {
			p := closedLoop(ctx, t, e.roots, c, o.dur)
			lat := p.latencies()
			fmt.Fprintf(e.out, "  %-18s conc %-4d %7.0f req/s  p50 %6.1fms p99 %6.1fms  failed %d %v  server CPU %4.0fus/req\n",
				t.name, c, p.rate(), lat.Median, lat.P99, p.failures(), p.failed, p.perReq(p.serverCPU))
			cpu[t.name] += p.serverCPU
			ok[t.name] += p.ok
		}
	}
	per := func(n string) float64 { return float64(cpu[n].Microseconds()) / float64(ok[n]) }
	fmt.Fprintf(e.out, "\nserver CPU per call over all phases: report %.0fus, GetComponentConfig %.0fus: ratio %.2f (target <= 1.2)\n",
		per(rep.name), per(fetch.name), per(rep.name)/per(fetch.name))
	return nil
}

// report is one node's outcome report for the published release, a fresh
// boot each call.
func report(ctx context.Context, addr string, roots *x509.CertPool, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	b := make([]byte, 16)
	rand.Read(b)
	boot := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	_, err := lpsclient.Report(ctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: roots}, tok, &nodev1.ReportOutcomeRequest{
		BootId: boot, BakedVersion: "202604.01.0", Agent: nodev1.Agent_AGENT_HOTFIX, AgentVersion: version, HotfixVersion: version,
		Decision: "hotfix", CheckHotfixOutcome: "lpsRead", DownloadHotfixOutcome: "staged", Route: "direct", ProvisionMs: 60000,
	})
	return err
}
