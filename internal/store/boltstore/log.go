package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Log = (*Store)(nil)

// logSize reads the log's size from the meta bucket: 0 when absent, an
// error when it is not 8 bytes.
func logSize(tx *bolt.Tx) (int64, error) {
	v := tx.Bucket([]byte(metaBucket)).Get([]byte(logSizeKey))
	switch {
	case v == nil:
		return 0, nil
	case len(v) != 8:
		return 0, fmt.Errorf("%w: log size of %d bytes, want 8", ErrDamaged, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// appendLog adds rec (nil: nothing) as the log's next record, with the
// hashes tlog.StoredHashes computes from the stored ones, and moves the
// size. bbolt has one writer, so the size read here cannot change before
// the transaction commits.
func appendLog(tx *bolt.Tx, rec []byte) error {
	if rec == nil {
		return nil
	}
	n, err := logSize(tx)
	if err != nil {
		return err
	}
	records := tx.Bucket([]byte(logRecordsBucket))
	// Append-only even if the size were reset: never overwrite a record.
	if records.Get(uint64Key(uint64(n))) != nil {
		return fmt.Errorf("%w: log record %d exists beyond the log size %d", ErrDamaged, n, n)
	}
	hashes, err := tlog.StoredHashes(n, rec, tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		return readHashes(tx, n, indexes)
	}))
	if err != nil {
		return fmt.Errorf("append log record %d: %w", n, err)
	}
	hb := tx.Bucket([]byte(logHashesBucket))
	first := tlog.StoredHashIndex(0, n)
	for i := range hashes {
		if err := hb.Put(uint64Key(uint64(first+int64(i))), hashes[i][:]); err != nil {
			return err
		}
	}
	if err := records.Put(uint64Key(uint64(n)), storecodec.EncodeLogRecord(rec)); err != nil {
		return err
	}
	return tx.Bucket([]byte(metaBucket)).Put([]byte(logSizeKey), uint64Key(uint64(n+1)))
}

// readHashes returns the stored hashes at indexes of a log of size
// records.
func readHashes(tx *bolt.Tx, size int64, indexes []int64) ([]tlog.Hash, error) {
	if err := store.CheckHashIndexes(size, indexes); err != nil {
		return nil, err
	}
	hb := tx.Bucket([]byte(logHashesBucket))
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		v := hb.Get(uint64Key(uint64(x)))
		if v == nil {
			return nil, fmt.Errorf("%w: log hash %d missing from a log of %d records", ErrDamaged, x, size)
		}
		h, err := storecodec.DecodeHash(v)
		if err != nil {
			return nil, fmt.Errorf("%w: log hash %d: %v", ErrDamaged, x, err)
		}
		out[i] = h
	}
	return out, nil
}

// PutKeySet implements store.Store in one bbolt transaction.
func (s *Store) PutKeySet(ctx context.Context, k store.KeySetRecord, a store.AuditEntry) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("put key set: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, err)
	}
	v, err := storecodec.EncodeKeySet(k)
	if err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(keySetsBucket))
		if last, _ := b.Cursor().Last(); last != nil {
			if len(last) != 8 {
				return fmt.Errorf("%w: key set key %x", ErrDamaged, last)
			}
			if high := int64(binary.BigEndian.Uint64(last)); k.Version != high+1 {
				return fmt.Errorf("the highest stored is %d: %w", high, store.ErrConflict)
			}
		}
		if err := b.Put(uint64Key(uint64(k.Version)), v); err != nil {
			return err
		}
		if err := appendLog(tx, k.Envelope); err != nil {
			return err
		}
		return appendAudit(tx, a)
	})
	if err != nil {
		return fmt.Errorf("put key set %d: %w", k.Version, mapErr(err))
	}
	s.hub.Notify()
	return nil
}

// KeySets implements store.Store.
func (s *Store) KeySets(ctx context.Context) ([]store.KeySetRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list key sets: %w", err)
	}
	var out []store.KeySetRecord
	bad := store.NewUnreadable("key set")
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(keySetsBucket)).ForEach(func(key, v []byte) error {
			ver := fmt.Sprintf("%x", key)
			if len(key) == 8 {
				ver = strconv.FormatUint(binary.BigEndian.Uint64(key), 10)
			}
			k, err := storecodec.DecodeKeySet(v)
			if err == nil && strconv.FormatInt(k.Version, 10) != ver {
				err = fmt.Errorf("holds version %d", k.Version)
			}
			if err != nil {
				bad.AddKey(ver, fmt.Errorf("key set %s: %w", ver, err))
				return nil
			}
			out = append(out, k)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list key sets: %w", mapErr(err))
	}
	return out, bad.Err()
}

// LogSize implements store.Log.
func (s *Store) LogSize(ctx context.Context) (int64, error) {
	var n int64
	err := s.view(func(tx *bolt.Tx) (err error) {
		n, err = logSize(tx)
		return err
	})
	return n, wrapErr("read log size", err)
}

// LogHashes implements store.Log.
func (s *Store) LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	var out []tlog.Hash
	err := s.view(func(tx *bolt.Tx) error {
		n, err := logSize(tx)
		if err != nil {
			return err
		}
		out, err = readHashes(tx, n, indexes)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read log hashes: %w", mapErr(err))
	}
	return out, nil
}

// LogRecords implements store.Log.
func (s *Store) LogRecords(ctx context.Context, start, end int64) ([][]byte, error) {
	var out [][]byte
	err := s.view(func(tx *bolt.Tx) error {
		n, err := logSize(tx)
		if err != nil {
			return err
		}
		if err := store.CheckRecordRange(n, start, end); err != nil {
			return err
		}
		out = make([][]byte, 0, end-start)
		b := tx.Bucket([]byte(logRecordsBucket))
		for i := start; i < end; i++ {
			v := b.Get(uint64Key(uint64(i)))
			if v == nil {
				return fmt.Errorf("%w: log record %d missing from a log of %d", ErrDamaged, i, n)
			}
			// DecodeLogRecord copies: v is only valid inside the transaction.
			rec, err := storecodec.DecodeLogRecord(v)
			if err != nil {
				return fmt.Errorf("log record %d: %w", i, err)
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read log records: %w", mapErr(err))
	}
	return out, nil
}

// PutCheckpoint implements store.Log in one bbolt transaction.
func (s *Store) PutCheckpoint(ctx context.Context, size int64, note []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put checkpoint: %w", err)
	}
	v, err := storecodec.EncodeCheckpoint(size, note)
	if err != nil {
		return fmt.Errorf("put checkpoint: %w", err)
	}
	var kept bool
	err = s.update(func(tx *bolt.Tx) error {
		n, err := logSize(tx)
		if err != nil {
			return err
		}
		if err := store.ValidateCheckpoint(size, n, note); err != nil {
			return err
		}
		meta := tx.Bucket([]byte(metaBucket))
		if cur := meta.Get([]byte(checkpointKey)); cur != nil {
			curSize, _, err := storecodec.DecodeCheckpoint(cur)
			if err != nil {
				return err
			}
			if size < curSize {
				return nil
			}
		}
		kept = true
		return meta.Put([]byte(checkpointKey), v)
	})
	if err != nil {
		return fmt.Errorf("put checkpoint: %w", mapErr(err))
	}
	if kept {
		s.hub.Notify()
	}
	return nil
}

// Checkpoint implements store.Log.
func (s *Store) Checkpoint(ctx context.Context) (int64, []byte, error) {
	var (
		size int64
		note []byte
	)
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte(metaBucket)).Get([]byte(checkpointKey))
		if v == nil {
			return store.ErrNotFound
		}
		var err error
		// json.Unmarshal copies the note out of the transaction's memory.
		size, note, err = storecodec.DecodeCheckpoint(v)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("read checkpoint: %w", mapErr(err))
	}
	return size, note, nil
}
