package main

import (
	"context"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"nodehotfix/bench/internal/procstat"
	"nodehotfix/bench/internal/stats"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/test/harness"
)

// nodeTimeout is what check-hotfix gives the call (connect, handshake and
// call); a node whose call takes longer has failed.
const nodeTimeout = 3 * time.Second

// maxInFlight caps the open-loop generator's outstanding calls; arrivals
// beyond it are counted as dropped (the target is overloaded).
const maxInFlight = 4096

// target is a server under load.
type target struct {
	name string
	addr string
	pid  int
	// toks supplies its callers' documents.
	toks *tokens
	// op is one node's call; nil means call (GetComponentConfig).
	op func(ctx context.Context, addr string, roots *x509.CertPool, tok string) error
}

func (t target) do(ctx context.Context, roots *x509.CertPool, tok string) error {
	if t.op != nil {
		return t.op(ctx, t.addr, roots, tok)
	}
	return call(ctx, t.addr, roots, tok)
}

// tokens hands out pre-signed documents, each once, then again from the
// start (counted), so a long run cannot stall on signing. A constant one
// hands out its first document every time: for the floor, which ignores
// it, so that the floor's calls carry the same bytes without using up the
// pool.
type tokens struct {
	all      []string
	constant bool
	next     atomic.Int64
	wrapped  atomic.Int64
}

func (t *tokens) take() string {
	if t.constant {
		return t.all[0]
	}
	i := t.next.Add(1) - 1
	if i >= int64(len(t.all)) {
		t.wrapped.Add(1)
	}
	return t.all[i%int64(len(t.all))]
}

// used reports how many distinct documents have been handed out.
func (t *tokens) used() int64 { return min(t.next.Load(), int64(len(t.all))) }

// phase is the outcome of one load phase.
type phase struct {
	elapsed   time.Duration
	ok        int64 // served (a config) or NotFound: the service answered
	failed    map[string]int64
	dropped   int64
	lat       []time.Duration
	serverCPU time.Duration
	clientCPU time.Duration
}

func (p *phase) rate() float64 { return float64(p.ok) / p.elapsed.Seconds() }

func (p *phase) latencies() stats.Summary { return stats.Of(stats.Millis(p.lat)) }

// perReq returns CPU microseconds per answered request.
func (p *phase) perReq(d time.Duration) float64 {
	if p.ok == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(p.ok)
}

func (p *phase) failures() int64 {
	var n int64
	for _, v := range p.failed {
		n += v
	}
	return n
}

// recorder collects calls of a phase from many goroutines.
type recorder struct {
	mu     sync.Mutex
	ok     int64
	failed map[string]int64
	lat    []time.Duration
}

func (r *recorder) add(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.ok++
		r.lat = append(r.lat, d)
		return
	}
	if r.failed == nil {
		r.failed = map[string]int64{}
	}
	r.failed[failureKind(err)]++
}

func failureKind(err error) string {
	var le *lpsclient.Error
	if errors.As(err, &le) {
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return "no-ephemeral-port"
		}
		return le.Code.String()
	}
	return "other"
}

// call is one simulated node: fetch with its document over a new
// connection. NotFound counts as answered.
func call(ctx context.Context, addr string, roots *x509.CertPool, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	_, err := lpsclient.Fetch(ctx, lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: roots}, tok)
	var le *lpsclient.Error
	if errors.As(err, &le) && le.Code == codes.NotFound {
		return nil
	}
	return err
}

// measure wraps a phase with the CPU accounting of both processes.
func measure(t target, f func(*recorder) (time.Duration, int64)) phase {
	var rec recorder
	sc0, _ := procstat.CPU(t.pid)
	cc0 := selfCPU()
	elapsed, dropped := f(&rec)
	sc1, _ := procstat.CPU(t.pid)
	return phase{
		elapsed: elapsed, ok: rec.ok, failed: rec.failed, dropped: dropped, lat: rec.lat,
		serverCPU: sc1 - sc0, clientCPU: selfCPU() - cc0,
	}
}

// closedLoop runs conc nodes back to back for dur.
func closedLoop(ctx context.Context, t target, roots *x509.CertPool, conc int, dur time.Duration) phase {
	return measure(t, func(rec *recorder) (time.Duration, int64) {
		ctx, cancel := context.WithTimeout(ctx, dur)
		defer cancel()
		start := time.Now()
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for ctx.Err() == nil {
					s := time.Now()
					err := t.do(context.WithoutCancel(ctx), roots, t.toks.take())
					rec.add(time.Since(s), err)
				}
			})
		}
		wg.Wait()
		return time.Since(start), 0
	})
}

// openLoop starts nodes at Poisson arrivals of rate per second for dur and
// measures each latency from its scheduled arrival, so a slow server does
// not slow the arrivals (no coordinated omission).
func openLoop(ctx context.Context, t target, roots *x509.CertPool, rate float64, dur time.Duration) phase {
	return measure(t, func(rec *recorder) (time.Duration, int64) {
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Now()
		var wg sync.WaitGroup
		var inFlight atomic.Int64
		var dropped int64
		at := start
		for {
			at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			if at.Sub(start) >= dur || ctx.Err() != nil {
				break
			}
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			if inFlight.Load() >= maxInFlight {
				dropped++
				continue
			}
			inFlight.Add(1)
			scheduled := at
			wg.Go(func() {
				defer inFlight.Add(-1)
				err := t.do(ctx, roots, t.toks.take())
				rec.add(time.Since(scheduled), err)
			})
		}
		wg.Wait()
		return time.Since(start), dropped
	})
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
