package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// TestPointsChart: the chart holds each recorded point's counts and its
// baseline's, the last held to now; many points are thinned to
// maxSamples, the first and the last kept.
func TestPointsChart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
	ps := []*adminv1.HistoryPoint{
		{Time: at(0), Counts: &adminv1.Counts{Pending: 3}, State: "rolling", Percent: 5, Baseline: "baked", BaselineCounts: &adminv1.Counts{Ok: 10, Reported: 10}},
		{Time: at(5), Counts: &adminv1.Counts{Ok: 2, Failed: 1, Reported: 3}, Seated: 3, State: "halted", Percent: 5, Reason: "regression", Baseline: "baked", BaselineCounts: &adminv1.Counts{Ok: 12, Reported: 12}},
	}
	now := t0.Add(time.Hour)
	c := pointsChart(ps, now)
	if len(c.Release) != 3 || len(c.Control) != 3 || c.Baseline != "baseline baked" {
		t.Fatalf("chart %+v: want 2 points held to now, against baseline baked", c)
	}
	want := sample{T: now, Counts: tally.Counts{OK: 2, Failed: 1, Seated: 3}, Reported: 3, Served: 3, Percent: 5, State: "halted"}
	if got := c.Release[2]; got != want {
		t.Errorf("last point %+v, want %+v", got, want)
	}
	if got := c.Control[1]; got.OK != 12 || !got.T.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("baseline at +5m %+v: want its 12 ok then", got)
	}
	if c := pointsChart(nil, now); c.Release != nil {
		t.Errorf("no points: %+v, want no chart", c)
	}
	var many []*adminv1.HistoryPoint
	for i := range 5000 {
		many = append(many, &adminv1.HistoryPoint{Time: at(i), Counts: &adminv1.Counts{Ok: uint64(i), Reported: uint64(i)}})
	}
	c = pointsChart(many, t0.Add(5000*time.Minute))
	if h := c.Release; len(h) != maxSamples || !h[0].T.Equal(t0) || h[len(h)-1].OK != 4999 || len(c.Control) != maxSamples {
		t.Errorf("%d points, first at %v, last %+v: want %d, from the first point to the last", len(h), h[0].T, h[len(h)-1].Counts, maxSamples)
	}
}

// TestHistoryOutlastsRevokeAndRestart: a release's charts come from the
// history recorded in the store, so a dashboard started after the reports
// (another replica, or this one restarted) draws the same history, and it
// is still drawn once the release is revoked and its reports are gone.
func TestHistoryOutlastsRevokeAndRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	f.report(t, version, 0, 30, false)
	f.report(t, version, 30, 6, true)
	if _, err := f.api.Revoke(opsCtx(t), &adminv1.RevokeRequest{Version: version, Reason: "bad"}); err != nil {
		t.Fatal(err)
	}
	f.look(t)
	// Retention pruned every report: the history stays.
	if _, err := f.st.PruneReports(t.Context(), store.Prune{Before: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A second dashboard on the same admin API, started now.
	late := New(Config{Admin: f.api, Auth: f.auth, Refresh: 50 * time.Millisecond})
	srv := httptest.NewUnstartedServer(late)
	srv.TLS = f.srv.TLS
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { late.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, base := range []string{f.srv.URL, srv.URL} {
		c := f.signInAt(t, base, readerToken)
		body := waitFor(t, c, base+"/releases/"+version, `failed 6`)
		for _, want := range []string{`ok 30`, `<polyline class="line s-failed"`, `release 16.7%`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: the revoked release's page lacks %q:\n%.2000s", base, want, body)
			}
		}
	}
}

// TestRolloutChart: the rollout chart draws the percentage as steps on a
// band per run of one state, each named; with no history it says why
// rather than drawing an empty frame, as the other charts do.
func TestRolloutChart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
	ps := []*adminv1.HistoryPoint{
		{Time: at(0), Counts: &adminv1.Counts{}, State: "draft"},
		{Time: at(10), Counts: &adminv1.Counts{Pending: 3}, State: "rolling", Percent: 5},
		{Time: at(20), Counts: &adminv1.Counts{Ok: 3, Reported: 3}, State: "rolling", Percent: 20},
		{Time: at(30), Counts: &adminv1.Counts{Ok: 3, Failed: 2, Reported: 5}, State: "halted", Percent: 20, Reason: "regression"},
		{Time: at(40), Counts: &adminv1.Counts{Ok: 3, Failed: 2, Reported: 5}, State: "<script>", Percent: 20},
	}
	svg := string(chartSVG(pointsChart(ps, t0.Add(40*time.Minute)), "rollout"))
	if n := strings.Count(svg, `<rect class="band`); n != 4 {
		t.Errorf("%d bands, want one per run of a state (draft, rolling, halted, and the unknown one):\n%s", n, svg)
	}
	for _, want := range []string{`band state-draft`, `band state-rolling`, `band state-halted`, `band state-other`, `>halted</text>`,
		`&lt;script&gt;`, `<polyline class="line s-percent"`, `20% &lt;script&gt;</text>`} {
		if !strings.Contains(svg, want) {
			t.Errorf("rollout chart lacks %q:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, "<script>") {
		t.Errorf("rollout chart carries a state unescaped:\n%s", svg)
	}
	// The percentage rises as a step: 5 % held until the point at +20m,
	// then 20 %: two vertices at +20m's x.
	_, x, y := frame("", "", t0, t0.Add(40*time.Minute), 100, "%")
	if want := fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(t0.Add(20*time.Minute)), y(5), x(t0.Add(20*time.Minute)), y(20)); !strings.Contains(svg, want) {
		t.Errorf("rollout chart lacks the step %q:\n%s", want, svg)
	}
	for _, c := range []struct {
		data chartData
		want string
	}{
		{chartData{}, emptyNotRecorded},
		{chartData{Empty: emptyNotKept}, emptyNotKept},
		{chartData{Empty: emptyUnreadable}, emptyUnreadable},
	} {
		for _, kind := range []string{"rollout", "rates", "counts"} {
			if svg := string(chartSVG(c.data, kind)); !strings.Contains(svg, template.HTMLEscapeString(c.want)) || strings.Contains(svg, "polyline") {
				t.Errorf("%s chart of %+v = %s, want only %q", kind, c.data, svg, c.want)
			}
		}
	}
	// Points with nobody judged: the rates chart says so.
	if svg := string(chartSVG(pointsChart(ps[:2], t0.Add(10*time.Minute)), "rates")); !strings.Contains(svg, "no node judged yet") {
		t.Errorf("rates chart with nobody judged = %s", svg)
	}
}

// TestReleasePagesSayWhatTheyServe: a superseded release and one the
// autopilot halted read as serving no node, with the halt's reason code
// and its words; a planned release's page lists its plan's steps, the
// current one marked; the counts say what they are counted from.
func TestReleasePagesSayWhatTheyServe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const newer, planned = "202604.01.4", "202605.02.1"
	f.publish(t, version)
	f.publish(t, newer)
	f.publishDraft(t, planned)
	if _, err := f.api.SetPlan(opsCtx(t), &adminv1.SetPlanRequest{Version: planned, Reason: "canary", Plan: &adminv1.Plan{
		Steps:  []*adminv1.PlanStep{{Nodes: 5, BakeSeconds: 1800, MinReports: 5}, {Percent: 50, BakeSeconds: 3600, MinReports: 20}, {Percent: 100, MinReports: 40}},
		Margin: 0.05, MaxFailureRate: 0.2}}); err != nil {
		t.Fatal(err)
	}
	// The autopilot's halt, as it writes it.
	r, rev, err := f.st.Release(t.Context(), newer)
	if err != nil {
		t.Fatal(err)
	}
	r.Rollout.State, r.Rollout.Reason, r.Rollout.HaltedFrom = rollout.Halted, regression.ReasonRefusedIntegrity, rollout.Complete
	if _, err := f.st.PutRelease(t.Context(), r, rev, store.AuditEntry{Actor: "lpsd", Action: "auto-halt", Target: newer}, nil); err != nil {
		t.Fatal(err)
	}
	f.loadSnapshot(t)
	c := f.signIn(t, readerToken)
	body := waitFor(t, c, f.srv.URL+"/", `reason-code">refusedIntegrity`)
	for _, want := range []string{`serves none: halted`, "Counts are of the reports and served records kept now"} {
		if !strings.Contains(body, want) {
			t.Errorf("releases page lacks %q", want)
		}
	}
	_, body = get(t, c, f.srv.URL+"/releases/"+newer)
	for _, want := range []string{`serves no node now: halted`, `<span class="reason-code">refusedIntegrity</span>: nodes refused it as signed`, "Counted from the reports and served records kept now", "failure rate = "} {
		if !strings.Contains(body, want) {
			t.Errorf("the halted release's page lacks %q", want)
		}
	}
	// With the newer one halted, the older serves again; halt nothing
	// more and complete the newer: the older is superseded.
	if r, rev, err = f.st.Release(t.Context(), newer); err != nil {
		t.Fatal(err)
	}
	r.Rollout.State, r.Rollout.Reason, r.Rollout.HaltedFrom = rollout.Complete, "", ""
	if _, err := f.st.PutRelease(t.Context(), r, rev, store.AuditEntry{Actor: "op", Action: "resume", Target: newer}, nil); err != nil {
		t.Fatal(err)
	}
	f.loadSnapshot(t)
	body = waitFor(t, c, f.srv.URL+"/releases/"+version, `serves no node now: superseded`)
	if strings.Contains(body, "reason-code") {
		t.Errorf("a release no autopilot stopped shows a reason code")
	}
	_, body = get(t, c, f.srv.URL+"/releases/"+planned)
	for _, want := range []string{`<table class="plan plan-steps">`, `<tr class="current"><th scope="row">1/3</th><td>a canary of 5 nodes</td>`, `<th scope="row">2/3</th><td>50%</td><td>1h</td><td class="num">20</td><td>-</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the planned release's page lacks %q:\n%s", want, body)
		}
	}
}
