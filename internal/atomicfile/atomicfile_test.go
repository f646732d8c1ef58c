package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func mustWrite(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// names lists dir, so tests can see leftover temp files.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func checkFile(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("Lstat(%s): %v", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
		t.Errorf("%s mode = %v, want regular %v", path, fi.Mode(), mode)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != content {
		t.Errorf("%s = %q, %v; want %q", path, b, err, content)
	}
}

// writers are the whole-file entry points; they differ only in durability,
// which a test cannot observe, so every test of one runs both.
var writers = []struct {
	name  string
	write func(path string, data []byte, mode fs.FileMode) error
}{
	{"WriteFile", WriteFile},
	{"Replace", Replace},
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		old      string // "" means no existing file
		oldMode  fs.FileMode
		mode     fs.FileMode
		wantMode fs.FileMode
	}{
		{name: "new", mode: 0o644, wantMode: 0o644},
		// fchmod ignores the umask, so group and other write survive.
		{name: "new-0777", mode: 0o777, wantMode: 0o777},
		{name: "new-0600", mode: 0o600, wantMode: 0o600},
		{name: "replace", old: "old", oldMode: 0o644, mode: 0o644, wantMode: 0o644},
		{name: "replace-mode", old: "old", oldMode: 0o600, mode: 0o755, wantMode: 0o755},
		{name: "replace-narrower", old: "old", oldMode: 0o777, mode: 0o640, wantMode: 0o640},
		{name: "type-bits-dropped", mode: fs.ModeSetuid | 0o755, wantMode: 0o755},
	}
	for _, w := range writers {
		for _, tt := range tests {
			t.Run(w.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				path := filepath.Join(dir, "f")
				if tt.old != "" {
					mustWrite(t, path, tt.old, tt.oldMode)
				}
				if err := w.write(path, []byte("new"), tt.mode); err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				checkFile(t, path, "new", tt.wantMode)
				if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
					t.Errorf("directory = %q, want only f", got)
				}
			})
		}
	}
}

func TestCommitReplacesSymlinkNotTarget(t *testing.T) {
	t.Parallel()
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			victim := filepath.Join(t.TempDir(), "passwd")
			mustWrite(t, victim, "root:x:0:0", 0o644)
			path := filepath.Join(dir, "hotfix")
			if err := os.Symlink(victim, path); err != nil {
				t.Fatal(err)
			}
			if err := w.write(path, []byte("new"), 0o755); err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			checkFile(t, path, "new", 0o755)
			checkFile(t, victim, "root:x:0:0", 0o644)
		})
	}
}

func TestCommitDanglingSymlink(t *testing.T) {
	t.Parallel()
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "created-by-follow")
			path := filepath.Join(dir, "hotfix")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			if err := w.write(path, []byte("new"), 0o755); err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			checkFile(t, path, "new", 0o755)
			if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("symlink target exists (%v); the link was followed", err)
			}
		})
	}
}

func TestAbort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		before func(*File) error // steps before Abort
	}{
		{name: "after-create", before: func(*File) error { return nil }},
		{name: "after-write", before: func(f *File) error { _, err := f.Write([]byte("partial")); return err }},
		{name: "after-sync", before: func(f *File) error {
			if _, err := f.Write([]byte("complete")); err != nil {
				return err
			}
			return f.Sync()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			mustWrite(t, path, "old", 0o644)
			f, err := Create(path, 0o755)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if err := tt.before(f); err != nil {
				t.Fatal(err)
			}
			if err := f.Abort(); err != nil {
				t.Fatalf("Abort: %v", err)
			}
			if err := f.Abort(); err != nil {
				t.Errorf("second Abort = %v, want nil", err)
			}
			if err := f.Commit(); err == nil {
				t.Error("Commit after Abort = nil, want an error")
			}
			if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
				t.Errorf("directory after Abort = %q, want only f", got)
			}
			checkFile(t, path, "old", 0o644)
		})
	}
}

func TestTempNameBeforeCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "aks-node-controller-hotfix")
	mustWrite(t, path, "old", 0o755)
	f, err := Create(path, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	tmp := f.TempName()
	if filepath.Dir(tmp) != dir || !strings.HasPrefix(filepath.Base(tmp), ".aks-node-controller-hotfix.tmp-") {
		t.Errorf("TempName = %q, want a hidden name beside %s", tmp, path)
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	// After Sync the complete content, with its mode, is at TempName, and
	// the destination is still the old file.
	checkFile(t, tmp, "new", 0o750)
	checkFile(t, path, "old", 0o755)
	if _, err := f.Write([]byte("more")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Sync = %v, want os.ErrClosed", err)
	}
	if err := f.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	checkFile(t, path, "new", 0o750)
	if err := f.Commit(); err == nil {
		t.Error("second Commit = nil, want an error")
	}
	// Abort after Commit must not remove anything: the temp name is gone
	// and may be reused by another writer.
	mustWrite(t, tmp, "someone else's", 0o600)
	if err := f.Abort(); err != nil {
		t.Errorf("Abort after Commit = %v", err)
	}
	checkFile(t, tmp, "someone else's", 0o600)
	checkFile(t, path, "new", 0o750)
}

func TestCreateFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path func(t *testing.T) string
	}{
		{name: "missing-dir", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "no", "f") }},
		{name: "dir-is-file", path: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "file")
			mustWrite(t, p, "", 0o644)
			return filepath.Join(p, "f")
		}},
		{name: "unwritable-dir", path: func(t *testing.T) string {
			if os.Geteuid() == 0 {
				t.Skip("root ignores directory permissions")
			}
			d := t.TempDir()
			if err := os.Chmod(d, 0o555); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(d, 0o755) })
			return filepath.Join(d, "f")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := tt.path(t)
			if f, err := Create(path, 0o644); err == nil {
				f.Abort()
				t.Fatalf("Create(%s) = nil error, want one", path)
			}
			for _, w := range writers {
				if err := w.write(path, []byte("x"), 0o644); err == nil {
					t.Errorf("%s(%s) = nil, want an error", w.name, path)
				}
			}
		})
	}
}

func TestCommitRenameFailsCleansUp(t *testing.T) {
	t.Parallel()
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// A non-empty directory at the destination cannot be renamed over.
			path := filepath.Join(dir, "f")
			if err := os.MkdirAll(filepath.Join(path, "child"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := w.write(path, []byte("new"), 0o644); err == nil {
				t.Fatalf("%s over a directory = nil, want an error", w.name)
			}
			if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
				t.Errorf("directory = %q, want only f (the temp file removed)", got)
			}
			if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
				t.Errorf("destination = %v, %v; want the directory intact", fi, err)
			}
		})
	}
}

func TestModeOf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	mustWrite(t, reg, "x", 0o751)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want fs.FileMode
	}{
		{name: "regular", path: reg, want: 0o751},
		{name: "missing", path: filepath.Join(dir, "missing"), want: 0o600},
		{name: "symlink-not-followed", path: link, want: 0o600},
		{name: "directory", path: dir, want: 0o600},
	}
	for _, tt := range tests {
		if got := ModeOf(tt.path, 0o600); got != tt.want {
			t.Errorf("ModeOf(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSyncDir(t *testing.T) {
	t.Parallel()
	if err := SyncDir(t.TempDir()); err != nil {
		t.Errorf("SyncDir = %v, want nil", err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncDir(missing) = %v, want fs.ErrNotExist", err)
	}
}
