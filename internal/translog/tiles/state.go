package tiles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/mod/sumdb/note"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/translog"
)

// ReadState returns the checkpoint a monitor kept at path (WriteState),
// verified again with log's signature only (its cosignatures were checked
// when it was kept, and have aged since); ok is false when there is no
// file yet, the first use.
func ReadState(path string, log note.Verifier) (cp translog.Checkpoint, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return translog.Checkpoint{}, false, nil
	}
	if err != nil {
		return translog.Checkpoint{}, false, fmt.Errorf("read state: %w", err)
	}
	defer f.Close()
	msg, err := io.ReadAll(io.LimitReader(f, translog.MaxNoteSize+1))
	if err != nil {
		return translog.Checkpoint{}, false, fmt.Errorf("read state %s: %w", path, err)
	}
	cp, _, err = translog.Open(msg, translog.Policy{Log: log}, time.Time{})
	if err != nil {
		return translog.Checkpoint{}, false, fmt.Errorf("state %s: %w", path, err)
	}
	return cp, true, nil
}

// WriteState keeps cp at path, atomically and durably replacing what was
// there: the file is cp's signed note, as served.
func WriteState(path string, cp translog.Checkpoint) error {
	if err := atomicfile.WriteFile(path, cp.Note, 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}
