package tiles

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/translog"
)

// MemSource is a Source held in memory, for tests and demos. It is safe for
// concurrent use.
type MemSource struct {
	mu      sync.Mutex
	records [][]byte
	hashes  []tlog.Hash // by tlog.StoredHashIndex
	cpSize  int64
	cpNote  []byte
}

var _ Source = (*MemSource)(nil)

// NewMemSource returns a log holding records, in order, without a
// checkpoint.
func NewMemSource(records ...[]byte) (*MemSource, error) {
	s := &MemSource{}
	for _, rec := range records {
		if err := s.Append(rec); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Append adds rec to the log, storing its hashes as tlog.StoredHashes
// computes them.
func (s *MemSource) Append(rec []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(len(s.records))
	hs, err := tlog.StoredHashes(n, rec, tlog.HashReaderFunc(s.readHashes))
	if err != nil {
		return fmt.Errorf("append record %d: %w", n, err)
	}
	s.records = append(s.records, append([]byte(nil), rec...))
	s.hashes = append(s.hashes, hs...)
	return nil
}

// Sign sets the checkpoint to the log's current tree, signed by signer,
// whose name is the origin.
func (s *MemSource) Sign(signer note.Signer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := int64(len(s.records))
	hash, err := tlog.TreeHash(size, tlog.HashReaderFunc(s.readHashes))
	if err != nil {
		return err
	}
	msg, err := translog.Checkpoint{Origin: signer.Name(), Size: size, Hash: hash}.Sign(signer)
	if err != nil {
		return fmt.Errorf("sign checkpoint %d: %w", size, err)
	}
	s.cpSize, s.cpNote = size, msg
	return nil
}

// SetCheckpoint replaces the checkpoint with note for tree size size, as
// served; nothing checks it.
func (s *MemSource) SetCheckpoint(size int64, note []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cpSize, s.cpNote = size, note
}

// LogSize implements Source.
func (s *MemSource) LogSize(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.records)), nil
}

// LogHashes implements Source.
func (s *MemSource) LogHashes(_ context.Context, indexes []int64) ([]tlog.Hash, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readHashes(indexes)
}

func (s *MemSource) readHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s.hashes)) {
			return nil, fmt.Errorf("hash index %d not stored", x)
		}
		out[i] = s.hashes[x]
	}
	return out, nil
}

// LogRecords implements Source.
func (s *MemSource) LogRecords(_ context.Context, start, end int64) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if start < 0 || end < start || end > int64(len(s.records)) {
		return nil, fmt.Errorf("records [%d, %d) not in a log of %d", start, end, len(s.records))
	}
	out := make([][]byte, 0, end-start)
	for i := start; i < end; i++ {
		out = append(out, s.records[i])
	}
	return out, nil
}

// Checkpoint implements Source.
func (s *MemSource) Checkpoint(context.Context) (int64, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cpSize, s.cpNote, nil
}
