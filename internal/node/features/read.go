package features

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Read reads the features file at path, the one on-node reader of it. The
// file must be a regular file, not a symlink, and it and its directory must
// be owned by the process's effective uid and not be writable by group or
// others; then the content rules of Parse apply. A missing file returns an
// error satisfying errors.Is(err, fs.ErrNotExist): no features. Any other
// error wraps ErrInvalid with the reason the whole file is void. Read never
// blocks (a FIFO at path is refused before it is opened) and is safe for
// concurrent use.
func Read(path string) (File, error) {
	data, err := readFile(filepath.Clean(path))
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", path, err)
	}
	f, err := parse(data)
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", path, err)
	}
	return f, nil
}

// readFile returns at most MaxSize+1 bytes of the trusted regular file at
// the clean path. The file is looked up, checked and opened relative to one
// descriptor of its directory, so it is the file of the directory checked.
func readFile(path string) ([]byte, error) {
	dirPath, name := filepath.Dir(path), filepath.Base(path)
	dir, err := os.OpenFile(dirPath, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		// Linux fails O_DIRECTORY|O_NOFOLLOW on a symlink with ENOTDIR; say which.
		if fi, lerr := os.Lstat(dirPath); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%w: its directory %s is a symlink", ErrInvalid, dirPath)
		}
		return nil, fmt.Errorf("%w: its directory %s is not a directory", ErrInvalid, dirPath)
	case err != nil:
		return nil, fmt.Errorf("%w: cannot open its directory: %w", ErrInvalid, err)
	}
	defer dir.Close()
	dfd := int(dir.Fd())

	// Look before opening: opening a device can have side effects.
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, statError("lstat", err)
	}
	if why := typeReason(uint32(st.Mode)); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, why)
	}
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil {
		return nil, fmt.Errorf("%w: cannot stat its directory %s: %w", ErrInvalid, dirPath, err)
	}
	if why := trustReason(dst.Uid, uint32(dst.Mode)); why != "" {
		return nil, fmt.Errorf("%w: its directory %s is %s", ErrInvalid, dirPath, why)
	}

	var fd int
	for {
		fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		// Signals (Go's preemption among them) can interrupt open on some
		// filesystems; os.OpenFile retries too.
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, statError("open", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	// The checks that count are on the open file: the entry may have been
	// replaced since the lookup.
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: cannot stat it: %w", ErrInvalid, err)
	}
	if why := typeReason(uint32(st.Mode)); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, why)
	}
	if why := trustReason(st.Uid, uint32(st.Mode)); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, why)
	}
	if st.Size > MaxSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxSize)
	}
	// The file can grow after fstat; the limit, not the stat, bounds the read.
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read it: %w", ErrInvalid, err)
	}
	return data, nil
}

// statError converts the error of looking up or opening the file: missing
// stays fs.ErrNotExist, a symlink (ELOOP under O_NOFOLLOW) and anything else
// void the file.
func statError(op string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return err
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: it is a symlink", ErrInvalid)
	}
	return fmt.Errorf("%w: cannot %s it: %w", ErrInvalid, op, err)
}

// typeReason returns why a file of the given st_mode may not be read, or ""
// for a regular file.
func typeReason(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFLNK:
		return "it is a symlink"
	case unix.S_IFDIR:
		return "not a regular file (a directory)"
	case unix.S_IFIFO:
		return "not a regular file (a FIFO)"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "not a regular file (a device)"
	case unix.S_IFSOCK:
		return "not a regular file (a socket)"
	}
	return "not a regular file"
}

// trustReason returns why a file owned by uid with st_mode mode is not
// trusted, or "". Whoever else owns or may write it could have written the
// file or, for a directory, replace it after the checks.
func trustReason(uid, mode uint32) string {
	if euid := uint32(os.Geteuid()); uid != euid {
		return fmt.Sprintf("owned by uid %d, not %d", uid, euid)
	}
	if mode&0o022 != 0 {
		return fmt.Sprintf("writable by group or others (mode %04o)", mode&0o7777)
	}
	return ""
}
