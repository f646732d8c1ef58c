package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"nodehotfix/internal/node/lpsclient"
)

func TestOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		served   bool
		notFound bool
		kind     string
	}{
		{"served", nil, true, false, ""},
		{"not-found", &lpsclient.Error{Class: lpsclient.ClassNoHotfix, Code: codes.NotFound, Err: errors.New("x")}, true, true, ""},
		{"deadline", &lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.DeadlineExceeded, Err: errors.New("x")}, false, false, failTimeout},
		{"ctx-deadline", &lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.Unknown, Err: context.DeadlineExceeded}, false, false, failTimeout},
		{"tls", &lpsclient.Error{Class: lpsclient.ClassTLS, Code: codes.Unavailable, Err: errors.New("x")}, false, false, failTLS},
		{"unavailable", &lpsclient.Error{Class: lpsclient.ClassUnreachable, Code: codes.Unavailable, Err: errors.New("x")}, false, false, "Unavailable"},
		{"replayed", &lpsclient.Error{Class: lpsclient.ClassNoHotfix, Code: codes.Unauthenticated, Err: errors.New("x")}, false, false, "Unauthenticated"},
		{"plain", errors.New("x"), false, false, "other"},
	} {
		served, nf, kind := outcome(tc.err)
		if served != tc.served || nf != tc.notFound || kind != tc.kind {
			t.Errorf("%s: outcome(%v) = %v, %v, %q, want %v, %v, %q", tc.name, tc.err, served, nf, kind, tc.served, tc.notFound, tc.kind)
		}
	}
}

func TestProbeStats(t *testing.T) {
	t.Parallel()
	s := probeStats{begin: time.Now()}
	unavailable := &lpsclient.Error{Code: codes.Unavailable, Err: errors.New("x")}
	calls := []struct {
		lat time.Duration
		err error
	}{
		{10 * time.Millisecond, nil},
		{20 * time.Millisecond, &lpsclient.Error{Class: lpsclient.ClassNoHotfix, Code: codes.NotFound, Err: errors.New("x")}},
		{30 * time.Millisecond, nil},
		{2 * time.Second, unavailable},
		{3 * time.Second, &lpsclient.Error{Code: codes.DeadlineExceeded, Err: errors.New("x")}},
	}
	for range calls {
		s.start()
	}
	for i, c := range calls {
		// Three calls in the phase's first second, two in its third.
		s.add(s.begin.Add(time.Duration(i/3)*2*time.Second), c.lat, c.err)
	}
	got := s.report()
	want := probeReport{
		Calls: 5, Served: 3, NotFound: 1, Failed: 2, ServedPct: 60,
		// Latency of served calls only.
		P50ms: 20, P99ms: 29.8,
		Failures:        map[string]int64{"Unavailable": 1, failTimeout: 1},
		PeakInFlight:    5,
		CallsPerSecond:  []int64{3, 0, 2},
		ServedPerSecond: []int64{3, 0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("report() mismatch (-want +got):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	attacked := func(name string, calls, served int64) phaseReport {
		p := phaseReport{Name: name, Attacker: &attackReport{Kind: name}, Probe: probeReport{Calls: calls, Served: served}}
		if calls > 0 {
			p.Probe.ServedPct = 100 * float64(served) / float64(calls)
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		phases []phaseReport
		bad    int
	}{
		{"all-met", []phaseReport{{Name: "baseline", Probe: probeReport{Calls: 10, Served: 10, ServedPct: 100}}, attacked(kindSilent, 1000, 990), attacked(kindIdleH2, 1000, 1000)}, 0},
		// The baseline is not an attack phase: only attack phases are held to the target.
		{"baseline-ignored", []phaseReport{{Name: "baseline", Probe: probeReport{Calls: 10, Served: 1, ServedPct: 10}}, attacked(kindSilent, 100, 100)}, 0},
		{"one-under", []phaseReport{attacked(kindSilent, 1000, 989), attacked(kindIdleH2, 1000, 1000)}, 1},
		{"no-calls", []phaseReport{attacked(kindSilent, 0, 0)}, 1},
		{"both-under", []phaseReport{attacked(kindSilent, 300, 24), attacked(kindIdleH2, 300, 162)}, 2},
	} {
		if got := check(tc.phases, minServedPct); len(got) != tc.bad {
			t.Errorf("%s: check() = %q, want %d failures", tc.name, got, tc.bad)
		}
	}
}

// TestJSONShape pins the -o json field names other tools read.
func TestJSONShape(t *testing.T) {
	t.Parallel()
	r := result{Phases: []phaseReport{{Name: kindSilent, Attacker: &attackReport{Kind: kindSilent}}}, MinServedPct: minServedPct}
	var buf bytes.Buffer
	if err := writeJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Phases []struct {
			Name  string
			Probe struct {
				ServedPct *float64 `json:"served_pct"`
			}
			Attacker struct {
				ClosedByLPSD *int64 `json:"closed_by_lpsd"`
			}
		}
		MinServedPct float64 `json:"min_served_pct"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Phases) != 1 || got.Phases[0].Probe.ServedPct == nil || got.Phases[0].Attacker.ClosedByLPSD == nil || got.MinServedPct != minServedPct {
		t.Errorf("writeJSON() = %s, want phases[0].probe.served_pct, phases[0].attacker.closed_by_lpsd and min_served_pct", buf.Bytes())
	}
}
