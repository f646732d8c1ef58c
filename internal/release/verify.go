package release

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// MaxEnvelopeSize caps a signed release envelope. Real ones are well under
// 4 KiB; the cap bounds decoding work on hostile input.
const MaxEnvelopeSize = 16 << 10

// threshold is how many distinct trusted public keys must have signed.
// Signatures are counted per public key, never per key ID (go-tuf #369, #733),
// so raising it cannot be defeated by one key listed twice.
const threshold = 1

// Reason classifies why an envelope was rejected. The values are stable,
// short and safe to put in telemetry.
type Reason string

// Reasons of a VerifyError.
const (
	// ReasonMalformed: too large, not strict JSON, bad base64, unknown,
	// missing or duplicate keys, or a wrong number of signatures.
	ReasonMalformed Reason = "malformed"
	// ReasonWrongType: the envelope or payload is another kind of document
	// (payloadType, type or schema).
	ReasonWrongType Reason = "wrong-type"
	// ReasonUntrusted: no signature names a key of the KeySet.
	ReasonUntrusted Reason = "untrusted"
	// ReasonBadSignature: a signature names a trusted key but does not
	// verify: tampering, or a signature over other bytes.
	ReasonBadSignature Reason = "bad-signature"
	// ReasonInvalid: signed, but the release fails Validate.
	ReasonInvalid Reason = "invalid"
	// ReasonExpired: signed and valid, but now is not before not_after.
	ReasonExpired Reason = "expired"
)

// VerifyError is the error Verify and Inspect return for every rejected
// envelope. Callers branch on Reason with errors.As.
type VerifyError struct {
	Reason Reason
	Err    error
}

func verifyErr(r Reason, err error) *VerifyError { return &VerifyError{Reason: r, Err: err} }

// Error returns "verify release: <reason>: <detail>".
func (e *VerifyError) Error() string {
	if e.Err == nil {
		return "verify release: " + string(e.Reason)
	}
	return fmt.Sprintf("verify release: %s: %v", e.Reason, e.Err)
}

// Unwrap returns the underlying error.
func (e *VerifyError) Unwrap() error { return e.Err }

// Verify checks a signed release envelope and returns the release it signs.
// In order it requires: at most MaxEnvelopeSize bytes; a strictly decoded
// envelope of the release payload type; a valid signature over the payload's
// pre-authentication encoding by at least one key in ks; a payload of type
// "nodehotfix-release", schema 1, decoded strictly from exactly the verified
// bytes; a release that passes Validate; and now before its NotAfter.
//
// now should be the caller's fixed start time, so a release valid at the
// start of a run stays valid throughout it; a zero now is rejected as
// ReasonExpired. Verify does not check that the release is the version the
// caller wants: call Matches.
//
// Every error is a *VerifyError. Verify is safe for concurrent use.
func (ks KeySet) Verify(envelope []byte, now time.Time) (Release, error) {
	if now.IsZero() {
		return Release{}, verifyErr(ReasonExpired, errors.New("no current time to check expiry against"))
	}
	env, err := parseEnvelope(envelope)
	if err != nil {
		return Release{}, err
	}
	if err := ks.verifySignatures(env); err != nil {
		return Release{}, err
	}
	r, err := parseRelease(env.payload)
	if err != nil {
		return Release{}, err
	}
	if !now.Before(r.NotAfter) {
		return Release{}, verifyErr(ReasonExpired, fmt.Errorf("not_after %s is not after %s", formatNotAfter(r.NotAfter), now.UTC().Format(time.RFC3339)))
	}
	return r, nil
}

// verifySignatures checks env's signatures over its own payload type, which
// parseEnvelopeOf has already pinned to the one the caller expects.
func (ks KeySet) verifySignatures(env envelope) error {
	msg := pae(env.payloadType, env.payload)
	verified := make(map[string]bool)
	named := false
	for _, s := range env.sigs {
		// The ID only narrows which keys to try; trust comes from the key.
		for _, pub := range ks.byID[s.keyID] {
			named = true
			if !verified[string(pub)] && ed25519.Verify(pub, msg, s.sig) {
				verified[string(pub)] = true
			}
		}
		if len(verified) >= threshold {
			return nil
		}
	}
	if !named {
		ids := make([]string, len(env.sigs))
		for i, s := range env.sigs {
			ids[i] = s.keyID
		}
		return verifyErr(ReasonUntrusted, fmt.Errorf("no signature by a trusted key (signed by %v, trusted %v)", ids, ks.KeyIDs()))
	}
	return verifyErr(ReasonBadSignature, errors.New("no trusted key's signature verifies"))
}

// Inspect decodes an envelope and returns its release WITHOUT checking any
// signature or expiry: the result is UNVERIFIED and must never decide what a
// node runs. It is for the service and operator tools, which list and route
// releases they do not hold keys for. It applies every other check of Verify,
// and its errors are *VerifyError.
func Inspect(envelope []byte) (Release, error) {
	env, err := parseEnvelope(envelope)
	if err != nil {
		return Release{}, err
	}
	return parseRelease(env.payload)
}
