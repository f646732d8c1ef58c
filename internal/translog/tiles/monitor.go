package tiles

import (
	"context"
)

// Report is what Monitor found.
type Report struct {
	// Checkpoint is the log's verified checkpoint, which the entries are
	// read from.
	Checkpoint Checkpoint
	// Kept is the checkpoint the state file held, which Checkpoint was
	// proven to extend; nil on first use (or with no state file), when
	// Checkpoint was trusted as it is.
	Kept *Checkpoint
	// Entries are the log's records from the requested index on.
	Entries []Entry
}

// Monitor reads the log through c: it verifies the checkpoint, proves it
// extends the one kept in statePath (ReadState; "" keeps none), describes
// every verified record from index since on, and then keeps the new
// checkpoint in statePath. The state changes only when everything
// verified: a *ForkError or *StaleError (from CheckConsistent) or a
// *VerifyError leaves it as it was.
func Monitor(ctx context.Context, c *Client, statePath string, since int64) (Report, error) {
	var rep Report
	var kept Checkpoint
	var ok bool
	if statePath != "" {
		var err error
		if kept, ok, err = ReadState(statePath, c.log); err != nil {
			return rep, err
		}
	}
	cp, err := c.Checkpoint(ctx)
	if err != nil {
		return rep, err
	}
	rep.Checkpoint = cp
	if ok {
		if err := c.CheckConsistent(ctx, kept, cp); err != nil {
			return rep, err
		}
		rep.Kept = &kept
	}
	err = c.Records(ctx, cp, since, func(i int64, rec []byte) error {
		rep.Entries = append(rep.Entries, Describe(i, rec))
		return nil
	})
	if err != nil {
		return rep, err
	}
	if statePath != "" {
		if err := WriteState(statePath, cp); err != nil {
			return rep, err
		}
	}
	return rep, nil
}
