package dashboard

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

// TestAttackThinKeepsStateChanges: a release with more points than a
// chart draws (a day and a half at one a minute) that halted for one
// look, was resumed, and rolled on. Thinning by index dropped the halted
// point, so the rollout chart showed no halt at all: the one thing an
// incident review opens it for.
func TestAttackThinKeepsStateChanges(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var ps []*adminv1.HistoryPoint
	for i := range 2000 {
		state := "rolling"
		if i == 1000 { // not one of the indexes thinning keeps
			state = "halted"
		}
		ps = append(ps, &adminv1.HistoryPoint{Time: timestamppb.New(t0.Add(time.Duration(i) * time.Minute)), State: state, Percent: int32(10 + i/100),
			Counts: &adminv1.Counts{Ok: uint64(i), Reported: uint64(i)}})
	}
	c := pointsChart(ps, t0.Add(2000*time.Minute))
	if len(c.Release) > maxSamples+64 {
		t.Errorf("%d samples drawn, want about %d at most", len(c.Release), maxSamples)
	}
	if len(c.Control) != len(c.Release) {
		t.Errorf("%d baseline samples beside %d of the release", len(c.Control), len(c.Release))
	}
	if svg := string(chartSVG(c, "rollout")); !strings.Contains(svg, "halted") {
		t.Errorf("the rollout chart of a release that halted shows no halt")
	}
	for i := 1; i < len(c.Release); i++ {
		if c.Release[i].T.Before(c.Release[i-1].T) {
			t.Fatalf("samples out of order at %d", i)
		}
	}
}

// TestAttackChartHostilePoints: points another writer stored, with
// markup in every string, counts at the top of uint64 (sums wrap, Judged
// underflows) and percentages far outside 0..100, draw an SVG with no
// markup of theirs and no NaN or Inf coordinates.
func TestAttackChartHostilePoints(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const evil = `"><script>alert(1)</script><x a="`
	huge := ^uint64(0)
	ps := []*adminv1.HistoryPoint{
		{Time: timestamppb.New(t0), State: evil, Percent: -2147483648, Reason: evil, Baseline: evil, Health: evil,
			Counts: &adminv1.Counts{Ok: huge, Failed: huge, Pending: huge, Reported: huge}, Seated: huge, BaselineCounts: &adminv1.Counts{Failed: huge, Reported: 1}},
		{Time: timestamppb.New(t0.Add(time.Minute)), State: "halted", Percent: 2147483647, Revoked: true, Baseline: evil,
			Counts: &adminv1.Counts{Failed: huge, Ok: 1, Reported: 2}, BaselineCounts: &adminv1.Counts{Pending: huge}},
		{Time: timestamppb.New(t0.Add(time.Minute)), State: evil, Baseline: evil, Counts: &adminv1.Counts{}}, // the same time again
	}
	c := pointsChart(ps, t0.Add(time.Hour))
	for _, kind := range []string{"rates", "rollout", "counts"} {
		svg := string(chartSVG(c, kind))
		if strings.Contains(svg, "<script") || strings.Contains(svg, "<x a=") {
			t.Errorf("%s chart carries the points' markup: %s", kind, svg)
		}
		if strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
			t.Errorf("%s chart has a NaN or Inf: %s", kind, svg)
		}
	}
}
