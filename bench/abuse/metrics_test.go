package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	const text = `# HELP lpsd_connections_shed_total Node connections closed unanswered.
# TYPE lpsd_connections_shed_total counter
lpsd_connections_shed_total 42
# TYPE lpsd_handshakes_in_flight gauge
lpsd_handshakes_in_flight 256
# TYPE lpsd_peer_connections_closed_total counter
lpsd_peer_connections_closed_total{reason="idle"} 7
# TYPE lpsd_requests_total counter
lpsd_requests_total{code="OK",outcome="served"} 900
# TYPE lpsd_handshake_seconds histogram
lpsd_handshake_seconds_bucket{le="+Inf"} 3
`
	got, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := series{
		counters: map[string]float64{"lpsd_connections_shed_total": 42, `lpsd_peer_connections_closed_total{reason="idle"}`: 7},
		gauges:   map[string]float64{"lpsd_handshakes_in_flight": 256},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(series{})); diff != "" {
		t.Errorf("parseMetrics() mismatch (-want +got):\n%s", diff)
	}
}
