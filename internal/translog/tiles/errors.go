package tiles

import (
	"errors"
	"fmt"

	"nodehotfix/internal/translog"
)

// ErrNotFound is what a Fetcher returns for a path the root does not have.
var ErrNotFound = errors.New("not found")

// Reason says what a *VerifyError found wrong.
type Reason string

// Reasons of a *VerifyError.
const (
	// ReasonCheckpoint: the checkpoint does not verify (translog.Open):
	// malformed, not signed by the log key, or without the policy's fresh
	// witness cosignatures. Err is translog's *VerifyError.
	ReasonCheckpoint Reason = "bad-checkpoint"
	// ReasonTile: a hash tile is not the one the checkpoint's root hash
	// commits to, or has the wrong size.
	ReasonTile Reason = "bad-tile"
	// ReasonEntries: an entry bundle is malformed, has the wrong number of
	// entries, or an entry whose hash is not the tree's leaf.
	ReasonEntries Reason = "bad-entries"
	// ReasonTooLarge: a response is over its limit.
	ReasonTooLarge Reason = "too-large"
)

// VerifyError is data the server sent that the log key does not vouch
// for: the server (or what is between it and the reader) is lying or
// broken. Path is the file under the tiles root.
type VerifyError struct {
	Reason Reason
	Path   string
	Err    error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.Path, e.Reason, e.Err)
}

func (e *VerifyError) Unwrap() error { return e.Err }

// ForkError is proof that the log forked: two checkpoints, both signed by
// the log key, that cannot both be prefixes of one append-only log.
type ForkError struct {
	// Kept is the checkpoint verified before (the state file's); Got is
	// the one the log serves now.
	Kept, Got translog.Checkpoint
	// Reason is why they conflict.
	Reason string
	// Err is translog.VerifyConsistency's *VerifyError (ReasonInconsistent).
	Err error
}

func (e *ForkError) Error() string {
	return fmt.Sprintf("log %s forked: %s: kept checkpoint %d %s, served %d %s",
		e.Kept.Origin, e.Reason, e.Kept.Size, e.Kept.Hash, e.Got.Size, e.Got.Hash)
}

func (e *ForkError) Unwrap() error { return e.Err }

// StaleError is a checkpoint smaller than the kept one: a mirror that lags
// or a log rolled back; nothing proves a fork, but the kept checkpoint
// stays.
type StaleError struct {
	Kept, Got translog.Checkpoint
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("log %s serves checkpoint %d, older than the kept %d", e.Kept.Origin, e.Got.Size, e.Kept.Size)
}
