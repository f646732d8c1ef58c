package agentlog

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestOpenAppends(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "var/log/azure/agent.log")
	for _, line := range []string{"one\n", "two\n"} {
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "one\ntwo\n" {
		t.Errorf("log = %q, %v; want %q", data, err, "one\ntwo\n")
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&^0o644 != 0 {
		t.Errorf("log mode = %v, %v; want at most 0644", fi.Mode(), err)
	}
}

func TestOpenRefusesSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dest string
	}{
		{"to-file", target},
		{"dangling", filepath.Join(dir, "created-through-link")},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, tt.name+".log")
		if err := os.Symlink(tt.dest, path); err != nil {
			t.Fatal(err)
		}
		if f, err := Open(path); err == nil {
			f.Close()
			t.Errorf("%s: Open(%s) succeeded, want an error", tt.name, path)
		}
	}
	if data, err := os.ReadFile(target); err != nil || string(data) != "keep" {
		t.Errorf("symlink target = %q, %v; want it untouched", data, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "created-through-link")); !os.IsNotExist(err) {
		t.Errorf("dangling symlink's target was created (lstat err %v)", err)
	}
}

func TestOpenRefusesNonRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A FIFO with a reader opens without ENXIO; the fstat must still refuse it.
	fifoRead := filepath.Join(dir, "fifo-with-reader")
	if err := syscall.Mkfifo(fifoRead, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(fifoRead, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	subdir := filepath.Join(dir, "dir")
	if err := os.Mkdir(subdir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each Open returns promptly or the test times out: nothing here may block.
	for _, path := range []string{fifo, fifoRead, subdir} {
		if f, err := Open(path); err == nil {
			f.Close()
			t.Errorf("Open(%s) succeeded, want an error", path)
		}
	}
}
