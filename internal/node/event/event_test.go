package event

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "events")
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(1234 * time.Millisecond)
	e := Event{Task: TaskCheckHotfix, Level: LevelInformational, Message: "check-hotfix outcome=lpsRead" + Timing(start, end), Start: start, End: end, Version: "202604.01.0"}
	p1, err := Write(dir, e)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Write(dir, e)
	if err != nil {
		t.Fatal(err)
	}
	if p1 == p2 {
		t.Fatalf("two events share the path %s", p1)
	}
	if !regexp.MustCompile(`^[0-9]+\.json$`).MatchString(filepath.Base(p1)) {
		t.Errorf("event file name %q, want <unixnano>.json", filepath.Base(p1))
	}
	fi, err := os.Stat(p1)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("event file mode = %v, %v; want 0644", fi.Mode(), err)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o755 {
		t.Errorf("events dir mode = %v, %v; want 0755", di.Mode(), err)
	}
	data, _ := os.ReadFile(p1)
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"Timestamp":   "2026-04-01 10:00:00.000",
		"OperationId": "2026-04-01 10:00:01.234",
		"Version":     "202604.01.0",
		"TaskName":    "AKS.AKSNodeController.CheckHotfix",
		"EventLevel":  "Informational",
		"Message":     "check-hotfix outcome=lpsRead | startTime=2026-04-01 10:00:00.000 endTime=2026-04-01 10:00:01.234 durationMs=1234",
		"EventPid":    got["EventPid"],
		"EventTid":    "0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event mismatch (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("events dir holds %d entries, want 2 (no temp files)", len(entries))
	}
}
