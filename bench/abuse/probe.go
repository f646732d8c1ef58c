package main

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"nodehotfix/bench/internal/stats"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/test/harness"
)

// nodeBudget is check-hotfix's deadline for connect, handshake and call
// (internal/node/checkhotfix lpsTimeout, the reference's lpsFetchTimeout):
// a probe call that takes longer has failed.
const nodeBudget = 3 * time.Second

// usesPerDocument is how many calls one pre-signed document serves; lpsd
// accepts a document attest.DefaultMaxUses (8) times, and half leaves room
// for uses the server counted on calls the probe saw fail.
const usesPerDocument = 4

// Outcome kinds of a probe call that was not served.
const (
	failTimeout = "timeout" // over nodeBudget
	failTLS     = "tls"     // the node refused the server's certificate
)

// outcome classifies one probe call's error: served (a config or NotFound:
// the service answered) or the kind of failure.
func outcome(err error) (served, notFound bool, kind string) {
	if err == nil {
		return true, false, ""
	}
	var le *lpsclient.Error
	if !errors.As(err, &le) {
		if errors.Is(err, context.DeadlineExceeded) {
			return false, false, failTimeout
		}
		return false, false, "other"
	}
	switch {
	case le.Code == codes.NotFound:
		return true, true, ""
	case le.Class == lpsclient.ClassTLS:
		return false, false, failTLS
	case le.Code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return false, false, failTimeout
	}
	return false, false, le.Code.String()
}

// probeStats accumulates one phase's probe calls. The zero value is ready;
// it is safe for concurrent use.
type probeStats struct {
	// begin is when the phase began: calls are bucketed by the second of
	// the phase they started in.
	begin time.Time

	mu       sync.Mutex
	calls    int64
	served   int64
	notFound int64
	failures map[string]int64
	lat      []time.Duration // served calls only
	perSec   [][2]int64      // calls, served

	inFlight, peakInFlight atomic.Int64
}

func (s *probeStats) start() {
	n := s.inFlight.Add(1)
	for p := s.peakInFlight.Load(); n > p && !s.peakInFlight.CompareAndSwap(p, n); p = s.peakInFlight.Load() {
	}
}

// add records a finished call started in this phase at started.
func (s *probeStats) add(started time.Time, lat time.Duration, err error) {
	s.inFlight.Add(-1)
	served, nf, kind := outcome(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	sec := max(int(started.Sub(s.begin)/time.Second), 0)
	for len(s.perSec) <= sec {
		s.perSec = append(s.perSec, [2]int64{})
	}
	s.perSec[sec][0]++
	if served {
		s.perSec[sec][1]++
	}
	if !served {
		if s.failures == nil {
			s.failures = map[string]int64{}
		}
		s.failures[kind]++
		return
	}
	s.served++
	if nf {
		s.notFound++
	}
	s.lat = append(s.lat, lat)
}

// report summarises the phase; call it once no call is in flight.
func (s *probeStats) report() probeReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := probeReport{Calls: s.calls, Served: s.served, NotFound: s.notFound, Failed: s.calls - s.served, Failures: s.failures, PeakInFlight: s.peakInFlight.Load()}
	if s.calls > 0 {
		r.ServedPct = 100 * float64(s.served) / float64(s.calls)
	}
	for _, b := range s.perSec {
		r.CallsPerSecond = append(r.CallsPerSecond, b[0])
		r.ServedPerSecond = append(r.ServedPerSecond, b[1])
	}
	if len(s.lat) > 0 {
		l := stats.Of(stats.Millis(s.lat))
		r.P50ms, r.P99ms = l.Median, l.P99
	}
	return r
}

// probes are simulated nodes, each starting a call on a new connection
// every interval whatever happened to the last (an open loop: a slow or
// failing lpsd does not slow the arrivals), each call with the node's own
// attested document, under the node's budget.
type probes struct {
	target   lpsclient.Target
	docs     [][]string // per probe
	interval time.Duration
	// phase returns the accounting of the phase a call starting now
	// belongs to, nil once the run is over.
	phase func() *probeStats
}

// run starts calls until phase returns nil or ctx is done, then waits for
// the calls in flight.
func (p *probes) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, docs := range p.docs {
		wg.Go(func() {
			var calls sync.WaitGroup
			defer calls.Wait()
			// Spread the probes over the interval.
			next := time.Now().Add(time.Duration(i) * p.interval / time.Duration(len(p.docs)))
			for k := 0; ; k++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(p.interval)
				ph := p.phase()
				if ph == nil {
					return
				}
				tok := docs[(k/usesPerDocument)%len(docs)]
				ph.start()
				calls.Go(func() {
					s := time.Now()
					err := p.call(context.WithoutCancel(ctx), tok)
					ph.add(s, time.Since(s), err)
				})
			}
		})
	}
	wg.Wait()
}

func (p *probes) call(ctx context.Context, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, nodeBudget)
	defer cancel()
	_, err := lpsclient.Fetch(ctx, p.target, tok)
	return err
}

// newTarget is lpsd at addr as nodes reach it: the API server name, the
// cluster CA.
func newTarget(addr string, roots *x509.CertPool) lpsclient.Target {
	return lpsclient.Target{Host: harness.APIServerName, Addr: addr, Roots: roots}
}
