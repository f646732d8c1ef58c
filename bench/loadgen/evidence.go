package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"nodehotfix/bench/internal/procstat"
	"nodehotfix/bench/internal/rig"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/trust"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
	"nodehotfix/test/harness"
)

// declaredBase is the base of the published release (version's), which
// every node of this mode declares.
const declaredBase = "202604.01"

// trustWorld is release trust as the demo and the end-to-end tests set
// it up (harness.Trust: a 2-of-3 baked key set requiring the log, a log
// key, one witness as its own process), rotated twice, with the release
// and extra records in the log.
type trustWorld struct {
	*harness.Trust
	dir   string
	links []string // key-set envelopes v2, v3
	// served is the served release's envelope (version), signed by b, a
	// and d: 2 of the root (which the plain lpsd verifies it under) and 2
	// of v3 (the evidence lpsd's newest).
	served  string
	extra   []string // further releases of other bases, only to grow the log
	keptLog int64    // the log size after the served release (1): what nodes declare
}

// newTrustWorld makes the keys, starts the witness and signs, offline as
// the key holders would, the two links and every release.
func newTrustWorld(ctx context.Context, e *env, extra int) (*trustWorld, error) {
	w := &trustWorld{dir: filepath.Join(e.dir, "trust")}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if w.Trust, err = harness.StartTrust(ctx, e.bins, w.dir); err != nil {
		return nil, err
	}
	e.procs = append(e.procs, w.Witness)
	// v2 = a, b, d; v3 = b, d, e (2 of each), as test/e2e's rotation.
	v2, v3 := filepath.Join(w.dir, "keyset-2.json"), filepath.Join(w.dir, "keyset-3.json")
	c, err := w.keyID(ctx, "c")
	if err != nil {
		return nil, err
	}
	a, err := w.keyID(ctx, "a")
	if err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"keys", "rotate", "--current", w.Root, "--add-key", w.Pubs["d"], "--remove-key", c, "--valid-for", "30d", "--key", w.Keys["a"], "--out", v2},
		{"keys", "rotate", "--envelope", v2, "--current", w.Root, "--key", w.Keys["b"], "--out", v2},
		{"keys", "rotate", "--current", v2, "--add-key", w.Pubs["e"], "--remove-key", a, "--valid-for", "30d", "--key", w.Keys["b"], "--out", v3},
		{"keys", "rotate", "--envelope", v3, "--current", v2, "--key", w.Keys["d"], "--out", v3},
	} {
		if _, err := w.Offline(ctx, args...); err != nil {
			return nil, err
		}
	}
	w.links = []string{v2, v3}
	bin := filepath.Join(w.dir, "artifact")
	if err := os.WriteFile(bin, []byte("stand-in artifact\n"), 0o644); err != nil {
		return nil, err
	}
	sign := func(v string) (string, error) {
		out := filepath.Join(w.dir, "release-"+v+".json")
		if _, err := w.Offline(ctx, "release", "sign", "--key", w.Keys["b"], "--base", v[:9], "--version", v,
			"--artifact", runtime.GOOS+"/"+runtime.GOARCH+"="+bin+",https://artifacts.invalid/aks-node-controller", "--valid-for", "24h",
			"--skip-version-check", "--out", out); err != nil {
			return "", err
		}
		return out, w.CoSign(ctx, out, "a", "d")
	}
	if w.served, err = sign(version); err != nil {
		return nil, err
	}
	w.keptLog = 1
	for i := range extra {
		v := fmt.Sprintf("2027%02d.%02d.1", i%12+1, i/12+1)
		f, err := sign(v)
		if err != nil {
			return nil, err
		}
		w.extra = append(w.extra, f)
	}
	return w, nil
}

func (w *trustWorld) keyID(ctx context.Context, holder string) (string, error) {
	out, err := w.Offline(ctx, "keys", "verify", "--root", w.Pubs[holder], "-o", "json")
	if err != nil {
		return "", err
	}
	var v struct{ Keys []string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Keys) != 1 {
		return "", fmt.Errorf("keys verify --root %s = %s, %v", w.Pubs[holder], out, err)
	}
	return v.Keys[0], nil
}

// logSize is the log's size once everything is published: the links,
// the served release and the extra releases.
func (w *trustWorld) logSize() int { return len(w.links) + 1 + len(w.extra) }

// publish publishes, as an operator would through lpsctl, the served
// release and rolls it out to 100%, then (with links, to an lpsd with a
// log key, once it keeps its first checkpoint: lpsd refuses a key set
// requiring the log before) the two links, then the extra releases.
func (w *trustWorld) publish(ctx context.Context, l *harness.LPSD, links bool) error {
	cmds := [][]string{{"release", "publish", "--envelope", w.served, "--reason", "loadgen"}, {"rollout", "set", version, "--percent", "100", "--reason", "loadgen"}}
	if links {
		if err := w.ctl(ctx, l, cmds); err != nil {
			return err
		}
		if err := l.WaitLogged(ctx, 1); err != nil {
			return fmt.Errorf("%w\nwitness log:\n%s", err, w.Witness.Log())
		}
		cmds = nil
		for _, f := range w.links {
			cmds = append(cmds, []string{"keys", "publish", "--envelope", f, "--reason", "loadgen: rotation"})
		}
	}
	for _, f := range w.extra {
		cmds = append(cmds, []string{"release", "publish", "--envelope", f, "--reason", "loadgen: grow the log"})
	}
	return w.ctl(ctx, l, cmds)
}

func (w *trustWorld) ctl(ctx context.Context, l *harness.LPSD, cmds [][]string) error {
	for _, args := range cmds {
		if _, err := l.Ctl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// trustFetch is a node of ours: it declares its base, the key-set version
// it verified and the log size it kept (0: none), and must be served.
func trustFetch(keySet, logSize int64) func(ctx context.Context, addr string, roots *x509.CertPool, tok string) error {
	return func(ctx context.Context, addr string, roots *x509.CertPool, tok string) error {
		ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
		defer cancel()
		_, err := lpsclient.Fetch(ctx, lpsclient.Target{
			Host: harness.APIServerName, Addr: addr, Roots: roots,
			Base: declaredBase, KeySetVersion: keySet, LogSize: logSize,
		}, tok)
		return err
	}
}

// evidenceCost compares lpsd's server CPU per GetComponentConfig with the
// trust evidence (key-set links, checkpoint, inclusion and consistency
// proofs) against without, phase by phase. Two lpsds as they ship, with
// the same store content: one with --log-key and the witness, one without
// a log key, which serves no log bundle and holds no links (lpsd refuses a
// key set requiring the log without a checkpoint); its nodes declare the
// newest key set, as a node that kept the chain would.
func evidenceCost(ctx context.Context, o options, e *env) error {
	w, err := newTrustWorld(ctx, e, o.logExtra)
	if err != nil {
		return err
	}
	start := func(name string, links bool, flags []string) (*harness.LPSD, error) {
		l, err := harness.StartLPSD(ctx, e.bins, e.dir, harness.LPSDOptions{
			Name: name, Store: "mem:", IMDSRoots: e.rootsF, TLS: e.tls, Extra: append(flags, rig.LPSDFlags()...),
		})
		if err != nil {
			return nil, err
		}
		e.procs = append(e.procs, l.Proc)
		return l, w.publish(ctx, l, links)
	}
	ev, err := start("lpsd-evidence", true, w.LPSDFlags())
	if err != nil {
		return err
	}
	plain, err := start("lpsd-plain", false, []string{"--release-keys", w.Root})
	if err != nil {
		return err
	}
	if err := ev.WaitLogged(ctx, w.logSize()); err != nil {
		return fmt.Errorf("%w\nwitness log:\n%s", err, w.Witness.Log())
	}
	newest := int64(len(w.links) + 1)
	targets := []target{
		{name: "plain", addr: plain.GRPCAddr, pid: plain.Pid(), toks: e.toks, op: trustFetch(newest, 0)},
		{name: "evidence", addr: ev.GRPCAddr, pid: ev.Pid(), toks: e.toks, op: trustFetch(1, w.keptLog)},
		{name: "evidence-kept", addr: ev.GRPCAddr, pid: ev.Pid(), toks: e.toks, op: trustFetch(newest, w.keptLog)},
	}
	sizes, err := w.check(ctx, e, plain, ev, newest)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "\nrelease trust v2 (2-of-3 baked key set requiring the log, rotated twice; one witness, lpsctl witness serve, quorum 1); log of %d records: the served release %s at index 0, links v2 and v3, %d other releases\n",
		w.logSize(), version, len(w.extra))
	fmt.Fprintf(e.out, "  plain:         lpsd --release-keys (no --log-key); node declares base %s and key set %d: no links, no log bundle; document %d bytes\n", declaredBase, newest, sizes[0])
	fmt.Fprintf(e.out, "  evidence:      lpsd --release-keys --log-key --witness; node declares base, key set 1 (a fresh image) and log size %d: 2 links, checkpoint, inclusion and consistency proof; document %d bytes\n", w.keptLog, sizes[1])
	fmt.Fprintf(e.out, "  evidence-kept: the same lpsd; node declares key set %d (its next boot): checkpoint and proofs only; document %d bytes\n", newest, sizes[2])
	fmt.Fprintf(e.out, "new TLS connection + one GetComponentConfig per node; closed loop %s per concurrency, the three alternating phase by phase\n\n", o.dur)
	for _, t := range targets {
		closedLoop(ctx, t, e.roots, o.conc[0], o.warm)
	}
	meter := procstat.NewMeter()
	pids := []int{plain.Pid(), ev.Pid(), w.Witness.Pid()}
	srv0 := make([]time.Duration, len(pids))
	for i, pid := range pids {
		srv0[i], _ = procstat.CPU(pid)
	}
	cpu := map[string]time.Duration{}
	ok := map[string]int64{}
	for _, c := range o.conc {
		for _, t := range targets {
			p := closedLoop(ctx, t, e.roots, c, o.dur)
			lat := p.latencies()
			fmt.Fprintf(e.out, "  %-13s conc %-4d %7.0f req/s  p50 %6.1fms p99 %6.1fms  failed %d %v  server CPU %4.0fus/req  client CPU %4.0fus/req\n",
				t.name, c, p.rate(), lat.Median, lat.P99, p.failures(), p.failed, p.perReq(p.serverCPU), p.perReq(p.clientCPU))
			cpu[t.name] += p.serverCPU
			ok[t.name] += p.ok
		}
	}
	load := meter.Stop()
	var servers time.Duration
	for i, pid := range pids {
		s1, _ := procstat.CPU(pid)
		servers += s1 - srv0[i]
	}
	fmt.Fprintf(e.out, "  %s; of it the two lpsds and the witness %.0f%%\n", load, 100*float64(servers)/float64(load.MachineCapacity))
	if n := e.toks.wrapped.Load(); n > 0 {
		fmt.Fprintf(e.out, "note: %d calls reused a document (pool of %d exhausted; reuse within attest MaxUses is still accepted)\n", n, len(e.toks.all))
	}
	per := func(n string) float64 { return float64(cpu[n].Microseconds()) / float64(ok[n]) }
	fmt.Fprintf(e.out, "\nserver CPU per GetComponentConfig over all phases: plain %.0fus, evidence %.0fus (ratio %.3f), evidence-kept %.0fus (ratio %.3f); target <= 1.05\n",
		per("plain"), per("evidence"), per("evidence")/per("plain"), per("evidence-kept"), per("evidence-kept")/per("plain"))
	fmt.Fprintf(e.out, "served document: plain %d bytes, evidence %d bytes (+%d), evidence-kept %d bytes (+%d); budget %d\n",
		sizes[0], sizes[1], sizes[1]-sizes[0], sizes[2], sizes[2]-sizes[0], 48<<10)
	return nil
}

// check fetches once as each kind of node and checks what it is served:
// the plain document carries no evidence; the evidence document verifies
// as a fresh node baked with the root would verify it (trust.Evaluate:
// the chain to the newest key set, the checkpoint with its cosignature,
// the release's inclusion) and carries a consistency proof; the kept
// node's carries the bundle and no link. It returns the three sizes.
func (w *trustWorld) check(ctx context.Context, e *env, plain, ev *harness.LPSD, newest int64) ([3]int, error) {
	var sizes [3]int
	rootData, err := os.ReadFile(w.Root)
	if err != nil {
		return sizes, err
	}
	root, err := release.ParseKeySet(rootData)
	if err != nil {
		return sizes, err
	}
	fetch := func(addr string, keySet, logSize int64) (hotfix.Pointer, int, error) {
		// The plain lpsd may not have built its snapshot yet.
		deadline := time.Now().Add(10 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, nodeTimeout)
			cfg, err := lpsclient.Fetch(cctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: e.roots, Base: declaredBase, KeySetVersion: keySet, LogSize: logSize}, e.toks.take())
			cancel()
			if err == nil {
				p, err := hotfix.ParsePointer([]byte(cfg))
				return p, len(cfg), err
			}
			if time.Now().After(deadline) {
				return hotfix.Pointer{}, 0, err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	p, n, err := fetch(plain.GRPCAddr, newest, 0)
	if err != nil {
		return sizes, fmt.Errorf("plain lpsd: %w", err)
	}
	if len(p.KeySets) != 0 || p.Log != nil || len(p.Releases) != 1 {
		return sizes, fmt.Errorf("plain lpsd served %d links, %d log bytes, %d releases: want none, none, 1", len(p.KeySets), len(p.Log), len(p.Releases))
	}
	sizes[0] = n
	p, n, err = fetch(ev.GRPCAddr, 1, w.keptLog)
	if err != nil {
		return sizes, fmt.Errorf("evidence lpsd: %w", err)
	}
	if len(p.KeySets) != len(w.links) || len(p.Releases) != 1 {
		return sizes, fmt.Errorf("evidence lpsd served %d links, %d releases: want %d, 1", len(p.KeySets), len(p.Releases), len(w.links))
	}
	v := trust.Evaluate(root, trust.State{}, p, time.Now())
	if v.Err == nil {
		v.Err = v.CheckLogged(p.Releases[0])
	}
	if v.Err == nil && v.KeySetVersion() != newest {
		v.Err = fmt.Errorf("walked to key set %d, want %d", v.KeySetVersion(), newest)
	}
	if v.Err != nil {
		return sizes, fmt.Errorf("a fresh node refuses the evidence served: %w", v.Err)
	}
	b, err := translog.ParseBundle(p.Log)
	if err != nil {
		return sizes, err
	}
	if b.Consistency == nil || b.Consistency.From != w.keptLog || len(b.Consistency.Hashes) == 0 {
		return sizes, errors.New("evidence lpsd served no consistency proof from the declared log size")
	}
	sizes[1] = n
	p, n, err = fetch(ev.GRPCAddr, newest, w.keptLog)
	if err != nil {
		return sizes, fmt.Errorf("evidence lpsd: %w", err)
	}
	if len(p.KeySets) != 0 || p.Log == nil {
		return sizes, fmt.Errorf("evidence lpsd served a node at key set %d %d links and %d log bytes: want none and a bundle", newest, len(p.KeySets), len(p.Log))
	}
	sizes[2] = n
	return sizes, nil
}
