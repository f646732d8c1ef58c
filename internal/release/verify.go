package release

import (
	"cmp"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxEnvelopeSize caps a signed release envelope. Real ones are well under
// 4 KiB; the cap bounds decoding work on hostile input.
const MaxEnvelopeSize = 16 << 10

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
	// ReasonBadSignature: signatures name trusted keys but none of them
	// verifies: tampering, or a signature over other bytes.
	ReasonBadSignature Reason = "bad-signature"
	// ReasonBelowThreshold: trusted keys' signatures verify, but by fewer
	// distinct keys than the key set's threshold.
	ReasonBelowThreshold Reason = "below-threshold"
	// ReasonInvalid: signed, but the release fails Validate.
	ReasonInvalid Reason = "invalid"
	// ReasonExpired: signed and valid, but now is not before not_after
	// (a key-set document: its expires).
	ReasonExpired Reason = "expired"
	// ReasonRollback: a key-set document whose version is not above the
	// version of the set it would replace.
	ReasonRollback Reason = "rollback"
	// ReasonVersionGap: a key-set document more than one version above the
	// set it would replace.
	ReasonVersionGap Reason = "version-gap"
	// ReasonChainTooLong: more than MaxChain key-set documents to walk.
	ReasonChainTooLong Reason = "chain-too-long"
)

// VerifyError is the error Verify, VerifyComponent, Next and the Inspect
// functions return for every rejected envelope. Callers branch on Reason
// with errors.As.
type VerifyError struct {
	Reason Reason
	Err    error
	// Signers and Missing are set when too few signatures verify
	// (ReasonUntrusted, ReasonBadSignature, ReasonBelowThreshold): the IDs
	// of the trusted keys whose signature verifies, in the key set's
	// order, and how many more distinct keys must sign.
	Signers []string
	Missing int

	// doc names the document in Error; "" is a release.
	doc string
}

func verifyErr(r Reason, err error) *VerifyError { return &VerifyError{Reason: r, Err: err} }

// Error returns "verify release: <reason>: <detail>" ("verify key set: …"
// for a key-set document).
func (e *VerifyError) Error() string {
	doc := cmp.Or(e.doc, "release")
	if e.Err == nil {
		return "verify " + doc + ": " + string(e.Reason)
	}
	return fmt.Sprintf("verify %s: %s: %v", doc, e.Reason, e.Err)
}

// Unwrap returns the underlying error.
func (e *VerifyError) Unwrap() error { return e.Err }

// Verify checks a signed release envelope and returns the release it signs.
// In order it requires: at most MaxEnvelopeSize bytes; a strictly decoded
// envelope of the release payload type; valid signatures over the payload's
// pre-authentication encoding by ks.Threshold() distinct keys of ks (a key
// counts once, however many signatures name it); a payload of type
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
	if err := ks.verifySignatures(env, "trusted keys"); err != nil {
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

// verifySignatures requires ks.Threshold() distinct keys of ks to have
// signed env over its own payload type, which parseEnvelopeOf has already
// pinned to the one the caller expects. whose names ks's keys in messages
// ("trusted keys").
func (ks KeySet) verifySignatures(env envelope, whose string) error {
	k := ks.Threshold()
	got, named := ks.verified(env, k)
	if len(got) >= k {
		return nil
	}
	e := &VerifyError{Signers: keyIDs(got), Missing: k - len(got)}
	switch {
	case !named:
		ids := make([]string, len(env.sigs))
		for i, s := range env.sigs {
			ids[i] = s.keyID
		}
		e.Reason, e.Err = ReasonUntrusted, fmt.Errorf("no signature by one of the %s (signed by %v, trusted %v)", whose, ids, ks.KeyIDs())
	case len(got) == 0:
		e.Reason, e.Err = ReasonBadSignature, fmt.Errorf("no signature by the %s verifies", whose)
	default:
		e.Reason, e.Err = ReasonBelowThreshold, fmt.Errorf("signed by %d of the %d distinct %s required (verified: %s); %d more needed",
			len(got), k, whose, strings.Join(e.Signers, ", "), e.Missing)
	}
	return e
}

// verified returns the keys of ks whose signature over env verifies, in
// ks's order, stopping once it has enough (0: all), and whether any
// signature named a key of ks. Each key is checked at most once, so
// repeated signatures cost nothing and count once.
func (ks KeySet) verified(env envelope, enough int) (keys []ed25519.PublicKey, named bool) {
	msg := pae(env.payloadType, env.payload)
	ok := make(map[string]bool)
	for _, s := range env.sigs {
		// The ID only narrows which keys to try; trust comes from the key.
		for _, pub := range ks.byID[s.keyID] {
			named = true
			if !ok[string(pub)] && env.verify(pub, msg, s.sig) {
				ok[string(pub)] = true
			}
		}
		if enough > 0 && len(ok) >= enough {
			break
		}
	}
	for _, pub := range ks.keys {
		if ok[string(pub)] {
			keys = append(keys, pub)
		}
	}
	return keys, named
}

// verify checks sig by pub over msg, once per pair when env remembers.
func (env envelope) verify(pub ed25519.PublicKey, msg, sig []byte) bool {
	if env.proven == nil {
		return ed25519.Verify(pub, msg, sig)
	}
	k := string(pub) + string(sig)
	if good, seen := env.proven[k]; seen {
		return good
	}
	good := ed25519.Verify(pub, msg, sig)
	env.proven[k] = good
	return good
}

func keyIDs(keys []ed25519.PublicKey) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = KeyID(k)
	}
	return ids
}

// Signers returns the IDs of the keys of ks whose signature over envelope
// verifies, in ks's order, whatever the threshold: who has signed so far.
// envelope may be a release, component configuration or key-set envelope;
// its payload is not decoded. Errors are *VerifyError: ReasonMalformed for
// an envelope that does not decode or is over its type's size limit,
// ReasonWrongType for another payload type.
func (ks KeySet) Signers(envelope []byte) ([]string, error) {
	env, _, err := parseAnyEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	keys, _ := ks.verified(env, 0)
	return keyIDs(keys), nil
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
