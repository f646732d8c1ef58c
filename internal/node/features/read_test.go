package features

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRead(t *testing.T) {
	t.Parallel()
	const name = "enabled_features.sh"
	// Each setup makes the file to read under a trusted dir and returns its path.
	file := func(content string, mode os.FileMode) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string { return writeFile(t, dir, name, content, mode) }
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string
		want    File
		wantErr string // in the ErrInvalid error; "" for success
	}{
		{name: "valid", setup: file("# c\nA=1\n", 0o600), want: File{Values: map[string]string{"A": "1"}, Accepted: []Pair{{Key: "A", Value: "1"}}}},
		{name: "empty", setup: file("", 0o600), want: File{Values: map[string]string{}}},
		{name: "mode-0644", setup: file("A=1\n", 0o644), want: File{Values: map[string]string{"A": "1"}, Accepted: []Pair{{Key: "A", Value: "1"}}}},
		{
			name:  "reserved-refused",
			setup: file("FUNCNEST=1\nLD_PRELOAD=x\nBASH_ENV=x\nNODE_EXTRA_CA_CERTS=x\nGIT_SSL_NO_VERIFY=1\n_X=1\nENABLE_PROVISIONING_HOTFIX=true\n", 0o600),
			want: File{
				Values: map[string]string{
					"FUNCNEST": "1", "LD_PRELOAD": "x", "BASH_ENV": "x", "NODE_EXTRA_CA_CERTS": "x",
					"GIT_SSL_NO_VERIFY": "1", "_X": "1", HotfixKey: "true",
				},
				Accepted: []Pair{{Key: HotfixKey, Value: "true"}},
				Notes: []Note{
					{Line: 1, Reason: "reserved key FUNCNEST (shell variable)"},
					{Line: 2, Reason: "reserved key LD_PRELOAD (dynamic loader or libc variable)"},
					{Line: 3, Reason: "reserved key BASH_ENV (shell variable)"},
					{Line: 4, Reason: "reserved key NODE_EXTRA_CA_CERTS (TLS trust variable)"},
					{Line: 5, Reason: "reserved key GIT_SSL_NO_VERIFY (tool or interpreter variable)"},
					{Line: 6, Reason: "reserved key _X (agent variable)"},
				},
			},
		},
		{
			name: "symlink-to-valid-file",
			setup: func(t *testing.T, dir string) string {
				target := writeFile(t, dir, "real", "A=1\n", 0o600)
				return mustSymlink(t, target, filepath.Join(dir, name))
			},
			wantErr: "it is a symlink",
		},
		{
			name:    "symlink-to-dev-zero",
			setup:   func(t *testing.T, dir string) string { return mustSymlink(t, "/dev/zero", filepath.Join(dir, name)) },
			wantErr: "it is a symlink",
		},
		{
			name: "dangling-symlink",
			setup: func(t *testing.T, dir string) string {
				return mustSymlink(t, filepath.Join(dir, "nope"), filepath.Join(dir, name))
			},
			wantErr: "it is a symlink",
		},
		{
			name: "directory",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, name)
				mustMkdir(t, p, 0o700)
				return p
			},
			wantErr: "not a regular file (a directory)",
		},
		{name: "device", setup: func(*testing.T, string) string { return "/dev/null" }, wantErr: "not a regular file (a device)"},
		{name: "mode-0666", setup: file("A=1\n", 0o666), wantErr: "writable by group or others (mode 0666)"},
		{name: "mode-0620", setup: file("A=1\n", 0o620), wantErr: "writable by group or others (mode 0620)"},
		{
			name: "directory-0777",
			setup: func(t *testing.T, dir string) string {
				p := writeFile(t, dir, name, "A=1\n", 0o600)
				mustChmod(t, dir, 0o777)
				return p
			},
			wantErr: "is writable by group or others (mode 0777)",
		},
		{
			name: "directory-sticky-1777",
			setup: func(t *testing.T, dir string) string {
				p := writeFile(t, dir, name, "A=1\n", 0o600)
				mustChmod(t, dir, 0o777|os.ModeSticky)
				return p
			},
			wantErr: "is writable by group or others (mode 1777)",
		},
		{
			name: "directory-symlink",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, dir, name, "A=1\n", 0o600)
				link := mustSymlink(t, dir, filepath.Join(filepath.Dir(dir), "link"))
				return filepath.Join(link, name)
			},
			wantErr: "is a symlink",
		},
		{name: "crlf", setup: file("A=1\nB=2\nENABLE_PROVISIONING_HOTFIX=true\r\n", 0o600), wantErr: "contains a carriage return at line 3 (CRLF line endings?)"},
		{name: "nul", setup: file("A=\x00\n", 0o600), wantErr: "contains a NUL byte at line 1"},
		{name: "duplicate", setup: file("ENABLE_PROVISIONING_HOTFIX=true\nENABLE_PROVISIONING_HOTFIX=false\n", 0o600), wantErr: "key ENABLE_PROVISIONING_HOTFIX set twice (lines 1 and 2)"},
		{name: "too-large", setup: file("ENABLE_PROVISIONING_HOTFIX=true\nPAD="+strings.Repeat("x", MaxSize)+"\n", 0o600), wantErr: "larger than 65536 bytes"},
		{name: "too-many-lines", setup: file("ENABLE_PROVISIONING_HOTFIX=true\n"+strings.Repeat("#\n", MaxLines), 0o600), wantErr: "more than 256 lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := tt.setup(t, secureDir(t))
			got, err := Read(path)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read(%s) error = %v, want ErrInvalid with %q", path, err, tt.wantErr)
				}
				if errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Read(%s) error = %v, also fs.ErrNotExist", path, err)
				}
				if diff := cmp.Diff(File{}, got); diff != "" {
					t.Errorf("Read(%s) with an error returned a File (-want +got):\n%s", path, diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read(%s): %v", path, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Read(%s) mismatch (-want +got):\n%s", path, diff)
			}
		})
	}
}

func TestReadMissing(t *testing.T) {
	t.Parallel()
	dir := secureDir(t)
	insecure := secureDir(t)
	mustChmod(t, insecure, 0o777)
	for _, path := range []string{
		filepath.Join(dir, "enabled_features.sh"),
		filepath.Join(dir, "nodir", "enabled_features.sh"),
		// A missing file is no features, whatever its directory.
		filepath.Join(insecure, "enabled_features.sh"),
	} {
		_, err := Read(path)
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
			t.Errorf("Read(%s) error = %v, want fs.ErrNotExist only", path, err)
		}
	}
}

// TestReadFIFO checks that a FIFO planted at the path voids the file at once
// instead of waiting for a writer.
func TestReadFIFO(t *testing.T) {
	t.Parallel()
	path := filepath.Join(secureDir(t), "enabled_features.sh")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Read(path)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a regular file (a FIFO)") {
			t.Errorf("Read(FIFO) error = %v, want ErrInvalid for a FIFO", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the reader so the test can end.
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("Read(FIFO) blocked")
	}
}

// TestReadOwner checks that a file or directory owned by another user voids
// the file. Only root can give a file away.
func TestReadOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	const other = 1000
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, secureDir(t), "enabled_features.sh", "A=1\n", 0o600)
		mustChown(t, path, other)
		_, err := Read(path)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), ": owned by uid 1000, not 0") {
			t.Errorf("Read error = %v, want ErrInvalid for uid 1000", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		dir := secureDir(t)
		path := writeFile(t, dir, "enabled_features.sh", "A=1\n", 0o600)
		mustChown(t, dir, other)
		_, err := Read(path)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "its directory "+dir+" is owned by uid 1000, not 0") {
			t.Errorf("Read error = %v, want ErrInvalid for a directory of uid 1000", err)
		}
	})
}

// FuzzRead checks that Read of a trusted file decides exactly as parse does
// on the file's bytes: the disk path adds no content rule and loses none,
// including at the size limit.
func FuzzRead(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte("ENABLE_PROVISIONING_HOTFIX=true\nPAD=" + strings.Repeat("x", 70<<10) + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := writeFile(t, secureDir(t), "enabled_features.sh", string(data), 0o600)
		got, err := Read(path)
		want, wantErr := parse(data)
		if (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Fatalf("Read(%q) error = %v, parse error = %v", data, err, wantErr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Read(%q) differs from parse (-parse +Read):\n%s", data, diff)
		}
	})
}

// writeFile writes content to dir/name with exactly mode, whatever the umask.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	mustChmod(t, p, mode)
	return p
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	mustChmod(t, dir, mode)
}

func mustChmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustChown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Lchown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) string {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}
