package tiles

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// MaxCheckpointSize bounds a checkpoint note, its cosignatures included.
const MaxCheckpointSize = 16 << 10

// Checkpoint is a verified C2SP tlog-checkpoint: the log named Origin had
// Size records and root hash Hash.
type Checkpoint struct {
	Origin string
	Size   int64
	Hash   tlog.Hash
	// Note is the signed note it was read from, cosignatures included.
	Note []byte
}

// Body returns the checkpoint's signed text: origin, size and base64 root
// hash, one per line.
func (c Checkpoint) Body() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.Size, c.Hash)
}

// OpenCheckpoint verifies the signed note msg with the log's verifier and
// parses its checkpoint. The origin must be the verifier's key name;
// extension lines after the hash are allowed and ignored, as are signatures
// by other keys (a witness's cosignature). Errors are *VerifyError with
// ReasonCheckpoint.
func OpenCheckpoint(msg []byte, log note.Verifier) (Checkpoint, error) {
	fail := func(err error) (Checkpoint, error) {
		return Checkpoint{}, &VerifyError{Reason: ReasonCheckpoint, Path: CheckpointPath, Err: err}
	}
	if len(msg) > MaxCheckpointSize {
		return fail(fmt.Errorf("%d bytes, over %d", len(msg), MaxCheckpointSize))
	}
	n, err := note.Open(msg, note.VerifierList(log))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		if errors.As(err, &unverified) {
			return fail(fmt.Errorf("not signed by the log key %s", log.Name()))
		}
		return fail(err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return fail(errors.New("want origin, size and hash lines"))
	}
	if lines[0] != log.Name() {
		return fail(fmt.Errorf("origin %q is not the log key's name %q", lines[0], log.Name()))
	}
	size, ok := canonicalInt(lines[1], 1<<63-1)
	if !ok {
		return fail(fmt.Errorf("size %q: want a decimal number", lines[1]))
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		return fail(fmt.Errorf("hash %q: want %d bytes of base64", lines[2], tlog.HashSize))
	}
	cp := Checkpoint{Origin: lines[0], Size: size, Note: msg}
	copy(cp.Hash[:], raw)
	return cp, nil
}
