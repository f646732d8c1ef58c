package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// trustFetch is a node of ours: it declares its base, the key-set version
// it verified and the log size it kept (0: none), and must be served.
func trustFetch(keySet, logSize int64) func(ctx context.Context, addr string, roots *x509.CertPool, tok string) error {
	return func(ctx context.Context, addr string, roots *x509.CertPool, tok string) error {
		ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
		defer cancel()
		_, err := lpsclient.FetchRequest(ctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: roots}, tok,
			lpsclient.Request{Base: declaredBase, KeySetVersion: keySet, LogSize: logSize})
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
	w, err := rig.NewTrust(ctx, e.bins, filepath.Join(e.dir, "trust"), version, o.logExtra)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, w.Witness)
	start := func(name string, links bool, flags []string) (*harness.LPSD, error) {
		l, err := harness.StartLPSD(ctx, e.bins, e.dir, harness.LPSDOptions{
			Name: name, Store: "mem:", IMDSRoots: e.rootsF, TLS: e.tls, Extra: append(flags, rig.LPSDFlags()...),
		})
		if err != nil {
			return nil, err
		}
		e.procs = append(e.procs, l.Proc)
		return l, w.Publish(ctx, l, links)
	}
	ev, err := start("lpsd-evidence", true, w.LPSDFlags())
	if err != nil {
		return err
	}
	plain, err := start("lpsd-plain", false, []string{"--release-keys", w.Root})
	if err != nil {
		return err
	}
	if err := ev.WaitLogged(ctx, w.LogSize()); err != nil {
		return fmt.Errorf("%w\nwitness log:\n%s", err, w.Witness.Log())
	}
	newest := w.Newest()
	targets := []target{
		{name: "plain", addr: plain.GRPCAddr, pid: plain.Pid(), toks: e.toks, op: trustFetch(newest, 0)},
		{name: "evidence", addr: ev.GRPCAddr, pid: ev.Pid(), toks: e.toks, op: trustFetch(1, w.KeptLog)},
		{name: "evidence-kept", addr: ev.GRPCAddr, pid: ev.Pid(), toks: e.toks, op: trustFetch(newest, w.KeptLog)},
	}
	sizes, err := check(ctx, w, e, plain, ev, newest)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "\nrelease trust v2 (2-of-3 baked key set requiring the log, rotated twice; one witness, lpsctl witness serve, quorum 1); log of %d records: the served release %s at index 0, links v2 and v3, %d other releases\n",
		w.LogSize(), version, o.logExtra)
	fmt.Fprintf(e.out, "  plain:         lpsd --release-keys (no --log-key); node declares base %s and key set %d: no links, no log bundle; document %d bytes\n", declaredBase, newest, sizes[0])
	fmt.Fprintf(e.out, "  evidence:      lpsd --release-keys --log-key --witness; node declares base, key set 1 (a fresh image) and log size %d: 2 links, checkpoint, inclusion and consistency proof; document %d bytes\n", w.KeptLog, sizes[1])
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
func check(ctx context.Context, w *rig.Trust, e *env, plain, ev *harness.LPSD, newest int64) ([3]int, error) {
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
			cfg, err := lpsclient.FetchRequest(cctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: e.roots}, e.toks.take(), lpsclient.Request{Base: declaredBase, KeySetVersion: keySet, LogSize: logSize})
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
	p, n, err = fetch(ev.GRPCAddr, 1, w.KeptLog)
	if err != nil {
		return sizes, fmt.Errorf("evidence lpsd: %w", err)
	}
	if len(p.KeySets) != len(w.Links) || len(p.Releases) != 1 {
		return sizes, fmt.Errorf("evidence lpsd served %d links, %d releases: want %d, 1", len(p.KeySets), len(p.Releases), len(w.Links))
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
	if b.Consistency == nil || b.Consistency.From != w.KeptLog || len(b.Consistency.Hashes) == 0 {
		return sizes, errors.New("evidence lpsd served no consistency proof from the declared log size")
	}
	sizes[1] = n
	p, n, err = fetch(ev.GRPCAddr, newest, w.KeptLog)
	if err != nil {
		return sizes, fmt.Errorf("evidence lpsd: %w", err)
	}
	if len(p.KeySets) != 0 || p.Log == nil {
		return sizes, fmt.Errorf("evidence lpsd served a node at key set %d %d links and %d log bytes: want none and a bundle", newest, len(p.KeySets), len(p.Log))
	}
	sizes[2] = n
	return sizes, nil
}
