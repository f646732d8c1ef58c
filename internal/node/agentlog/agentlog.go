// Package agentlog opens the agent's append-only JSON log file.
package agentlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Open opens the log file at path for appending, creating it (0644) and its
// directory (0755) if missing. It refuses a symlink at path (the agent runs as
// root and must never append to a file someone else chose) and anything other
// than a regular file; a FIFO at path fails at once instead of blocking until
// a reader appears. The caller closes the file.
func Open(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	// O_NONBLOCK only matters for a FIFO or device; on a regular file it has
	// no effect, so it is left set.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0o644)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("open log %s: is a symlink", path)
	case errors.Is(err, syscall.ENXIO):
		// A FIFO without a reader, or a socket.
		return nil, fmt.Errorf("open log %s: not a regular file: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("open log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat log %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open log %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	return f, nil
}
