package tiles

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// Kind is what a log record is.
type Kind string

// Kinds of records.
const (
	KindRelease    Kind = "release"
	KindRevocation Kind = "revocation"
	KindKeySet     Kind = "keyset"
	// KindUnknown is a record none of the others decode: a monitor shows
	// it, and flags it, since nothing should append one.
	KindUnknown Kind = "unknown"
)

// Entry describes one log record. Describe decodes it WITHOUT verifying
// any signature (release.Inspect, release.InspectKeySet); Check, which
// Monitor fills when it has a root key set, says who really signed.
type Entry struct {
	Index int64
	Hash  tlog.Hash // tlog.RecordHash of the record
	Kind  Kind
	// Version is the hotfix version of a release or revocation, or a key
	// set's version in decimal.
	Version string
	// Base is a release's image base.
	Base string
	// NotAfter is a release's expiry; Expires a key set's.
	NotAfter, Expires time.Time
	// Time is when a revocation was made.
	Time time.Time
	// Threshold, Keys (key IDs, release.KeyID) and Log are a key set's.
	Threshold int
	Keys      []string
	Log       release.LogPolicy
	// Check is the verification of a release's or key set's signatures
	// against the key-set chain walked from a root (Monitor); nil when
	// there was no root, or for other kinds.
	Check *Check
	// Problem says why a KindUnknown record did not decode.
	Problem string
}

// Flagged reports whether e is something a monitor must alert on: a
// record of unknown kind, or a failed Check.
func (e Entry) Flagged() bool {
	return e.Kind == KindUnknown || e.Check != nil && e.Check.Status.Flagged()
}

// Describe decodes record, the log's record at index.
func Describe(index int64, record []byte) Entry {
	e := Entry{Index: index, Hash: tlog.RecordHash(record)}
	if err := describe(&e, record); err != nil {
		e = Entry{Index: e.Index, Hash: e.Hash, Kind: KindUnknown, Problem: err.Error()}
	}
	return e
}

func describe(e *Entry, record []byte) error {
	rev, revErr := translog.ParseRevocationRecord(record)
	if revErr == nil {
		e.Kind, e.Version, e.Time = KindRevocation, rev.Version, rev.Time
		return nil
	}
	r, relErr := release.Inspect(record)
	if relErr == nil {
		e.Kind, e.Version, e.Base, e.NotAfter = KindRelease, r.Version, r.Base, r.NotAfter
		return nil
	}
	if !wrongType(relErr) {
		return fmt.Errorf("neither a revocation record (%v) nor a release envelope (%v)", revErr, relErr)
	}
	d, ksErr := release.InspectKeySet(record)
	if ksErr != nil {
		if wrongType(ksErr) {
			return fmt.Errorf("an envelope of neither a release nor a key set: %v", ksErr)
		}
		return ksErr
	}
	e.Kind, e.Version, e.Expires, e.Threshold, e.Log = KindKeySet, fmt.Sprint(d.Version), d.Expires, d.Threshold, d.Log
	for _, k := range d.Keys {
		e.Keys = append(e.Keys, release.KeyID(k))
	}
	return nil
}

// wrongType reports whether err says the envelope decoded but is of
// another payload type.
func wrongType(err error) bool {
	var ve *release.VerifyError
	return errors.As(err, &ve) && ve.Reason == release.ReasonWrongType
}
