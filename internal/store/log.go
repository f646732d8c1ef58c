package store

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// Bounds of the transparency log, the same on every backend.
const (
	// MaxRecordBytes bounds one log record (a release, revocation or
	// key-set envelope): a write carrying a larger one is refused whole.
	MaxRecordBytes = 64 << 10
	// MaxLogRecords bounds how many records one LogRecords call returns.
	MaxLogRecords = 1000
	// MaxLogHashes bounds how many hashes one LogHashes call returns: a
	// full tile (256) with room to spare; tlog's own reads ask for at most
	// about 2·log₂ n.
	MaxLogHashes = 1024
	// MaxCheckpointBytes bounds a stored checkpoint note, cosignatures
	// included: what every reader of one accepts (translog.MaxNoteSize),
	// so the store keeps no checkpoint nodes and monitors would refuse.
	MaxCheckpointBytes = 8 << 10
)

// Errors of the transparency log, returned (wrapped) by every backend.
var (
	// ErrInvalidRecord: a log record is empty or longer than
	// MaxRecordBytes, or a key-set record's version is below 1. Nothing of
	// the write is stored.
	ErrInvalidRecord = errors.New("invalid log record")
	// ErrInvalidCheckpoint: a checkpoint's size is negative or beyond the
	// log, or its note is empty or longer than MaxCheckpointBytes.
	ErrInvalidCheckpoint = errors.New("invalid checkpoint")
	// ErrLogRange: a read names records or hashes the log does not hold
	// (yet), or more than one call returns (MaxLogRecords, MaxLogHashes).
	ErrLogRange = errors.New("outside the log")
)

// Log is the read side of the store's append-only transparency log
// (RFC 6962 hashing, golang.org/x/mod/sumdb/tlog), and its cosigned
// checkpoint. Records are appended only by Store.PutRelease and
// Store.PutKeySet, in the same atomic transaction as the change they
// record; a record once appended never changes, and the log never forks,
// however many replicas append at once. Implementations are safe for
// concurrent use; every method returns ErrClosed after Close.
type Log interface {
	// LogSize returns how many records the log holds.
	LogSize(ctx context.Context) (int64, error)

	// LogHashes returns the stored hashes at indexes
	// (tlog.StoredHashIndex numbering), in the order asked: the
	// tlog.HashReader contract (see HashReader). ErrLogRange if any index
	// is negative or not stored yet (at or past
	// tlog.StoredHashCount(LogSize)), or for more than MaxLogHashes
	// indexes. A hash the log should hold but does not, or of the wrong
	// length, is an error too, never a zero hash.
	LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error)

	// LogRecords returns records start to end-1, the exact bytes
	// appended. ErrLogRange unless 0 ≤ start ≤ end ≤ LogSize and end-start
	// ≤ MaxLogRecords. A record that is missing or cannot be decoded is an
	// error for the whole call: a list with a hole would misnumber the
	// records after it.
	LogRecords(ctx context.Context, start, end int64) ([][]byte, error)

	// PutCheckpoint keeps note, a signed checkpoint of the log's first
	// size records, if size is at least the stored checkpoint's (an equal
	// size replaces it: the same tree with more cosignatures); a smaller
	// size is ignored, so the kept checkpoint never regresses, whatever
	// order replicas write in. ErrInvalidCheckpoint for a negative size, a
	// size beyond LogSize, or an empty or oversized note. The store does
	// not read the note.
	PutCheckpoint(ctx context.Context, size int64, note []byte) error

	// Checkpoint returns the kept checkpoint's size and note. ErrNotFound
	// if none was put.
	Checkpoint(ctx context.Context) (size int64, note []byte, err error)
}

// KeySetRecord is one version of the signed key-set document: the store
// keeps Envelope's exact bytes and does not read them.
type KeySetRecord struct {
	Version  int64
	Envelope []byte
}

// Validate returns an error wrapping ErrInvalidRecord unless k's version is
// at least 1 and its envelope a valid log record.
func (k KeySetRecord) Validate() error {
	if k.Version < 1 {
		return fmt.Errorf("key set version %d: below 1: %w", k.Version, ErrInvalidRecord)
	}
	if k.Envelope == nil {
		return fmt.Errorf("key set version %d: no envelope: %w", k.Version, ErrInvalidRecord)
	}
	if err := ValidateRecord(k.Envelope); err != nil {
		return fmt.Errorf("key set version %d: %w", k.Version, err)
	}
	return nil
}

// ValidateRecord returns an error wrapping ErrInvalidRecord for a log
// record that is empty (but not nil: nil appends nothing) or longer than
// MaxRecordBytes.
func ValidateRecord(rec []byte) error {
	if rec != nil && (len(rec) == 0 || len(rec) > MaxRecordBytes) {
		return fmt.Errorf("log record of %d bytes: want 1 to %d: %w", len(rec), MaxRecordBytes, ErrInvalidRecord)
	}
	return nil
}

// ValidateCheckpoint returns an error wrapping ErrInvalidCheckpoint unless
// 0 ≤ size ≤ logSize and note is 1 to MaxCheckpointBytes bytes.
func ValidateCheckpoint(size, logSize int64, note []byte) error {
	if size < 0 || size > logSize {
		return fmt.Errorf("checkpoint size %d: the log holds %d records: %w", size, logSize, ErrInvalidCheckpoint)
	}
	if len(note) == 0 || len(note) > MaxCheckpointBytes {
		return fmt.Errorf("checkpoint note of %d bytes: want 1 to %d: %w", len(note), MaxCheckpointBytes, ErrInvalidCheckpoint)
	}
	return nil
}

// CheckRecordRange returns an error wrapping ErrLogRange unless LogRecords
// may return records start to end-1 of a log of size records.
func CheckRecordRange(size, start, end int64) error {
	if start < 0 || start > end || end > size {
		return fmt.Errorf("log records [%d, %d): the log holds %d: %w", start, end, size, ErrLogRange)
	}
	if end-start > MaxLogRecords {
		return fmt.Errorf("log records [%d, %d): more than %d: %w", start, end, MaxLogRecords, ErrLogRange)
	}
	return nil
}

// CheckHashIndexes returns an error wrapping ErrLogRange unless LogHashes
// may return the hashes at indexes of a log of size records.
func CheckHashIndexes(size int64, indexes []int64) error {
	if len(indexes) > MaxLogHashes {
		return fmt.Errorf("%d log hashes: more than %d: %w", len(indexes), MaxLogHashes, ErrLogRange)
	}
	stored := tlog.StoredHashCount(size)
	for _, i := range indexes {
		if i < 0 || i >= stored {
			return fmt.Errorf("log hash %d: the log of %d records stores %d: %w", i, size, stored, ErrLogRange)
		}
	}
	return nil
}

// TileSource is l as serving it as C2SP tlog-tiles reads it (the
// translog/tiles Source interface): a log with no checkpoint yet has a nil
// note, not ErrNotFound.
type TileSource struct{ Log }

// Checkpoint returns the kept checkpoint; 0 and a nil note when none is.
func (s TileSource) Checkpoint(ctx context.Context) (int64, []byte, error) {
	size, note, err := s.Log.Checkpoint(ctx)
	if errors.Is(err, ErrNotFound) {
		return 0, nil, nil
	}
	return size, note, err
}

// HashReader returns l's LogHashes as a tlog.HashReader, for tlog.TreeHash,
// tlog.ProveRecord and tlog.ProveTree. Its reads use ctx, so it is good for
// as long as ctx is.
func HashReader(ctx context.Context, l Log) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		return l.LogHashes(ctx, indexes)
	})
}
