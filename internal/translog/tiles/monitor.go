package tiles

import (
	"context"
	"time"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// MonitorConfig says what Monitor keeps and checks. The zero value keeps
// no state, reports every record and checks no signer.
type MonitorConfig struct {
	// State is the file keeping the last verified checkpoint (ReadState,
	// WriteState); "" keeps none.
	State string
	// Since is the index from which entries are reported; all records are
	// still verified against the tree, and with Root all are read.
	Since int64
	// Root, when set, is the key set to walk the log's key-set records
	// from (the baked key file, release.ParseKeySet): every release's and
	// key set's signatures are then checked (Entry.Check).
	Root *release.KeySet
	// Now is when cosignatures and the newest key set's expiry are checked;
	// zero means time.Now().
	Now time.Time
}

// Report is what Monitor found.
type Report struct {
	// Checkpoint is the log's verified checkpoint, which the entries are
	// read from; Cosignatures its verified witness cosignatures (those the
	// Client's policy names), newest first.
	Checkpoint   translog.Checkpoint
	Cosignatures []translog.Cosignature
	// Kept is the checkpoint the state file held, which Checkpoint was
	// proven to extend; nil on first use (or with no state file), when
	// Checkpoint was trusted as it is.
	Kept *translog.Checkpoint
	// Entries are the log's records from the requested index on.
	Entries []Entry
	// KeySet is the newest key set verified from the root, nil without
	// one; KeySetExpired says it has expired at Now, which nodes refuse.
	KeySet        *release.KeySet
	KeySetExpired bool
}

// Flagged returns how many of the reported entries are flagged
// (Entry.Flagged).
func (r Report) Flagged() int {
	n := 0
	for _, e := range r.Entries {
		if e.Flagged() {
			n++
		}
	}
	return n
}

// Monitor reads the log through c: it verifies the checkpoint with c's
// policy, proves it extends the one kept in cfg.State, describes every
// verified record from cfg.Since on, checks signers from cfg.Root when
// set, and then keeps the new checkpoint in cfg.State. The state changes
// only when the log verified: a *ForkError or *StaleError (from
// CheckConsistent) or a *VerifyError leaves it as it was. Flagged entries
// are not errors: the caller reads Report.Flagged; the checkpoint is kept
// all the same, since the log is what it is and the next run must compare
// with it.
func Monitor(ctx context.Context, c *Client, cfg MonitorConfig) (Report, error) {
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	var rep Report
	var kept translog.Checkpoint
	var ok bool
	if cfg.State != "" {
		var err error
		if kept, ok, err = ReadState(cfg.State, c.policy.Log); err != nil {
			return rep, err
		}
	}
	cp, cosigs, err := c.Checkpoint(ctx, now)
	if err != nil {
		return rep, err
	}
	rep.Checkpoint, rep.Cosignatures = cp, cosigs
	if ok {
		if err := c.CheckConsistent(ctx, kept, cp); err != nil {
			return rep, err
		}
		rep.Kept = &kept
	}
	start := cfg.Since
	var w *walker
	if cfg.Root != nil {
		w, start = newWalker(*cfg.Root), 0
	}
	err = c.Records(ctx, cp, start, func(i int64, rec []byte) error {
		e := Describe(i, rec)
		if w != nil {
			w.check(&e, rec, rep.Entries)
		}
		if i >= cfg.Since {
			rep.Entries = append(rep.Entries, e)
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	if w != nil {
		cur := w.cur
		rep.KeySet = &cur
		rep.KeySetExpired = !cur.Expires().IsZero() && !now.Before(cur.Expires())
	}
	if cfg.State != "" {
		if err := WriteState(cfg.State, cp); err != nil {
			return rep, err
		}
	}
	return rep, nil
}
