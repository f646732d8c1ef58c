package tiles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/mod/sumdb/note"

	"nodehotfix/internal/atomicfile"
)

// ReadState returns the checkpoint a monitor kept at path (WriteState),
// verified again with log; ok is false when there is no file yet, the
// first use.
func ReadState(path string, log note.Verifier) (cp Checkpoint, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read state: %w", err)
	}
	defer f.Close()
	msg, err := io.ReadAll(io.LimitReader(f, MaxCheckpointSize+1))
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read state %s: %w", path, err)
	}
	cp, err = OpenCheckpoint(msg, log)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("state %s: %w", path, err)
	}
	return cp, true, nil
}

// WriteState keeps cp at path, atomically and durably replacing what was
// there: the file is cp's signed note, as served.
func WriteState(path string, cp Checkpoint) error {
	if err := atomicfile.WriteFile(path, cp.Note, 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}
