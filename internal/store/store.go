// Package store defines the storage contract of the live-patching service:
// release records with their rollouts, and an append-only audit log.
//
// Backends live in subpackages (memstore, boltstore, etcdstore) and all pass
// the storetest conformance suite. The service never reads a store on the
// request path: it serves from a snapshot rebuilt when Watch signals.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"nodehotfix/internal/rollout"
)

// Errors returned (possibly wrapped) by every backend.
var (
	// ErrNotFound: no record with that key.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the record's revision is not the one the write expected
	// (a concurrent admin write won), or it exists when it must not.
	ErrConflict = errors.New("conflict")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
)

// AuditEntry is one change to the state, recorded in the same transaction
// as the change.
type AuditEntry struct {
	// Seq orders entries; assigned by the store, strictly increasing.
	Seq int64 `json:"seq"`
	// Time is when the change was made (set by the caller).
	Time time.Time `json:"time"`
	// Actor identifies who made it (admin credential identity).
	Actor string `json:"actor"`
	// Action is a short verb: publish, rollout-set, pause, resume, halt,
	// complete, revoke.
	Action string `json:"action"`
	// Target is the release version.
	Target string `json:"target"`
	// Before and After are the record before and after the change (JSON);
	// Before is null for a publish.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// Store persists releases and the audit log. Implementations are safe for
// concurrent use.
type Store interface {
	// Releases returns every release (in version order) and the store-wide
	// revision the list reflects.
	Releases(ctx context.Context) ([]rollout.Release, int64, error)

	// Release returns one release and its revision (the revision of its
	// last write). ErrNotFound if there is none.
	Release(ctx context.Context, version string) (rollout.Release, int64, error)

	// PutRelease writes r if the stored revision of r.Version equals ifRev,
	// where ifRev 0 means "must not exist yet", and appends a (with Seq
	// assigned) in the same atomic transaction. It returns r's new
	// revision. ErrConflict if ifRev does not match.
	PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a AuditEntry) (int64, error)

	// Audit returns up to limit entries with Seq greater than after, oldest
	// first.
	Audit(ctx context.Context, after int64, limit int) ([]AuditEntry, error)

	// Watch returns a channel that receives a value after any change to the
	// releases, from this process or (for shared backends) any other,
	// coalescing bursts; it is closed when ctx is done or the store is
	// closed. Consumers re-read Releases on each signal.
	Watch(ctx context.Context) <-chan struct{}

	// Close releases the backend's resources.
	Close() error
}
