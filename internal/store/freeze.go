package store

import (
	"context"
	"time"
)

// Freeze is the fleet-wide rollout freeze. While Frozen, no rollout starts
// or advances: the admin API refuses the changes that would (a percentage
// raised, a plan set, a resume, a skip, a completion) and the autopilot
// advances no step. Halts, pauses and revocations go on, and nodes keep
// being served what they are served.
type Freeze struct {
	Frozen bool `json:"frozen"`
	// Reason, Actor and Since are the change that froze or thawed it.
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor,omitempty"`
	Since  time.Time `json:"since,omitzero"`
}

// Freezer is an optional capability of a Store, checked by type
// assertion; every backend here has it. The freeze is one record beside
// the releases.
type Freezer interface {
	// Freeze returns the stored freeze and its revision: the zero Freeze
	// (not frozen) and 0 when none was ever put. A record that cannot be
	// decoded is returned as frozen (Reason says why), with an
	// *UnreadableError: a freeze nobody can read must not let rollouts
	// advance. ErrClosed after Close.
	Freeze(ctx context.Context) (Freeze, int64, error)

	// PutFreeze writes f if the stored freeze's revision equals ifRev (0:
	// none stored yet) and appends a (with Seq assigned) in the same
	// atomic transaction, and returns f's new revision; ErrConflict if
	// ifRev does not match, and then nothing is written. Revisions only
	// grow. It signals Watch. ErrClosed after Close.
	PutFreeze(ctx context.Context, f Freeze, ifRev int64, a AuditEntry) (int64, error)
}

// UnreadableFreeze is what a backend's Freeze returns for a stored freeze
// record it cannot decode (err says why, with its key): frozen, so that
// rollouts stay stopped until someone reads or replaces the record, and an
// *UnreadableError of kind "freeze".
func UnreadableFreeze(err error) (Freeze, error) {
	bad := NewUnreadable("freeze")
	bad.Add(err)
	return Freeze{Frozen: true, Reason: "the stored freeze record cannot be read: " + err.Error()}, bad.Err()
}
