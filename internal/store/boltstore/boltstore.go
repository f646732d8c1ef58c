// Package boltstore is the default store.Store: one local bbolt file.
package boltstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/notify"
	"nodehotfix/internal/store/storecodec"
)

var _ store.Store = (*Store)(nil)

// Buckets and keys of the file layout.
const (
	// releasesBucket maps a release version to its stored form (storecodec).
	releasesBucket = "releases"
	// auditBucket maps an 8-byte big-endian Seq to its stored form (storecodec);
	// the bucket's sequence allocates Seq.
	auditBucket = "audit"
	// reportsBucket maps VMID + "/" + Boot to a report's stored form
	// (storecodec); neither part contains "/".
	reportsBucket = "reports"
	// seatsBucket maps version + "/" + VMID to when the seat was taken
	// (Unix nanoseconds, 8-byte big endian) for each canary seat held,
	// version to the seats' count, 8-byte big endian, and, for a seat
	// taken under a per-subscription bound, version + "\x00sub\x00" +
	// subscription to that subscription's count and version +
	// "\x00holder\x00" + VMID to the holder's subscription (since
	// 2026-12-04; an older build reads neither key).
	seatsBucket = "seats"
	// servedBucket maps Version + "/" + VMID + "/" + Boot to a served
	// record's stored form (storecodec).
	servedBucket = "served"
	// configsBucket maps a component configuration's ID
	// (rollout.ConfigID) to its stored form (storecodec).
	configsBucket = "configs"
	// metaBucket holds store-wide values.
	metaBucket = "meta"
	// beatsBucket maps a Unix minute (8 bytes, big-endian) to nothing: a
	// minute in which lpsd was up (store.Beats).
	beatsBucket = "beats"
	// revisionKey (in metaBucket) is the store-wide revision, 8-byte big
	// endian, incremented by every release, component configuration and
	// freeze write.
	revisionKey = "revision"
	// logRecordsBucket maps a log record's index n (8-byte big endian,
	// from 0) to its stored form (storecodec.EncodeLogRecord).
	logRecordsBucket = "log-records"
	// logHashesBucket maps a stored-hash index (tlog.StoredHashIndex,
	// 8-byte big endian) to the hash's 32 bytes.
	logHashesBucket = "log-hashes"
	// keySetsBucket maps a key-set version (8-byte big endian) to its
	// stored form (storecodec).
	keySetsBucket = "keysets"
	// logSizeKey (in metaBucket) is how many records the log holds, 8-byte
	// big endian; absent for none.
	logSizeKey = "log-size"
	// checkpointKey (in metaBucket) is the kept checkpoint's stored form
	// (storecodec); absent for none.
	checkpointKey = "log-checkpoint"
	// freezeKey (in metaBucket) is the fleet-wide freeze's stored form
	// (storecodec); absent while none was ever put, as in every file from
	// before the freeze.
	freezeKey = "freeze"
	// freezeRevisionKey (in metaBucket) is the freeze's revision, 8-byte
	// big endian, written with it. It is a key of its own, not a field of
	// the record, so that a record nobody can decode still has the
	// revision a write replacing it compares against.
	freezeRevisionKey = "freeze-revision"
)

// lockTimeout bounds the wait for the file lock, so a second lpsd on the
// same file fails at start with a clear error instead of hanging.
const lockTimeout = time.Second

// Store is a store.Store in one bbolt file. bbolt allows one process per
// file, so Watch is an in-process notification. Store is safe for
// concurrent use.
type Store struct {
	db  *bolt.DB
	hub notify.Hub

	// reports and served keep what the last lists decoded.
	reports *decoded[store.Report]
	served  *decoded[store.Served]
}

// Open opens or creates the database file at path (mode 0600, parent
// directories 0700), adding any bucket a file from an older lpsd lacks. It
// fails after about a second if another process holds the file. An existing
// file that is empty, truncated or damaged (its meta pages, its freelist, or
// the pages of its tree) is an error wrapping ErrDamaged, never a panic, and
// is left as it was.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open bolt store: %w", err)
	}
	switch fi, err := os.Stat(path); {
	case err == nil && fi.Size() == 0:
		// bbolt starts an empty file as a new database: that would serve
		// an empty store where every release and revocation was, silently.
		return nil, fmt.Errorf("open bolt store %s: the file is empty (0 bytes), which no store ever is: %w; restore it from a backup, or remove it to start with no releases", path, ErrDamaged)
	case err == nil:
		if err := verify(path, fi.Size()); err != nil {
			return nil, fmt.Errorf("open bolt store %s: %w", path, err)
		}
	}
	db, err := openDB(path, &bolt.Options{Timeout: lockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open bolt store %s: file is locked by another process (waited %v): %w", path, lockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open bolt store %s: %w", path, err)
	}
	s := &Store{db: db,
		reports: newDecoded(reportsBucket, "report", storecodec.DecodeReport, store.CompareReports),
		served:  newDecoded(servedBucket, "served", storecodec.DecodeServed, store.CompareServed),
	}
	err = s.update(func(tx *bolt.Tx) error {
		for _, b := range []string{releasesBucket, auditBucket, reportsBucket, seatsBucket, servedBucket, metaBucket, configsBucket, beatsBucket, pointsBucket, logRecordsBucket, logHashesBucket, keySetsBucket} {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open bolt store %s: %w", path, err)
	}
	return s, nil
}

// ErrDamaged is returned (wrapped) by Open for a file that is not a whole
// store, and by reads that meet damage bbolt's check missed.
var ErrDamaged = errors.New("store file damaged")

// openDB is bolt.Open with a panic inside it (bbolt's reaction to a
// damaged freelist page, or a fault reading past a truncated file) turned
// into an ErrDamaged error. bbolt returns no DB to close after a panic, so
// openDB closes the file itself, releasing its lock: a later Open fails the
// same way instead of timing out on the lock. The memory map bbolt made is
// left in place (nothing names it any more); a damaged file stops lpsd at
// start, so that happens once.
func openDB(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var f *os.File
	opts := *o
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		var err error
		f, err = os.OpenFile(name, flag, perm)
		return f, err
	}
	defer func() {
		if p := recover(); p != nil {
			if f != nil {
				f.Close()
			}
			db, err = nil, fmt.Errorf("%w: bbolt could not read it: %v; restore it from a backup", ErrDamaged, p)
		}
	}()
	return bolt.Open(path, 0o600, &opts)
}

// verify reads an existing store file as the store will, read-only,
// before it is opened for writing: every page the meta page claims lies
// inside the file (a truncated file would fault in the mmap), every bucket
// and key is reachable and readable, and then the freelist (which bbolt
// reads only when it opens for writing, panicking on a damaged one) is a
// freelist page that names no page the tree uses. Each read runs in this
// goroutine with faults turned into panics, so damage is an error and the
// file is let go; bbolt's own Tx.Check walks in a goroutine of its own,
// where a bad page would end the process, so it runs only on a tree
// already read here. BenchmarkOpen measures it.
func verify(path string, size int64) error {
	err := readOnly(path, false, func(tx *bolt.Tx) error {
		if tx.Size() > size {
			return fmt.Errorf("%w: truncated: the store claims %d bytes, the file has %d; restore it from a backup", ErrDamaged, tx.Size(), size)
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return walk(b)
		})
	})
	if err != nil {
		return err
	}
	return readOnly(path, true, func(tx *bolt.Tx) error {
		// The check reads the map until it closes the channel: drain it.
		var first error
		for err := range tx.Check() {
			// A page neither the tree nor the freelist holds is space
			// lost, not damage: bbolt opens and writes such a file, and a
			// backup would carry the same leak.
			if first == nil && !strings.Contains(err.Error(), "unreachable unfreed") {
				first = fmt.Errorf("%w: %v; restore it from a backup", ErrDamaged, err)
			}
		}
		return first
	})
}

// readOnly opens the file read-only, with its freelist when freelist is
// set, and runs fn in a read transaction, a panic or fault in either being
// an ErrDamaged error.
func readOnly(path string, freelist bool, fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	db, err := openDB(path, &bolt.Options{ReadOnly: true, PreLoadFreelist: freelist, Timeout: lockTimeout})
	if errors.Is(err, ErrDamaged) {
		return err
	}
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("file is locked by another process (waited %v): %w", lockTimeout, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %v; restore it from a backup", ErrDamaged, err)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v; restore it from a backup", ErrDamaged, p)
		}
		db.Close()
	}()
	return db.View(fn)
}

// walk visits every key under b, nested buckets included.
func walk(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nested := b.Bucket(k); nested != nil {
				return walk(nested)
			}
		}
		return nil
	})
}

// view and update run fn in a bbolt transaction and turn a panic, which
// bbolt raises on damage its check at open did not see, into ErrDamaged.
func (s *Store) view(fn func(*bolt.Tx) error) (err error) {
	defer recoverDamage(&err)
	return s.db.View(fn)
}

func (s *Store) update(fn func(*bolt.Tx) error) (err error) {
	defer recoverDamage(&err)
	return s.db.Update(fn)
}

func recoverDamage(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", ErrDamaged, p)
	}
}

// Releases implements store.Store.
func (s *Store) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	var (
		out []rollout.Release
		rev int64
	)
	bad := store.NewUnreadable("release")
	err := s.view(func(tx *bolt.Tx) error {
		rev = revision(tx)
		return tx.Bucket([]byte(releasesBucket)).ForEach(func(k, v []byte) error {
			r, _, err := storecodec.DecodeRelease(v)
			if err != nil {
				bad.AddKey(string(k), fmt.Errorf("release %q: %w", k, err))
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list releases: %w", mapErr(err))
	}
	slices.SortFunc(out, rollout.Compare)
	return out, rev, bad.Err()
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, version string) (rollout.Release, int64, error) {
	var (
		r   rollout.Release
		rev int64
	)
	err := s.get(releasesBucket, version, func(v []byte) (err error) {
		r, rev, err = storecodec.DecodeRelease(v)
		return err
	})
	if err != nil {
		return rollout.Release{}, 0, fmt.Errorf("read release %q: %w", version, mapErr(err))
	}
	return r, rev, nil
}

// get decodes the value under key in bucket: ErrNotFound when there is
// none. Release and Config share it.
func (s *Store) get(bucket, key string, decode func([]byte) error) error {
	return s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte(bucket)).Get([]byte(key))
		if v == nil {
			return store.ErrNotFound
		}
		return decode(v)
	})
}

// PutRelease implements store.Store.
func (s *Store) PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a store.AuditEntry, rec []byte) (int64, error) {
	if err := cmp.Or(r.Validate(), store.ValidateRecord(rec)); err != nil {
		return 0, fmt.Errorf("put release: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("put release %s: %w", r.Version, err)
	}
	rev, err := s.put(releasesBucket, r.Version, ifRev, a, rec, func(v []byte) (int64, error) {
		_, cur, err := storecodec.DecodeRelease(v)
		return cur, err
	}, func(rev int64) ([]byte, error) { return storecodec.EncodeRelease(r, rev) })
	if err != nil {
		return 0, fmt.Errorf("put release %s: %w", r.Version, mapErr(err))
	}
	s.hub.Notify()
	return rev, nil
}

// put writes the record encode makes under key in bucket, in one
// transaction with its audit entry a and log record rec (nil: none):
// compare-and-swap on the revision stored (0: none) decodes from the value
// there, then the store-wide revision moves to the record's. PutRelease
// and PutConfig share it.
func (s *Store) put(bucket, key string, ifRev int64, a store.AuditEntry, rec []byte, stored func([]byte) (int64, error), encode func(rev int64) ([]byte, error)) (int64, error) {
	var rev int64
	err := s.update(func(tx *bolt.Tx) error {
		records := tx.Bucket([]byte(bucket))
		var cur int64
		if v := records.Get([]byte(key)); v != nil {
			var err error
			if cur, err = stored(v); err != nil {
				return err
			}
		}
		if cur != ifRev {
			return fmt.Errorf("at revision %d (stored %d): %w", ifRev, cur, store.ErrConflict)
		}
		rev = revision(tx) + 1
		rv, err := encode(rev)
		if err != nil {
			return err
		}
		if err := records.Put([]byte(key), rv); err != nil {
			return err
		}
		if err := tx.Bucket([]byte(metaBucket)).Put([]byte(revisionKey), uint64Key(uint64(rev))); err != nil {
			return err
		}
		if err := appendLog(tx, rec); err != nil {
			return err
		}
		return appendAudit(tx, a)
	})
	return rev, err
}

// appendAudit adds a to the audit log with the next Seq.
func appendAudit(tx *bolt.Tx, a store.AuditEntry) error {
	audit := tx.Bucket([]byte(auditBucket))
	seq, err := audit.NextSequence()
	if err != nil {
		return err
	}
	a.Seq = int64(seq)
	av, err := storecodec.EncodeAudit(a)
	if err != nil {
		return err
	}
	return audit.Put(uint64Key(seq), av)
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, after int64, limit int) ([]store.AuditEntry, error) {
	var out []store.AuditEntry
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte(auditBucket)).Cursor()
		for k, v := c.Seek(uint64Key(uint64(max(after, 0)) + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			a, err := storecodec.DecodeAudit(v)
			if err != nil {
				return fmt.Errorf("audit entry %x: %w", k, err)
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", mapErr(err))
	}
	return out, nil
}

// PutReports implements store.Store with one bbolt transaction per call.
func (s *Store) PutReports(ctx context.Context, rs []store.Report) ([]bool, error) {
	vals := make([][]byte, len(rs))
	for i, r := range rs {
		if err := r.ValidateKey(); err != nil {
			return nil, fmt.Errorf("put reports: %w", err)
		}
		v, err := storecodec.EncodeReport(r)
		if err != nil {
			return nil, fmt.Errorf("put reports: %w", err)
		}
		vals[i] = v
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("put reports: %w", err)
	}
	if len(rs) == 0 {
		// Spare an empty commit's fsync, but still report a closed store.
		if err := s.view(func(*bolt.Tx) error { return nil }); err != nil {
			return nil, fmt.Errorf("put reports: %w", mapErr(err))
		}
		return []bool{}, nil
	}
	var first []bool
	err := s.update(func(tx *bolt.Tx) error {
		first = make([]bool, len(rs))
		b := tx.Bucket([]byte(reportsBucket))
		for i, r := range rs {
			k := reportKey(r)
			// A key put earlier in this transaction is seen here, so only
			// its first occurrence in rs counts as new.
			first[i] = b.Get(k) == nil
			if !store.MergeReport(!first[i], r) {
				continue
			}
			if err := b.Put(k, vals[i]); err != nil {
				return fmt.Errorf("report %q: %w", k, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("put reports: %w", mapErr(err))
	}
	return first, nil
}

// Reports implements store.Store.
func (s *Store) Reports(ctx context.Context) ([]store.Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	var out []store.Report
	bad := store.NewUnreadable("report")
	err := s.view(func(tx *bolt.Tx) error {
		rs, errs, err := s.reports.list(tx)
		out = rs
		for _, e := range errs {
			bad.Add(e)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", mapErr(err))
	}
	return out, bad.Err() // in (VMID, Boot) order, not the keys'

}

// TakeSeat implements store.Store with one bbolt transaction; a read-only
// one when vmID holds a seat or limit is 0.
func (s *Store) TakeSeat(ctx context.Context, version string, seat store.Seat, limit store.SeatLimit) (bool, error) {
	if err := store.ValidateTake(version, seat, limit); err != nil {
		return false, fmt.Errorf("take seat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("take seat: %w", err)
	}
	key := seatKey(version, seat.VMID)
	held, err := s.holdsSeat(key)
	if err != nil || held || limit.Seats <= 0 {
		return held, wrapErr("take seat", err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(seatsBucket))
		if b.Get(key) != nil {
			held = true
			return nil
		}
		n := count(b.Get([]byte(version)))
		if n >= uint64(limit.Seats) {
			return nil
		}
		// "\x00" sorts before the "/" of the holders' keys, so Seats'
		// scan of version+"/" never meets a subscription's count.
		subKey := []byte(version + "\x00sub\x00" + seat.SubscriptionID)
		perSub := count(b.Get(subKey))
		if limit.PerSubscription > 0 && perSub >= uint64(limit.PerSubscription) {
			return store.ErrSubscriptionSeats
		}
		if err := b.Put(key, uint64Key(unixNano(seat.Since))); err != nil {
			return err
		}
		if limit.PerSubscription > 0 {
			if err := b.Put(subKey, uint64Key(perSub+1)); err != nil {
				return err
			}
			if err := b.Put(holderKey(version, seat.VMID), []byte(seat.SubscriptionID)); err != nil {
				return err
			}
		}
		held = true
		return b.Put([]byte(version), uint64Key(n+1))
	})
	return held, wrapErr("take seat", err)
}

// HoldsSeat implements store.Store with one read-only transaction.
func (s *Store) HoldsSeat(ctx context.Context, version, vmID string) (bool, error) {
	if err := store.ValidateSeat(version, vmID); err != nil {
		return false, fmt.Errorf("read seat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("read seat: %w", err)
	}
	held, err := s.holdsSeat(seatKey(version, vmID))
	return held, wrapErr("read seat", err)
}

// seatKey is a holder's key in the seats bucket.
func seatKey(version, vmID string) []byte { return []byte(version + "/" + vmID) }

// holderKey is the key of the subscription a holder took its seat under.
func holderKey(version, vmID string) []byte { return []byte(version + "\x00holder\x00" + vmID) }

// holdsSeat reports whether the seats bucket has key.
func (s *Store) holdsSeat(key []byte) (bool, error) {
	var held bool
	err := s.view(func(tx *bolt.Tx) error {
		held = tx.Bucket([]byte(seatsBucket)).Get(key) != nil
		return nil
	})
	return held, err
}

// Seats implements store.Store.
func (s *Store) Seats(ctx context.Context, version string) ([]store.Seat, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list seats: %w", err)
	}
	var out []store.Seat
	bad := store.NewUnreadable("seat")
	prefix := []byte(version + "/")
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(seatsBucket))
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			seat := store.Seat{VMID: string(k[len(prefix):])}
			if len(v) != 8 {
				bad.Add(fmt.Errorf("seat %q: %d-byte value, want 8", k, len(v)))
			} else if ns := binary.BigEndian.Uint64(v); ns != 0 {
				seat.Since = time.Unix(0, int64(ns)).UTC()
			}
			seat.SubscriptionID = string(b.Get(holderKey(version, seat.VMID)))
			out = append(out, seat)
		}
		return nil
	})
	if err != nil {
		return nil, wrapErr("list seats", err)
	}
	return out, bad.Err()
}

// count reads an 8-byte big-endian count; anything else is 0.
func count(v []byte) uint64 {
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// unixNano encodes t for the file, the zero time as 0 (UnixNano of it is
// out of range).
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

// wrapErr is nil for nil, else err mapped and prefixed with what failed.
func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, mapErr(err))
}

// PutServed implements store.Store with one bbolt transaction per call.
func (s *Store) PutServed(ctx context.Context, ss []store.Served) error {
	vals := make([][]byte, len(ss))
	for i, sv := range ss {
		if err := sv.ValidateKey(); err != nil {
			return fmt.Errorf("put served: %w", err)
		}
		v, err := storecodec.EncodeServed(sv)
		if err != nil {
			return fmt.Errorf("put served: %w", err)
		}
		vals[i] = v
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put served: %w", err)
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(servedBucket))
		for i, sv := range ss {
			k := []byte(sv.Version + "/" + sv.VMID + "/" + sv.Boot)
			if b.Get(k) != nil {
				continue // the first time served stays
			}
			if err := b.Put(k, vals[i]); err != nil {
				return fmt.Errorf("served %q: %w", k, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put served: %w", mapErr(err))
	}
	return nil
}

// Served implements store.Store.
func (s *Store) Served(ctx context.Context) ([]store.Served, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list served: %w", err)
	}
	var out []store.Served
	bad := store.NewUnreadable("served record")
	err := s.view(func(tx *bolt.Tx) error {
		ss, errs, err := s.served.list(tx)
		out = ss
		for _, e := range errs {
			bad.Add(e)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list served: %w", mapErr(err))
	}
	return out, bad.Err() // in field order, not the keys'

}

// Watch implements store.Store: the channel receives a value after each
// release write through this Store.
func (s *Store) Watch(ctx context.Context) <-chan struct{} {
	return s.hub.Subscribe(ctx)
}

// Close closes every Watch channel and the file, after in-flight
// transactions finish. Later calls return store.ErrClosed. Close is
// idempotent.
func (s *Store) Close() error {
	s.hub.Close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close bolt store: %w", err)
	}
	return nil
}

func revision(tx *bolt.Tx) int64 {
	v := tx.Bucket([]byte(metaBucket)).Get([]byte(revisionKey))
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func reportKey(r store.Report) []byte {
	return []byte(r.VMID + "/" + r.Boot)
}

func uint64Key(n uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, n)
}

// mapErr turns bbolt's closed-database error into store.ErrClosed.
func mapErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

var _ store.Beats = (*Store)(nil)

func beatKey(minute int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(minute)) }

// PutBeat implements store.Beats in one transaction that also forgets the
// marks past store.BeatRetention.
func (s *Store) PutBeat(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put beat: %w", err)
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(beatsBucket))
		if b == nil {
			return nil // a file of a release before beats, opened read-only
		}
		cutoff := beatKey(t.Add(-store.BeatRetention).Unix() / 60)
		c := b.Cursor()
		for k, _ := c.First(); k != nil && bytes.Compare(k, cutoff) < 0; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return b.Put(beatKey(t.Unix()/60), nil)
	})
	if err != nil {
		return fmt.Errorf("put beat: %w", mapErr(err))
	}
	return nil
}

// Beats implements store.Beats.
func (s *Store) Beats(ctx context.Context, from time.Time) ([]time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list beats: %w", err)
	}
	var out []time.Time
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(beatsBucket))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.Seek(beatKey(max(from.Unix()/60, 0))); k != nil; k, _ = c.Next() {
			if len(k) == 8 {
				out = append(out, time.Unix(int64(binary.BigEndian.Uint64(k))*60, 0).UTC())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list beats: %w", mapErr(err))
	}
	return out, nil
}
