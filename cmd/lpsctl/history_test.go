package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/history"
	"nodehotfix/internal/store"
)

// TestHistoryCLI: lpsctl history shows what the looks recorded of a
// release, its rates beside its baseline's, and --changes keeps the points
// where the rollout moved; a release with no points says why.
func TestHistoryCLI(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, v)
	if out := mustRun(t, with("history", v)...); !strings.Contains(out, "no history recorded for "+v+" yet") || !strings.Contains(out, "--autopilot-interval=0") {
		t.Errorf("history with no points = %q, want it to say none is recorded yet, and when none is", out)
	}

	rec := history.NewRecorder(srv.store, nil)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute)
	look := func(at time.Time, reports ...store.Report) {
		t.Helper()
		if len(reports) > 0 {
			if _, err := srv.store.PutReports(t.Context(), reports); err != nil {
				t.Fatal(err)
			}
		}
		rels, _, err := srv.store.Releases(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		f, err := assess.Assess(t.Context(), srv.store, rels, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Record(t.Context(), f); err != nil {
			t.Fatal(err)
		}
	}
	report := func(vm string, exit int, at time.Time) store.Report {
		return store.Report{VMID: vm, Boot: "b", SubscriptionID: "sub-a", Base: "202604.01", HotfixVersion: v, Agent: "hotfix", AgentVersion: v, ExitCode: exit, Time: at}
	}
	look(t0) // the draft, nobody counted
	mustRun(t, with("rollout", "set", "--reason", "test", v, "--percent", "20")...)
	look(t0.Add(time.Minute), report("vm-1", 0, t0.Add(time.Minute)))
	look(t0.Add(2*time.Minute), report("vm-2", 0, t0.Add(2*time.Minute)))
	look(t0.Add(3*time.Minute), report("vm-3", 7, t0.Add(3*time.Minute)))

	out := mustRun(t, with("history", v)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[0], "FAILURE RATE") {
		t.Fatalf("history:\n%s\nwant a header and four points", out)
	}
	if !strings.Contains(lines[1], "draft") || !strings.Contains(lines[4], "rolling") || !strings.Contains(lines[4], "20%") ||
		!strings.Contains(lines[4], "33.3% (1/3)") || !strings.Contains(lines[4], "control") {
		t.Errorf("history:\n%s\nwant the draft first, then rolling at 20%% with 1 of 3 failed against the control", out)
	}
	if !strings.Contains(out, "failure rate = (failed + fell back") {
		t.Errorf("history:\n%s\nwant the failure rate's definition under the table", out)
	}

	var doc historyJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("history", v, "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 4 || !doc.Kept || doc.Points[0].FailureRate != nil || doc.Points[0].Step != nil || doc.Points[3].FailureRate == nil ||
		*doc.Points[3].FailureRate < 0.33 || *doc.Points[3].FailureRate > 0.34 || doc.Points[3].Counts.Failed != 1 || doc.Points[3].Baseline != history.ControlBaseline {
		t.Errorf("history -o json = %+v: want 4 points, the first unjudged, the last 1 of 3 failed", doc)
	}

	if err := json.Unmarshal([]byte(mustRun(t, with("history", v, "--changes", "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	// The draft, the rise to 20 % (its first point), and the last point:
	// the second rolling point moved nothing and is left out.
	if len(doc.Points) != 3 || doc.Points[0].State != "draft" || doc.Points[1].Percent != 20 || !doc.Points[2].Time.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("history --changes -o json = %+v: want the draft, the rise to 20%%, the last", doc.Points)
	}

	if err := json.Unmarshal([]byte(mustRun(t, with("history", v, "--limit", "1", "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 1 || !doc.Points[0].Time.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("history --limit 1 = %+v: want the newest point", doc.Points)
	}

	if _, errOut, code := lpsctl(t, with("history", "202604.01.9")...); code != exitNotFound || !strings.Contains(errOut, "202604.01.9") {
		t.Errorf("history of an unknown release: exit %d, %q; want not found", code, errOut)
	}
	if _, errOut, code := lpsctl(t, with("history", v, "--limit", "0")...); code != exitUsage || !strings.Contains(errOut, "--limit") {
		t.Errorf("history --limit 0: exit %d, %q; want a usage error", code, errOut)
	}
	if _, _, code := lpsctl(t, with("history")...); code != exitUsage {
		t.Errorf("history without VERSION: exit %d, want a usage error", code)
	}
}
