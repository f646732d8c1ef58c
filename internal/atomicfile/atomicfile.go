// Package atomicfile replaces files so that readers see either the old
// content or the complete new content.
//
// The sequence is a temp file created O_EXCL in the destination's own
// directory, write, fchmod, close, rename over the destination. WriteFile
// and Create add the fsyncs that make it survive power loss on Linux file
// systems: the temp file before the rename, the directory after it. A failed
// fsync is final and never retried: after an fsync error the kernel may have
// dropped the dirty pages, so a retry can succeed while the data is lost.
//
// Replace skips both fsyncs, for files that are rewritten on every boot and
// cost nothing to lose. Readers see the same atomic switch, but after a
// crash the path may hold the old content (or nothing, if there was none),
// the new content, or an empty or truncated file: the rename can reach the
// disk before the data does. ext4 in its default mode (data=ordered,
// auto_da_alloc) writes the data before it commits a rename over an existing
// file, but that is a heuristic, absent when nothing was at the path, under
// noauto_da_alloc or data=writeback; XFS has no such heuristic for rename.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// File is new content for a path, written to a temp file beside it and made
// visible at the path only by Commit. A File is not safe for concurrent use.
type File struct {
	path   string
	mode   fs.FileMode
	f      *os.File // nil once closed
	tmp    string
	synced bool
	done   bool // committed or aborted
	// durable: fsync the content before the rename and the directory after
	// it. Replace clears it.
	durable bool
}

// Create starts new content for path with permission bits mode. The temp file
// is created in path's directory (a rename across file systems is not
// atomic) with a random name, O_EXCL, so a planted file or symlink at a
// predictable name cannot redirect the write.
func Create(path string, mode fs.FileMode) (*File, error) {
	return create(path, mode, true)
}

func create(path string, mode fs.FileMode, durable bool) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create temp file for %s: %w", path, err)
	}
	return &File{path: path, mode: mode.Perm(), f: f, tmp: f.Name(), durable: durable}, nil
}

// Write appends p to the new content.
func (a *File) Write(p []byte) (int, error) {
	if a.f == nil {
		return 0, fmt.Errorf("write %s: %w", a.tmp, os.ErrClosed)
	}
	return a.f.Write(p)
}

// TempName returns the path of the temp file, so that complete content can
// be checked (for example executed) after Sync and before Commit.
func (a *File) TempName() string { return a.tmp }

// Sync applies the mode to the temp file, flushes it to stable storage and
// closes it. After Sync the temp file is complete and no descriptor of this
// process holds it open for writing, so it can be executed without ETXTBSY.
func (a *File) Sync() error {
	if a.synced {
		return nil
	}
	if a.f == nil {
		return fmt.Errorf("sync %s: %w", a.tmp, os.ErrClosed)
	}
	f := a.f
	a.f = nil
	// fchmod on the descriptor, not chmod by path: no window in which the
	// name refers to something else, and the umask does not apply.
	if err := f.Chmod(a.mode); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", a.tmp, err)
	}
	if a.durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("fsync %s: %w", a.tmp, err)
		}
	}
	// Close errors matter: NFS and quota failures can surface only here.
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", a.tmp, err)
	}
	a.synced = true
	return nil
}

// Commit syncs the content if Sync has not run, renames the temp file over
// the path and fsyncs the directory so that the rename itself is durable. A
// symlink at the path is replaced, never followed. On error before the rename
// the temp file is removed and the path is untouched.
func (a *File) Commit() error {
	if a.done {
		return fmt.Errorf("commit %s: already committed or aborted", a.path)
	}
	if err := a.Sync(); err != nil {
		a.Abort()
		return err
	}
	if err := os.Rename(a.tmp, a.path); err != nil {
		a.Abort()
		return fmt.Errorf("rename %s: %w", a.path, err)
	}
	// After a successful rename the temp name must never be removed again:
	// another writer may already have created a file of the same name.
	a.done = true
	if !a.durable {
		return nil
	}
	return SyncDir(filepath.Dir(a.path))
}

// Abort discards the new content and removes the temp file. It is a no-op
// after Commit or a previous Abort, so it is safe to defer.
func (a *File) Abort() error {
	if a.done {
		return nil
	}
	a.done = true
	if a.f != nil {
		a.f.Close()
		a.f = nil
	}
	if err := os.Remove(a.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", a.tmp, err)
	}
	return nil
}

// WriteFile atomically and durably replaces path with data and permission
// bits mode: once it returns nil, the new content survives a crash. A
// symlink at the path is replaced, never followed. On error the path is
// untouched and no temp file is left.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	return writeFile(path, data, mode, true)
}

// Replace is WriteFile without the fsyncs, for files that are rewritten on
// every boot: readers see the old or the complete new content, but after a
// crash the path may hold either, or an empty or truncated file (see the
// package documentation). It costs no disk flush.
func Replace(path string, data []byte, mode fs.FileMode) error {
	return writeFile(path, data, mode, false)
}

func writeFile(path string, data []byte, mode fs.FileMode, durable bool) error {
	f, err := create(path, mode, durable)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", f.tmp, err)
	}
	return f.Commit()
}

// SyncDir fsyncs a directory, making renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// ModeOf returns the permission bits of the regular file at path, or def when
// nothing or something other than a regular file (a symlink, say) is there.
// The path is not followed: a symlink planted at the destination must not
// lend its target's mode.
func ModeOf(path string, def fs.FileMode) fs.FileMode {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return def
	}
	return fi.Mode().Perm()
}
