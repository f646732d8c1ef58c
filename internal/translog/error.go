package translog

import "fmt"

// Reason classifies why a checkpoint, proof or record was rejected. The
// values are stable, short and safe to put in telemetry.
type Reason string

// Reasons of a VerifyError.
const (
	// ReasonMalformed: too large, or not exactly the format (checkpoint,
	// signed note, key, bundle or record).
	ReasonMalformed Reason = "malformed"
	// ReasonPolicy: the Policy itself is unusable (no log key, a quorum
	// above the number of distinct witnesses, two keys one signature line
	// could name).
	ReasonPolicy Reason = "policy"
	// ReasonUnsigned: no valid signature by the log key.
	ReasonUnsigned Reason = "unsigned"
	// ReasonBadSignature: a line names a trusted key (name and key hash)
	// but its signature does not verify.
	ReasonBadSignature Reason = "bad-signature"
	// ReasonOrigin: the checkpoint's origin is not the log key's name.
	ReasonOrigin Reason = "wrong-origin"
	// ReasonQuorum: fewer distinct witnesses cosigned than the quorum.
	ReasonQuorum Reason = "no-quorum"
	// ReasonStale: enough witnesses cosigned, but too few of them within
	// the maximum age (or no more than MaxClockSkew in the future).
	ReasonStale Reason = "stale"
	// ReasonNotIncluded: no proof for the record, or a proof that does not
	// lead to the checkpoint's root.
	ReasonNotIncluded Reason = "not-included"
	// ReasonInconsistent: two checkpoints of one log that no append-only
	// history explains: a fork, or a proof that does not verify.
	ReasonInconsistent Reason = "inconsistent"
	// ReasonRollback: a checkpoint smaller than one already seen.
	ReasonRollback Reason = "rollback"
)

// VerifyError is the error every verification in this package returns.
// Callers branch on Reason with errors.As.
type VerifyError struct {
	Reason Reason
	Err    error
}

func verifyErr(r Reason, err error) *VerifyError { return &VerifyError{Reason: r, Err: err} }

func verifyErrf(r Reason, format string, a ...any) *VerifyError {
	return &VerifyError{Reason: r, Err: fmt.Errorf(format, a...)}
}

// Error returns "translog: <reason>: <detail>".
func (e *VerifyError) Error() string {
	if e.Err == nil {
		return "translog: " + string(e.Reason)
	}
	return fmt.Sprintf("translog: %s: %v", e.Reason, e.Err)
}

// Unwrap returns the underlying error.
func (e *VerifyError) Unwrap() error { return e.Err }
