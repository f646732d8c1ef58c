package memstore

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/store"
)

var _ store.Log = (*Store)(nil)

// memLog is the transparency log in memory: records[n] is record n and
// hashes[i] the hash at stored-hash index i. Its methods assume the
// caller holds the Store's mu.
type memLog struct {
	records [][]byte
	hashes  []tlog.Hash
	keySets []store.KeySetRecord // ascending by version
	// cpNote is the kept checkpoint of cpSize records; nil when none.
	cpSize int64
	cpNote []byte
}

// append adds rec (nil: nothing) as the next record with its hashes. It
// changes nothing when it fails.
func (l *memLog) append(rec []byte) error {
	if rec == nil {
		return nil
	}
	n := int64(len(l.records))
	hashes, err := tlog.StoredHashes(n, rec, tlog.HashReaderFunc(l.readHashes))
	if err != nil {
		return fmt.Errorf("append log record %d: %w", n, err)
	}
	l.records = append(l.records, slices.Clone(rec))
	l.hashes = append(l.hashes, hashes...)
	return nil
}

func (l *memLog) readHashes(indexes []int64) ([]tlog.Hash, error) {
	if err := store.CheckHashIndexes(int64(len(l.records)), indexes); err != nil {
		return nil, err
	}
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = l.hashes[x]
	}
	return out, nil
}

// PutKeySet implements store.Store.
func (s *Store) PutKeySet(ctx context.Context, k store.KeySetRecord, a store.AuditEntry) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("put key set: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put key set %d: %w", k.Version, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, err)
	}
	if n := len(s.log.keySets); n > 0 && k.Version != s.log.keySets[n-1].Version+1 {
		return fmt.Errorf("put key set %d: the highest stored is %d: %w", k.Version, s.log.keySets[n-1].Version, store.ErrConflict)
	}
	if err := s.log.append(k.Envelope); err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, err)
	}
	s.log.keySets = append(s.log.keySets, cloneKeySet(k))
	a.Seq = int64(len(s.audit)) + 1
	s.audit = append(s.audit, cloneAudit(a))
	s.hub.Notify()
	return nil
}

// KeySets implements store.Store.
func (s *Store) KeySets(ctx context.Context) ([]store.KeySetRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("list key sets: %w", store.ErrClosed)
	}
	out := make([]store.KeySetRecord, len(s.log.keySets))
	for i, k := range s.log.keySets {
		out[i] = cloneKeySet(k)
	}
	return out, nil
}

// LogSize implements store.Log.
func (s *Store) LogSize(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("read log size: %w", store.ErrClosed)
	}
	return int64(len(s.log.records)), nil
}

// LogHashes implements store.Log.
func (s *Store) LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("read log hashes: %w", store.ErrClosed)
	}
	out, err := s.log.readHashes(indexes)
	if err != nil {
		return nil, fmt.Errorf("read log hashes: %w", err)
	}
	return out, nil
}

// LogRecords implements store.Log.
func (s *Store) LogRecords(ctx context.Context, start, end int64) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("read log records: %w", store.ErrClosed)
	}
	if err := store.CheckRecordRange(int64(len(s.log.records)), start, end); err != nil {
		return nil, fmt.Errorf("read log records: %w", err)
	}
	out := make([][]byte, 0, end-start)
	for _, r := range s.log.records[start:end] {
		out = append(out, slices.Clone(r))
	}
	return out, nil
}

// PutCheckpoint implements store.Log.
func (s *Store) PutCheckpoint(ctx context.Context, size int64, note []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put checkpoint: %w", store.ErrClosed)
	}
	if err := store.ValidateCheckpoint(size, int64(len(s.log.records)), note); err != nil {
		return fmt.Errorf("put checkpoint: %w", err)
	}
	if s.log.cpNote != nil && size < s.log.cpSize {
		return nil
	}
	s.log.cpSize, s.log.cpNote = size, slices.Clone(note)
	s.hub.Notify()
	return nil
}

// Checkpoint implements store.Log.
func (s *Store) Checkpoint(ctx context.Context) (int64, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, fmt.Errorf("read checkpoint: %w", store.ErrClosed)
	}
	if s.log.cpNote == nil {
		return 0, nil, fmt.Errorf("read checkpoint: %w", store.ErrNotFound)
	}
	return s.log.cpSize, slices.Clone(s.log.cpNote), nil
}

func cloneKeySet(k store.KeySetRecord) store.KeySetRecord {
	k.Envelope = slices.Clone(k.Envelope)
	return k
}
