// Package capfile reads small local files with a size cap, refusing anything
// that is not a regular file.
//
// Node inputs (configs, pointers, flag files) are written by other programs
// and may be truncated, huge, or replaced by a FIFO or device; a read must
// neither block provisioning nor allocate without bound.
package capfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrTooLarge is returned (wrapped) when a file exceeds the caller's cap.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is returned (wrapped) when the path is a directory, FIFO,
// device or socket.
var ErrNotRegular = errors.New("not a regular file")

// ErrSymlink is returned (wrapped) by ReadNoFollow when the path's last
// component is a symlink.
var ErrSymlink = errors.New("is a symlink")

// Read returns the content of the regular file at path if it is at most max
// bytes. A missing file yields an error that satisfies
// errors.Is(err, fs.ErrNotExist). The open is non-blocking so that a FIFO at
// the path fails fast instead of waiting for a writer. A symlink at the path
// is followed; ReadNoFollow refuses it.
func Read(path string, max int64) ([]byte, error) {
	return read(path, max, 0)
}

// ReadNoFollow is Read, except that a symlink at the path's last component is
// refused with an error wrapping ErrSymlink instead of being followed. Use it
// for files whose replacement by a symlink would redirect trust (a pointer
// another user could swap for a link to a file of their choosing).
func ReadNoFollow(path string, max int64) ([]byte, error) {
	return read(path, max, syscall.O_NOFOLLOW)
}

func read(path string, max int64, flags int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|flags, 0)
	if flags&syscall.O_NOFOLLOW != 0 && errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("open %s: %w", path, ErrSymlink)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("read %s: %w: %d bytes, limit %d", path, ErrTooLarge, fi.Size(), max)
	}
	// The size can change after fstat; the limit, not the stat, is the bound.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("read %s: %w: over %d bytes", path, ErrTooLarge, max)
	}
	return data, nil
}
