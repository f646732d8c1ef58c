package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store"
)

// putPoint stores a point as another writer of the store could: any
// data, any minute.
func putPoint(t *testing.T, srv *testServer, version string, at time.Time, data string) {
	t.Helper()
	if err := srv.store.PutPoints(t.Context(), []store.Point{{Version: version, Time: at, Data: []byte(data)}}); err != nil {
		t.Fatal(err)
	}
}

// TestAttackHistoryHostileStrings: control characters in a point's
// state, reason, health and baseline are quoted in the table.
func TestAttackHistoryHostileStrings(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute)
	putPoint(t, srv, v, t0, `{"counts":{},"state":"rolling\u001b]0;owned\u0007","percent":5,"reason":"r\r\u001b[2J","health":"h\u001b[31m","baseline":"b\u001b[1m","baseline_counts":{}}`)
	out := mustRun(t, append([]string{"history", v}, srv.conn()...)...)
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Errorf("history let a control character through: %q", out)
	}
}

// TestAttackHistoryJSONOneBadPoint: one point whose minute is beyond
// year 9999 (another writer, damage; etcd keys allow 12 digits of
// minutes) must not make `lpsctl history -o json` fail for the whole
// release: encoding/json refuses such a time.
func TestAttackHistoryJSONOneBadPoint(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute)
	putPoint(t, srv, v, t0, `{"counts":{"ok":1},"state":"rolling","percent":5,"baseline_counts":{}}`)
	putPoint(t, srv, v, time.Unix(999999999999*60, 0), `{"counts":{"ok":2},"state":"rolling","percent":5,"baseline_counts":{}}`)
	out, errOut, code := lpsctl(t, append([]string{"history", v, "-o", "json"}, srv.conn()...)...)
	if code != exitOK {
		t.Fatalf("history -o json: exit %d\nstderr: %s", code, errOut)
	}
	var doc historyJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Points) == 0 {
		t.Fatalf("history -o json = %q (%v): want the readable point", out, err)
	}
}

// TestAttackHistoryJSONStepIndex: the manual promises every JSON "step"
// is a 0-based index, "0 or null (no plan)" here; a point with steps but
// no (or a zero) step, as a hand-written or older point may hold, came
// out as "step": -1.
func TestAttackHistoryJSONStepIndex(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute)
	putPoint(t, srv, v, t0, `{"counts":{},"state":"rolling","percent":5,"steps":3,"baseline_counts":{}}`)
	var doc historyJSON
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"history", v, "-o", "json"}, srv.conn()...)...)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 1 {
		t.Fatalf("points %+v", doc.Points)
	}
	if s := doc.Points[0].Step; s != nil && (*s < 0 || *s >= doc.Points[0].Steps) {
		t.Errorf(`"step": %d of %d steps: not an index into the plan's steps`, *s, doc.Points[0].Steps)
	}
}

// TestAttackHistoryLargeResponse: 10 000 points near MaxPointSize (long
// reason strings, another writer's) made GetHistory's answer exceed
// gRPC's default 4 MiB receive limit in lpsctl: history failed.
func TestAttackHistoryLargeResponse(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	t0 := time.Now().Add(-10000 * time.Minute).Truncate(time.Minute)
	reason := strings.Repeat("r", store.MaxPointSize-200)
	var ps []store.Point
	for i := range 10000 {
		ps = append(ps, store.Point{Version: v, Time: t0.Add(time.Duration(i) * time.Minute), Data: []byte(fmt.Sprintf(`{"counts":{},"state":"rolling","percent":5,"reason":%q,"baseline_counts":{}}`, reason))})
	}
	if err := srv.store.PutPoints(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := lpsctl(t, append([]string{"history", v, "--limit", "10000", "-o", "json"}, srv.conn()...)...)
	if code != exitOK {
		t.Errorf("history --limit 10000: exit %d: %s", code, errOut)
	}
}

// TestAttackHistoryJSONSchema: every key the manual's -o json shows is
// in every point, "reason": "" included, so a script reading .reason
// or .health gets a string, not a missing key.
func TestAttackHistoryJSONSchema(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	putPoint(t, srv, v, time.Now().Add(-time.Hour), `{"counts":{},"state":"draft","percent":0,"baseline":"control","baseline_counts":{}}`)
	var doc struct {
		Points []map[string]any `json:"points"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"history", v, "-o", "json"}, srv.conn()...)...)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 1 {
		t.Fatalf("points %v", doc.Points)
	}
	for _, k := range []string{"time", "state", "percent", "step", "steps", "reason", "revoked", "expired", "health", "counts", "seated",
		"failure_rate", "baseline", "baseline_counts", "baseline_failure_rate"} {
		if _, ok := doc.Points[0][k]; !ok {
			t.Errorf("point %v has no %q, which the manual shows", doc.Points[0], k)
		}
	}
}
