package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/tally"
)

// TestNodeHistory: each node counts as pending from when it was served
// and by its outcome from its report; a silent one from when its
// silent-after ran out; a pending one to the end; the last point is now
// and holds the counts the release has now.
func TestNodeHistory(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
	nodes := []*adminv1.NodeOutcome{
		{VmId: "ok", Outcome: "ok", ServedAt: at(0), Time: at(5)},
		{VmId: "failed", Outcome: "failed", ServedAt: at(1), Time: at(10)},
		{VmId: "silent", Outcome: "silent", ServedAt: at(2)},
		{VmId: "pending", Outcome: "pending", ServedAt: at(40)},
		// Refused, with no served record: counted from its report.
		{VmId: "refused", Outcome: "refusedIntegrity", Time: at(20)},
		{VmId: "garbage", Outcome: "nonsense", ServedAt: at(3)},
	}
	now := t0.Add(time.Hour)
	h := nodeHistory(nodes, 30*time.Minute, now)
	byTime := map[time.Duration]tally.Counts{}
	for _, s := range h {
		byTime[s.T.Sub(t0)] = s.Counts
		if s.Reported != s.Counts.Reported() || s.Served != s.Counts.Served() {
			t.Errorf("sample at %v: reported %d served %d, counts %+v", s.T.Sub(t0), s.Reported, s.Served, s.Counts)
		}
	}
	for _, c := range []struct {
		m    int
		want tally.Counts
	}{
		{0, tally.Counts{Pending: 1}},
		{2, tally.Counts{Pending: 3}},
		{5, tally.Counts{OK: 1, Pending: 2}},
		{10, tally.Counts{OK: 1, Failed: 1, Pending: 1}},
		{20, tally.Counts{OK: 1, Failed: 1, RefusedIntegrity: 1, Pending: 1}},
		{32, tally.Counts{OK: 1, Failed: 1, RefusedIntegrity: 1, Silent: 1}},
		{40, tally.Counts{OK: 1, Failed: 1, RefusedIntegrity: 1, Silent: 1, Pending: 1}},
		{60, tally.Counts{OK: 1, Failed: 1, RefusedIntegrity: 1, Silent: 1, Pending: 1}},
	} {
		if got, ok := byTime[time.Duration(c.m)*time.Minute]; !ok || got != c.want {
			t.Errorf("at +%dm: %+v (point: %v), want %+v", c.m, got, ok, c.want)
		}
	}
	if last := h[len(h)-1]; !last.T.Equal(now) {
		t.Errorf("last point at %v, want now %v", last.T, now)
	}
	if got := nodeHistory(nil, time.Minute, now); got != nil {
		t.Errorf("no nodes: %v, want no history", got)
	}
	// Many nodes: at most maxSamples points, the first and the last kept.
	var many []*adminv1.NodeOutcome
	for i := range 5000 {
		many = append(many, &adminv1.NodeOutcome{VmId: fmt.Sprint(i), Outcome: "ok", ServedAt: timestamppb.New(t0.Add(time.Duration(i) * time.Second)), Time: timestamppb.New(t0.Add(time.Duration(i)*time.Second + 500*time.Millisecond))})
	}
	h = nodeHistory(many, time.Minute, t0.Add(3*time.Hour))
	if len(h) > maxSamples || !h[0].T.Equal(t0) || h[len(h)-1].OK != 5000 {
		t.Errorf("%d points, first at %v, last %+v: want at most %d, from the first node to every node ok", len(h), h[0].T, h[len(h)-1].Counts, maxSamples)
	}
}

// TestHistoryOutlastsRevokeAndRestart: a release's charts come from the
// store, so a dashboard started after the reports (another replica, or
// this one restarted) draws the same history, and it is still drawn once
// the release is revoked.
func TestHistoryOutlastsRevokeAndRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	f.report(t, version, 0, 30, false)
	f.report(t, version, 30, 6, true)
	if _, err := f.api.Revoke(opsCtx(t), &adminv1.RevokeRequest{Version: version, Reason: "bad"}); err != nil {
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
