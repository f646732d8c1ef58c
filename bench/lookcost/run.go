package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"nodehotfix/bench/internal/procstat"
	"nodehotfix/bench/internal/rig"
	"nodehotfix/internal/assess"
	"nodehotfix/internal/retention"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/etcdstore/etcdembed"
	"nodehotfix/internal/store/storetest"
	"nodehotfix/test/harness"
)

// version is the one release the stored history is about.
const version = "202604.01.2"

type options struct {
	boltSizes, etcdSizes []int
	looks                int
	interval             time.Duration
	keep                 bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("lookcost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bolt := fs.String("bolt-sizes", "10000,100000,1000000", "stored reports (and as many served records) to measure on bbolt; empty: none")
	etcd := fs.String("etcd-sizes", "10000,100000", "the same on an embedded etcd; empty: none")
	fs.IntVar(&o.looks, "looks", 3, "looks timed at each size (the median is shown); lpsd idles for as many autopilot looks")
	fs.DurationVar(&o.interval, "autopilot-interval", 2*time.Second, "lpsd's --autopilot-interval while it idles")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.boltSizes, err = sizes(*bolt); err == nil {
		o.etcdSizes, err = sizes(*etcd)
	}
	if err != nil || o.looks < 1 {
		fmt.Fprintf(stderr, "lookcost: bad -bolt-sizes, -etcd-sizes or -looks: %v\n", err)
		return 2
	}
	return rig.Session(ctx, "lookcost", o.keep, stdout, stderr, func(ctx context.Context, dir string) error {
		return bench(ctx, o, dir, stdout)
	})
}

func sizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("size %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// backend is one kind of store the tool fills and lpsd runs on.
type backend struct {
	name string
	// open opens the tool's own handle of the store; spec is lpsd's --store.
	open func(ctx context.Context) (store.Store, error)
	spec string
	// exclusive: lpsd and the tool cannot hold the store at once (bbolt).
	exclusive bool
	stop      func()
}

func bench(ctx context.Context, o options, dir string, out io.Writer) error {
	bins, err := harness.Build(ctx, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "lookcost: n reports and n served records of one release, spread over the month before retention's protected %v; lpsd --autopilot-interval %v, its defaults otherwise\n",
		retention.Protected, o.interval)
	fmt.Fprintf(out, "retention after: lpsd's defaults, --retention-age %v --retention-records %d\n\n", retention.DefaultMaxAge, retention.DefaultMaxRecords)
	fmt.Fprintf(out, "%-5s %9s | %10s %6s %21s | %21s %8s | %10s %21s | %s\n", "store", "stored", "look", "x 10k", "lpsd HWM / peak anon", "pruning: HWM / anon", "took", "look after", "restarted: HWM / anon", "kept")
	for _, kind := range []string{"bolt", "etcd"} {
		ns := o.boltSizes
		if kind == "etcd" {
			ns = o.etcdSizes
		}
		var base10k time.Duration
		for _, n := range append([]int{0}, ns...) {
			b, err := newBackend(ctx, kind, filepath.Join(dir, fmt.Sprintf("%s-%d", kind, n)))
			if err != nil {
				return err
			}
			row, err := measure(ctx, o, b, n, dir, bins, tlsFiles)
			b.stop()
			if err != nil {
				return fmt.Errorf("%s at %d: %w", kind, n, err)
			}
			if n == 10000 {
				base10k = row.lookBefore
			}
			ratio := "-"
			if base10k > 0 {
				ratio = fmt.Sprintf("%.1fx", float64(row.lookBefore)/float64(base10k))
			}
			fmt.Fprintf(out, "%-5s %9d | %10s %6s %10s / %9s | %10s / %9s %8s | %10s %10s / %9s | %d reports, %d served\n", kind, n,
				ms(row.lookBefore), ratio, procstat.MiB(row.memBefore.hwm), procstat.MiB(row.memBefore.anon),
				procstat.MiB(row.memPruning.hwm), procstat.MiB(row.memPruning.anon), row.pruneTook.Round(100*time.Millisecond),
				ms(row.lookAfter), procstat.MiB(row.memAfter.hwm), procstat.MiB(row.memAfter.anon), row.keptReports, row.keptServed)
		}
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func newBackend(ctx context.Context, kind, dir string) (*backend, error) {
	switch kind {
	case "bolt":
		path := filepath.Join(dir, "lpsd.db")
		return &backend{name: kind, spec: "bolt:" + path, exclusive: true, stop: func() {},
			open: func(context.Context) (store.Store, error) { return boltstore.Open(path) }}, nil
	default:
		c, err := etcdembed.Start(dir, 1, etcdembed.Options{NoFsync: true})
		if err != nil {
			return nil, err
		}
		ep := c.Endpoints()
		return &backend{name: kind, spec: "etcd:" + strings.TrimPrefix(ep[0], "http://"), stop: c.Stop,
			open: func(ctx context.Context) (store.Store, error) {
				return etcdstore.Open(ctx, ep, etcdstore.Config{Log: slog.New(slog.DiscardHandler)})
			}}, nil
	}
}

type row struct {
	lookBefore, lookAfter time.Duration
	memBefore, memPruning mem
	memAfter              mem
	keptReports           int
	keptServed            int
	pruneTook             time.Duration
}

// measure fills b with n reports and n served records, times the looks,
// runs lpsd without retention and then with its defaults.
func measure(ctx context.Context, o options, b *backend, n int, dir string, bins harness.Binaries, tlsFiles harness.TLSFiles) (row, error) {
	var r row
	st, err := b.open(ctx)
	if err != nil {
		return r, err
	}
	if err := fill(ctx, st, n); err != nil {
		st.Close()
		return r, err
	}
	if r.lookBefore, err = looks(ctx, st, o.looks); err != nil {
		st.Close()
		return r, err
	}
	if b.exclusive {
		st.Close()
	}
	lpsdArgs := []string{"--autopilot-interval", o.interval.String()}
	if r.memBefore, _, err = idle(ctx, o, b, n, dir, bins, tlsFiles, append(lpsdArgs, "--retention-age", "0", "--retention-records", "0"), false); err != nil {
		return r, err
	}
	if r.memPruning, r.pruneTook, err = idle(ctx, o, b, n, dir, bins, tlsFiles, lpsdArgs, true); err != nil {
		return r, err
	}
	// Restarted on the pruned store: what a look costs once retention
	// applies. While it prunes, the dashboard's view is rebuilt from the
	// whole store (the dashboard waits for no prune).
	if r.memAfter, _, err = idle(ctx, o, b, n, dir, bins, tlsFiles, lpsdArgs, true); err != nil {
		return r, err
	}
	if b.exclusive {
		if st, err = b.open(ctx); err != nil {
			return r, err
		}
	}
	defer st.Close()
	if r.lookAfter, err = looks(ctx, st, o.looks); err != nil {
		return r, err
	}
	rs, err := st.Reports(ctx)
	if err != nil {
		return r, err
	}
	ss, err := st.Served(ctx)
	r.keptReports, r.keptServed = len(rs), len(ss)
	return r, err
}

// fill stores one release and n reports and n served records of it, their
// times spread from a month ago to retention.Protected and an hour ago.
func fill(ctx context.Context, st store.Store, n int) error {
	if _, err := st.PutRelease(ctx, storetest.Release(version), 0, storetest.Entry("publish", version), nil); err != nil {
		return err
	}
	now := time.Now()
	oldest, newest := now.Add(-retention.DefaultMaxAge).Add(time.Hour), now.Add(-retention.Protected-time.Hour)
	const batch = 1000
	for i := 0; i < n; i += batch {
		var rs []store.Report
		var ss []store.Served
		for j := i; j < min(n, i+batch); j++ {
			at := oldest.Add(time.Duration(float64(newest.Sub(oldest)) * float64(j) / float64(n)))
			vm := fmt.Sprintf("vm-%08d", j)
			sv := storetest.Served(version, vm, "boot-1")
			sv.Time = at
			ss = append(ss, sv)
			rep := storetest.Report(vm, "boot-1")
			rep.Time = at.Add(time.Second)
			if j%50 == 0 {
				rep.ExitCode, rep.Fallback = 1, true
			}
			rs = append(rs, rep)
		}
		if err := st.PutServed(ctx, ss); err != nil {
			return err
		}
		if _, err := st.PutReports(ctx, rs); err != nil {
			return err
		}
	}
	return nil
}

// looks times k looks as the autopilot takes them and returns the median.
func looks(ctx context.Context, st store.Store, k int) (time.Duration, error) {
	var ds []time.Duration
	for range k {
		rels, _, err := st.Releases(ctx)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if _, err := assess.Assess(ctx, st, rels, time.Now()); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// idle runs lpsd on b with extra flags until its autopilot has looked
// o.looks times (after its first prune, when pruned is set) and returns
// its VmHWM and how long from its start the prune took.
func idle(ctx context.Context, o options, b *backend, n int, dir string, bins harness.Binaries, tlsFiles harness.TLSFiles, extra []string, pruned bool) (mem, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	t0 := time.Now()
	l, err := harness.StartLPSD(ctx, bins, dir, harness.LPSDOptions{Store: b.spec, TLS: tlsFiles, Name: "lpsd-" + b.name, Extra: extra})
	if err != nil {
		return mem{}, 0, err
	}
	defer l.Stop(10 * time.Second)
	anon := &anonSampler{pid: l.Pid()}
	var took time.Duration
	if pruned {
		if err := waitMetric(ctx, l, "lpsd_retention_last_prune_timestamp_seconds", true, anon); err != nil {
			return mem{}, 0, fmt.Errorf("%w\n%s", err, l.Log())
		}
		took = time.Since(t0)
	}
	if err := waitMetric(ctx, l, `lpsd_release_nodes{`, n > 0, anon); err != nil {
		return mem{}, 0, fmt.Errorf("%w\n%s", err, l.Log())
	}
	// The first look is done; the next ones come every interval.
	for end := time.Now().Add(time.Duration(o.looks) * o.interval); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return mem{}, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		anon.sample()
	}
	m, err := procstat.ReadMemory(l.Pid())
	return mem{hwm: m.HWM, anon: anon.peak}, took, err
}

// mem is what idle reads of lpsd's memory.
type mem struct{ hwm, anon int64 }

// anonSampler keeps the highest RssAnon of a process seen: VmHWM counts
// the pages of files it maps too (bbolt maps its whole file), which the
// kernel can reclaim under a memory limit, anonymous memory it cannot.
type anonSampler struct {
	pid  int
	peak int64
}

func (a *anonSampler) sample() {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.pid))
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil && kb<<10 > a.peak {
				a.peak = kb << 10
			}
		}
	}
}

// waitMetric waits until lpsd's /metrics has series starting with prefix
// (their sum positive, when positive is set).
func waitMetric(ctx context.Context, l *harness.LPSD, prefix string, positive bool, anon *anonSampler) error {
	for {
		anon.sample()
		if v, ok := scrape(ctx, l.HTTPAddr, prefix); ok && (v > 0 || !positive) {
			return nil
		}
		if l.Exited() {
			return errors.New("lpsd exited")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", prefix, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scrape returns the sum of the series of lpsd's /metrics that start
// with prefix, and whether there are any.
func scrape(ctx context.Context, addr, prefix string) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, false
	}
	var sum float64
	var found bool
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		_, v, _ := strings.Cut(line[len(prefix):], " ")
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			sum, found = sum+f, true
		}
	}
	return sum, found
}
