package capfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, make([]byte, 8), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 9), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		path    string
		want    string
		wantErr error
	}{
		{"regular", small, "hello", nil},
		{"exactly the cap", exact, string(make([]byte, 8)), nil},
		{"over the cap", big, "", ErrTooLarge},
		{"fifo does not block", fifo, "", ErrNotRegular},
		{"directory", dir, "", ErrNotRegular},
		{"missing", filepath.Join(dir, "nope"), "", fs.ErrNotExist},
		{"symlink to regular file", link, "hello", nil},
	}
	for _, tt := range tests {
		got, err := Read(tt.path, 8)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: Read error = %v, want %v", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: Read = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestReadNoFollow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nope"), dangling); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(dir, "linkdir")
	if err := os.Symlink(dir, linkDir); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		path    string
		max     int64
		want    string
		wantErr error
	}{
		{"regular", small, 8, "hello", nil},
		{"symlink", link, 8, "", ErrSymlink},
		{"dangling-symlink", dangling, 8, "", ErrSymlink},
		// Only the last component is checked; a symlinked parent is followed.
		{"symlinked-parent", filepath.Join(linkDir, "small"), 8, "hello", nil},
		{"fifo", fifo, 8, "", ErrNotRegular},
		{"over-the-cap", small, 4, "", ErrTooLarge},
		{"missing", filepath.Join(dir, "nope"), 8, "", fs.ErrNotExist},
	}
	for _, tt := range tests {
		got, err := ReadNoFollow(tt.path, tt.max)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: ReadNoFollow error = %v, want %v", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: ReadNoFollow = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}
