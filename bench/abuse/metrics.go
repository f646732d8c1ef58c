package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"nodehotfix/bench/internal/procstat"
)

// scrapeTimeout bounds one /metrics read; lpsd serves it on its own
// listener, which the attacks do not touch.
const scrapeTimeout = 2 * time.Second

// maxMetricsBytes bounds a /metrics body.
const maxMetricsBytes = 4 << 20

// watched says which lpsd series the tool reports: those about connections
// and handshakes, whatever their names (lpsd_connections_shed_total,
// lpsd_handshakes_in_flight, and the limits still to come).
func watched(name string) bool {
	if !strings.HasPrefix(name, "lpsd_") {
		return false
	}
	for _, w := range []string{"conn", "handshake", "peer", "shed", "idle"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// series is one scrape of the watched counters and gauges, by series
// (name with labels).
type series struct {
	counters, gauges map[string]float64
}

// parseMetrics reads the watched counters and gauges from a Prometheus text
// exposition.
func parseMetrics(r io.Reader) (series, error) {
	s := series{counters: map[string]float64{}, gauges: map[string]float64{}}
	types := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		key := line[:i]
		name, _, _ := strings.Cut(key, "{")
		if !watched(name) {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return series{}, fmt.Errorf("parse metric line %q: %w", line, err)
		}
		switch types[name] {
		case "counter":
			s.counters[key] = v
		case "gauge":
			s.gauges[key] = v
		}
	}
	return s, sc.Err()
}

func scrape(ctx context.Context, url string) (series, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return series{}, err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return series{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return series{}, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(io.LimitReader(resp.Body, maxMetricsBytes))
}

// openFiles counts pid's open file descriptors: for lpsd, its listeners and
// logs plus every connection it has accepted.
func openFiles(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// maxOpenFiles reads pid's RLIMIT_NOFILE soft limit from /proc.
func maxOpenFiles(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				return strconv.Atoi(fs[0])
			}
		}
	}
	return 0, fmt.Errorf("no open-files limit in /proc/%d/limits", pid)
}

// lpsdWatch samples lpsd during a phase: its watched metrics (counter
// deltas over the phase, gauge peaks), its open descriptors and its CPU.
// It is safe for concurrent use.
type lpsdWatch struct {
	url string
	pid int

	mu         sync.Mutex
	first      series
	last       series
	peaks      map[string]float64
	fdsPeak    int
	cpu0, cpu1 time.Duration
	t0, t1     time.Time
	errs       int
}

func newLPSDWatch(ctx context.Context, httpAddr string, pid int) *lpsdWatch {
	w := &lpsdWatch{url: "http://" + httpAddr + "/metrics", pid: pid, peaks: map[string]float64{}, t0: time.Now()}
	w.cpu0, _ = procstat.CPU(pid)
	if s, err := scrape(ctx, w.url); err == nil {
		w.first = s
		w.merge(s)
	} else {
		w.errs++
	}
	return w
}

func (w *lpsdWatch) merge(s series) {
	w.last = s
	for k, v := range s.gauges {
		if p, ok := w.peaks[k]; !ok || v > p {
			w.peaks[k] = v
		}
	}
}

// sample takes one reading.
func (w *lpsdWatch) sample(ctx context.Context) {
	n, ferr := openFiles(w.pid)
	s, err := scrape(ctx, w.url)
	w.mu.Lock()
	defer w.mu.Unlock()
	if ferr == nil && n > w.fdsPeak {
		w.fdsPeak = n
	}
	if err != nil {
		w.errs++
		return
	}
	w.merge(s)
}

// finish takes the last reading and summarises the phase.
func (w *lpsdWatch) finish(ctx context.Context) lpsdReport {
	w.sample(ctx)
	cpu1, _ := procstat.CPU(w.pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cpu1, w.t1 = cpu1, time.Now()
	r := lpsdReport{CountersDelta: map[string]float64{}, GaugesPeak: maps.Clone(w.peaks), OpenFilesPeak: w.fdsPeak, ScrapeErrors: w.errs, cpu: w.cpu1 - w.cpu0}
	for k, v := range w.last.counters {
		r.CountersDelta[k] = v - w.first.counters[k]
	}
	if el := w.t1.Sub(w.t0); el > 0 {
		r.CPUPct = 100 * float64(w.cpu1-w.cpu0) / float64(el)
	}
	return r
}
