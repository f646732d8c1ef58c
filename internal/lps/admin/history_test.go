package admin

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"nodehotfix/internal/assess"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/history"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// TestGetHistory: a reader gets a release's recorded points, oldest first,
// with what each says; an unreadable point is left out and counted; an
// unknown or malformed version and a negative limit are refused.
func TestGetHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, h.ops(t), signed(t, priv, v))
	rel, _, err := h.store.Release(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder(h.store, nil)
	for i, c := range []tally.Counts{{Pending: 3}, {OK: 2, Fallback: 1, Seated: 3}} {
		rel.Rollout.State, rel.Rollout.Percent = rollout.Rolling, 5*(i+1)
		f := assess.Fleet{Now: testNow.Add(time.Duration(i) * time.Minute), Records: []rollout.Release{rel},
			Releases: map[string]assess.Release{v: {Counts: c}}, Tally: tally.Tally{Control: map[string]tally.Counts{"202604.01": {OK: 50}}}}
		if err := rec.Record(t.Context(), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.store.PutPoints(t.Context(), []store.Point{{Version: v, Time: testNow.Add(-time.Hour), Data: []byte("{bad")}}); err != nil {
		t.Fatal(err)
	}
	reader := h.client(t, cred{token: "Bearer " + readerToken})
	resp, err := reader.GetHistory(t.Context(), &adminv1.GetHistoryRequest{Version: v})
	if err != nil {
		t.Fatalf("a reader's GetHistory: %v", err)
	}
	ps := resp.GetPoints()
	if !resp.GetKept() || resp.GetUnreadable() != 1 || len(ps) != 2 {
		t.Fatalf("GetHistory = %v: want 2 points, 1 unreadable", resp)
	}
	last := ps[1]
	if !last.GetTime().AsTime().Equal(testNow.Add(time.Minute)) || last.GetState() != "rolling" || last.GetPercent() != 10 ||
		last.GetCounts().GetOk() != 2 || last.GetCounts().GetFallback() != 1 || last.GetCounts().GetReported() != 3 || last.GetSeated() != 3 ||
		last.GetBaseline() != history.ControlBaseline || last.GetBaselineCounts().GetOk() != 50 {
		t.Errorf("last point %v: want rolling at 10%%, 2 ok 1 fallen back 3 seated, against the control's 50 ok", last)
	}
	if got, err := reader.GetHistory(t.Context(), &adminv1.GetHistoryRequest{Version: v, Limit: 1}); err != nil || len(got.GetPoints()) != 1 || got.GetPoints()[0].GetPercent() != 10 {
		t.Errorf("limit 1: %v, %v; want the newest point", got, err)
	}
	for _, bad := range []struct {
		req  *adminv1.GetHistoryRequest
		code codes.Code
	}{
		{&adminv1.GetHistoryRequest{Version: "202604.01.9"}, codes.NotFound},
		{&adminv1.GetHistoryRequest{Version: "not-a-version"}, codes.InvalidArgument},
		{&adminv1.GetHistoryRequest{Version: v, Limit: -1}, codes.InvalidArgument},
	} {
		_, err := reader.GetHistory(t.Context(), bad.req)
		wantCode(t, "GetHistory("+bad.req.String()+")", err, bad.code)
	}
}
