package lps

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/imds/attest"
)

func TestCountsSkipsZeros(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	if got := m.Counts(); len(got) != 0 {
		t.Errorf("Counts of a new Metrics = %v, want empty", got)
	}
	m.count(outcomeServed)
	m.count(outcomeServed)
	m.count(string(attest.ReasonReplay))
	want := map[string]uint64{"served": 2, "replay": 1}
	if diff := cmp.Diff(want, m.Counts()); diff != "" {
		t.Errorf("Counts mismatch (-want +got):\n%s", diff)
	}
}

func TestEveryReasonIsAnOutcome(t *testing.T) {
	t.Parallel()
	for _, r := range attest.Reasons() {
		if !knownOutcome(string(r)) {
			t.Errorf("reason %q has no outcome", r)
		}
	}
}

func TestSnapshotGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	now := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	src := &staticSnapshots{}
	m.registerSnapshots(src, func() time.Time { return now })
	m.StoreError(errors.New("x"))

	if diff := cmp.Diff(map[string]float64{
		"lpsd_snapshot_loaded": 0, "lpsd_snapshot_age_seconds": 0, "lpsd_snapshot_revision": 0, "lpsd_store_errors_total": 1,
		"lpsd_connections_shed_total": 0,
	}, scalars(t, reg)); diff != "" {
		t.Errorf("before the first snapshot (-want +got):\n%s", diff)
	}
	src.snap = &Snapshot{Revision: 42, Built: now.Add(-90 * time.Second)}
	if diff := cmp.Diff(map[string]float64{
		"lpsd_snapshot_loaded": 1, "lpsd_snapshot_age_seconds": 90, "lpsd_snapshot_revision": 42, "lpsd_store_errors_total": 1,
		"lpsd_connections_shed_total": 0,
	}, scalars(t, reg)); diff != "" {
		t.Errorf("with a snapshot (-want +got):\n%s", diff)
	}
}

// scalars gathers reg's unlabelled gauges and counters.
func scalars(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		if len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 || !strings.HasPrefix(mf.GetName(), "lpsd_") {
			continue
		}
		pm := mf.GetMetric()[0]
		v := pm.GetGauge().GetValue() + pm.GetCounter().GetValue()
		if math.IsNaN(v) {
			t.Fatalf("%s is NaN", mf.GetName())
		}
		out[mf.GetName()] = v
	}
	return out
}
