package event

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
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

func TestWriteRefusesSymlinkedDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	target := filepath.Join(root, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dest string // symlink destination
	}{
		{"to-dir", target},
		{"dangling", filepath.Join(target, "missing")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			link := filepath.Join(root, tt.name)
			if err := os.Symlink(tt.dest, link); err != nil {
				t.Fatal(err)
			}
			if p, err := Write(link, Event{Task: TaskProvision}); err == nil {
				t.Errorf("Write(%s) = %s, nil; want an error", link, p)
			}
		})
	}
	entries, err := os.ReadDir(target)
	if err != nil || len(entries) != 0 {
		t.Errorf("symlink target holds %v, %v; want nothing", entries, err)
	}
}

func TestWriteDistinctFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const writers, perWriter = 4, 50
	paths := make(chan string, writers*perWriter)
	errs := make(chan error, writers)
	for range writers {
		go func() {
			for range perWriter {
				p, err := Write(dir, Event{Task: TaskLauncher, Level: LevelInformational})
				if err != nil {
					errs <- err
					return
				}
				paths <- p
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(paths)
	seen := map[string]bool{}
	for p := range paths {
		if seen[p] {
			t.Errorf("path %s returned twice", p)
		}
		seen[p] = true
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != writers*perWriter || len(seen) != writers*perWriter {
		t.Errorf("%d files, %d distinct paths; want %d of each", len(files), len(seen), writers*perWriter)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files) {
		t.Errorf("events dir holds %d entries, want %d (no temp files)", len(entries), len(files))
	}
}

func TestTempNameNeverCollected(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		name := tempName()
		if ok, _ := filepath.Match("*.json", name); ok {
			t.Errorf("temp name %q matches *.json", name)
		}
		if name[0] != '.' {
			t.Errorf("temp name %q does not start with a dot", name)
		}
		if seen[name] {
			t.Errorf("temp name %q repeated", name)
		}
		seen[name] = true
	}
}

func TestWriteModeIgnoresUmask(t *testing.T) {
	// Not parallel: the umask is process-wide.
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	p, err := Write(dir, Event{Task: TaskProvision})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("event file mode = %v, %v; want regular 0644", fi.Mode(), err)
	}
}

func TestPublishSkipsTakenNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"100.json", "101.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	dfd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dfd)
	got, err := publish(dfd, ".tmp", 100)
	if err != nil || got != "102.json" {
		t.Fatalf("publish(.tmp, 100) = %q, %v; want 102.json", got, err)
	}
	for name, want := range map[string]string{"100.json": "old", "101.json": "old", "102.json": "new"} {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(data) != want {
			t.Errorf("%s = %q, %v; want %q", name, data, err, want)
		}
	}
}
