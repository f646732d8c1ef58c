package release

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"nodehotfix/internal/jsonobj"
)

// Limits of key sets and key-set documents.
const (
	// MaxChain is the most key-set documents Walk applies at once: a node
	// baked with version v accepts up to version v+MaxChain.
	MaxChain = 16
	// MaxKeySetEnvelopeSize caps a key-set envelope; a real one is about
	// 1.5 KiB, and a node may be served MaxChain of them.
	MaxKeySetEnvelopeSize = 16 << 10
	// MaxKeySetVersion is the highest key-set version: exact in every JSON
	// reader (2^53).
	MaxKeySetVersion = 1 << 53
	// maxDocumentKeys bounds the keys of a signed key-set document.
	maxDocumentKeys = 16
	// maxWitnesses bounds a log policy's witnesses.
	maxWitnesses = 16
	// maxVerifierKeyLength bounds a log or witness verifier key's text.
	maxVerifierKeyLength = 512
	// DefaultMaxCheckpointAge is a log policy's MaxCheckpointAge when its
	// document leaves it unset.
	DefaultMaxCheckpointAge = 24 * time.Hour
	// maxCheckpointAgeLimit bounds MaxCheckpointAge: a checkpoint older
	// than a year protects nothing.
	maxCheckpointAgeLimit = 366 * 24 * time.Hour
)

// Wire constants of key-set envelopes and payloads.
const (
	keySetPayloadType = "application/vnd.nodehotfix.keyset.v1+json"
	keySetType        = "nodehotfix-keyset"

	keyExpires   = "expires"
	keyThreshold = "threshold"
	keyKeys      = "keys"
	keyLog       = "log"

	keyLogKey    = "key"
	keyWitnesses = "witnesses"
	keyQuorum    = "quorum"
	keyMaxAge    = "max_checkpoint_age_seconds"
	keyRequired  = "required"
)

// LogPolicy is what a key set requires of the transparency log. Key and
// Witnesses are C2SP signed-note verifier keys as text
// ("name+hash+base64"); this package only checks their shape, and
// internal/translog parses them.
type LogPolicy struct {
	// Key is the log's verifier key; "" means no log policy, and then
	// every other field is zero.
	Key string
	// Witnesses are the witnesses' verifier keys, distinct, at most 16.
	Witnesses []string
	// Quorum is how many distinct witnesses must cosign a checkpoint, 0 to
	// len(Witnesses); 0 requires none.
	Quorum int
	// MaxCheckpointAge is how old the Quorum-th newest cosignature may be:
	// whole seconds, at most 366 days. Zero with a Key means
	// DefaultMaxCheckpointAge; a KeySet's Log always has it set.
	MaxCheckpointAge time.Duration
	// Required makes nodes refuse a release that is not in the log.
	Required bool
}

// withDefaults fills MaxCheckpointAge when p has a log key.
func (p LogPolicy) withDefaults() LogPolicy {
	if p.Key != "" && p.MaxCheckpointAge == 0 {
		p.MaxCheckpointAge = DefaultMaxCheckpointAge
	}
	return p
}

func (p LogPolicy) validate() error {
	if p.Key == "" {
		if len(p.Witnesses) > 0 || p.Quorum != 0 || p.MaxCheckpointAge != 0 || p.Required {
			return errors.New("log policy without a log key")
		}
		return nil
	}
	if err := checkVerifierKey(p.Key); err != nil {
		return fmt.Errorf("log key: %w", err)
	}
	if len(p.Witnesses) > maxWitnesses {
		return fmt.Errorf("%d witnesses, at most %d", len(p.Witnesses), maxWitnesses)
	}
	for i, w := range p.Witnesses {
		if err := checkVerifierKey(w); err != nil {
			return fmt.Errorf("witness %d: %w", i+1, err)
		}
		if w == p.Key || slices.Contains(p.Witnesses[:i], w) {
			return fmt.Errorf("witness %d: %q given twice", i+1, w)
		}
	}
	if p.Quorum < 0 || p.Quorum > len(p.Witnesses) {
		return fmt.Errorf("witness quorum %d: want 0 to the %d witnesses", p.Quorum, len(p.Witnesses))
	}
	switch age := p.MaxCheckpointAge; {
	case age < 0, age > maxCheckpointAgeLimit, age%time.Second != 0:
		return fmt.Errorf("max checkpoint age %s: want whole seconds, at most %s", age, maxCheckpointAgeLimit)
	}
	return nil
}

// checkVerifierKey checks the shape of a note verifier key: one token of
// printable ASCII, at most maxVerifierKeyLength bytes.
func checkVerifierKey(s string) error {
	if s == "" || len(s) > maxVerifierKeyLength {
		return fmt.Errorf("%d bytes, want 1 to %d", len(s), maxVerifierKeyLength)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("byte 0x%02x at offset %d: want one token of printable ASCII", s[i], i)
		}
	}
	return nil
}

// KeySetDocument is the content of a key set: of a baked key set file, or
// of a signed key-set document (a link of the chain that rotates keys).
type KeySetDocument struct {
	// Version numbers key sets, 1 to MaxKeySetVersion; a link's is one
	// above the set it replaces.
	Version int64
	// Expires is when a signed document stops being accepted as the newest
	// link; zero for a baked set, which does not expire.
	Expires time.Time
	// Threshold is how many distinct keys of Keys must sign a document, 1
	// to len(Keys) and at most 8.
	Threshold int
	// Keys are the trusted public keys, distinct.
	Keys []ed25519.PublicKey
	// Log is the log policy; a zero one is none.
	Log LogPolicy
}

// KeySet validates d and returns its key set: Version in range, Keys
// non-empty, distinct and canonical, Threshold within them, a valid
// LogPolicy (whose MaxCheckpointAge defaults to DefaultMaxCheckpointAge).
// Expires may be zero. The keys are copied.
func (d KeySetDocument) KeySet() (KeySet, error) {
	if err := d.validate(); err != nil {
		return KeySet{}, fmt.Errorf("validate key set: %w", err)
	}
	return newKeySet(d), nil
}

func (d KeySetDocument) validate() error {
	if d.Version < 1 || d.Version > MaxKeySetVersion {
		return fmt.Errorf("version %d: want 1 to %d", d.Version, int64(MaxKeySetVersion))
	}
	if len(d.Keys) == 0 {
		return errors.New("no keys")
	}
	seen := make(map[string]bool)
	for i, k := range d.Keys {
		if err := checkPublicKey(k); err != nil {
			return fmt.Errorf("key %d: %w", i+1, err)
		}
		// A key listed twice would let one holder meet a threshold of two
		// (go-tuf #733); never resolve it, refuse it.
		if seen[string(k)] {
			return fmt.Errorf("key %d (%s) is listed twice", i+1, KeyID(k))
		}
		seen[string(k)] = true
	}
	if d.Threshold < 1 || d.Threshold > min(len(d.Keys), maxSignatures) {
		return fmt.Errorf("threshold %d: want 1 to %d (the %d distinct keys, at most %d)", d.Threshold, min(len(d.Keys), maxSignatures), len(d.Keys), maxSignatures)
	}
	return d.Log.withDefaults().validate()
}

// validateSigned adds what only a signed document needs.
func (d KeySetDocument) validateSigned() error {
	if err := d.validate(); err != nil {
		return err
	}
	switch {
	case d.Version < 2:
		return fmt.Errorf("version %d: a signed key set follows the baked version 1, so it is 2 or more", d.Version)
	case d.Expires.IsZero():
		return errors.New("expires is not set")
	case len(d.Keys) > maxDocumentKeys:
		return fmt.Errorf("%d keys, at most %d", len(d.Keys), maxDocumentKeys)
	}
	return nil
}

type wireKeySetPayload struct {
	Schema    int            `json:"schema"`
	Type      string         `json:"type"`
	Version   int64          `json:"version"`
	Expires   string         `json:"expires"`
	Threshold int            `json:"threshold"`
	Keys      []string       `json:"keys"`
	Log       *wireLogPolicy `json:"log,omitempty"`
}

// wireLogPolicy always carries every member, so a policy has one encoding.
type wireLogPolicy struct {
	Key       string   `json:"key"`
	Witnesses []string `json:"witnesses"`
	Quorum    int      `json:"quorum"`
	MaxAge    int64    `json:"max_checkpoint_age_seconds"`
	Required  bool     `json:"required"`
}

// SignKeySet validates d as a signed key-set document (as KeySet does, and
// Version at least 2, Expires set, at most 16 keys) and returns an envelope
// holding one signature by priv. priv need not be one of d's keys: a link
// is signed by the threshold of the set before it and of its own. Expires
// is encoded in UTC truncated to the second. Co-sign with AddSignature.
func SignKeySet(d KeySetDocument, priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign key set: private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	d.Log = d.Log.withDefaults()
	if err := d.validateSigned(); err != nil {
		return nil, fmt.Errorf("sign key set: %w", err)
	}
	w := wireKeySetPayload{
		Schema: schemaVersion, Type: keySetType, Version: d.Version,
		Expires: formatNotAfter(d.Expires), Threshold: d.Threshold, Keys: []string{},
	}
	for _, k := range d.Keys {
		w.Keys = append(w.Keys, base64.StdEncoding.EncodeToString(k))
	}
	if d.Log.Key != "" {
		w.Log = &wireLogPolicy{Key: d.Log.Key, Witnesses: append([]string{}, d.Log.Witnesses...), Quorum: d.Log.Quorum,
			MaxAge: int64(d.Log.MaxCheckpointAge / time.Second), Required: d.Log.Required}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, fmt.Errorf("sign key set: encode payload: %w", err)
	}
	payload := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if _, err := parseKeySetDocument(payload); err != nil {
		return nil, fmt.Errorf("sign key set: encoded payload: %w", err)
	}
	env := envelope{payloadType: keySetPayloadType, payload: payload}
	env.sigs = append(env.sigs, signPayload(env.payloadType, payload, priv))
	out, err := encodeEnvelope(env, MaxKeySetEnvelopeSize)
	if err != nil {
		return nil, fmt.Errorf("sign key set: %w", err)
	}
	return out, nil
}

// InspectKeySet decodes a key-set envelope WITHOUT checking any signature,
// version or expiry: the result is UNVERIFIED and must never decide which
// keys a node trusts. It is for the service and operator tools. It applies
// every other check of Next, and its errors are *VerifyError.
func InspectKeySet(envelope []byte) (KeySetDocument, error) {
	env, err := parseEnvelopeOf(envelope, keySetPayloadType)
	if err != nil {
		return KeySetDocument{}, keySetErr(err)
	}
	d, err := parseKeySetDocument(env.payload)
	return d, keySetErr(err)
}

// parseKeySetDocument decodes and validates a key-set payload. Errors are
// *VerifyError with ReasonMalformed, ReasonWrongType or ReasonInvalid.
func parseKeySetDocument(data []byte) (KeySetDocument, error) {
	fields, err := payloadFields(data, keySetType)
	if err != nil {
		return KeySetDocument{}, err
	}
	d, err := decodeKeySetDocument(fields)
	if err != nil {
		return KeySetDocument{}, verifyErr(ReasonMalformed, fmt.Errorf("decode payload: %w", err))
	}
	if err := d.validateSigned(); err != nil {
		return KeySetDocument{}, verifyErr(ReasonInvalid, err)
	}
	return d, nil
}

func decodeKeySetDocument(fields []jsonobj.Member) (KeySetDocument, error) {
	keys := []string{keySchema, keyType, keyVersion, keyExpires, keyThreshold, keyKeys}
	if slices.ContainsFunc(fields, func(f jsonobj.Member) bool { return f.Key == keyLog }) {
		keys = append(keys, keyLog)
	}
	m, err := requireKeys(fields, keys...)
	if err != nil {
		return KeySetDocument{}, err
	}
	var d KeySetDocument
	var expires string
	var rawKeys []string
	if err := cmp.Or(
		// encoding/json refuses 3.0 and 3e0 for integers.
		decodeValue(m, keyVersion, &d.Version),
		decodeValue(m, keyExpires, &expires),
		decodeValue(m, keyThreshold, &d.Threshold),
		decodeValue(m, keyKeys, &rawKeys),
	); err != nil {
		return KeySetDocument{}, err
	}
	if d.Expires, err = parseTime(keyExpires, expires); err != nil {
		return KeySetDocument{}, err
	}
	if len(rawKeys) > maxDocumentKeys {
		return KeySetDocument{}, fmt.Errorf("key %q: %d keys, at most %d", keyKeys, len(rawKeys), maxDocumentKeys)
	}
	for i, enc := range rawKeys {
		k, err := decodeBase64(enc)
		if err != nil {
			return KeySetDocument{}, fmt.Errorf("key %q: key %d: %w", keyKeys, i+1, err)
		}
		if len(k) != ed25519.PublicKeySize {
			return KeySetDocument{}, fmt.Errorf("key %q: key %d is %d bytes, want %d", keyKeys, i+1, len(k), ed25519.PublicKeySize)
		}
		d.Keys = append(d.Keys, k)
	}
	if raw, ok := m[keyLog]; ok {
		if d.Log, err = decodeLogPolicy(raw); err != nil {
			return KeySetDocument{}, fmt.Errorf("key %q: %w", keyLog, err)
		}
	}
	return d, nil
}

func decodeLogPolicy(data []byte) (LogPolicy, error) {
	m, err := exactFields(data, keyLogKey, keyWitnesses, keyQuorum, keyMaxAge, keyRequired)
	if err != nil {
		return LogPolicy{}, err
	}
	var p LogPolicy
	var age int64
	if err := cmp.Or(
		decodeValue(m, keyLogKey, &p.Key),
		decodeValue(m, keyWitnesses, &p.Witnesses),
		decodeValue(m, keyQuorum, &p.Quorum),
		decodeValue(m, keyMaxAge, &age),
		decodeValue(m, keyRequired, &p.Required),
	); err != nil {
		return LogPolicy{}, err
	}
	if len(p.Witnesses) == 0 {
		p.Witnesses = nil
	}
	// A document states its age; only the baked file has a default.
	if p.Key == "" || age < 1 || age > int64(maxCheckpointAgeLimit/time.Second) {
		return LogPolicy{}, fmt.Errorf("key %q %q, %q %d: want a log key and 1 to %d seconds", keyLogKey, p.Key, keyMaxAge, age, int64(maxCheckpointAgeLimit/time.Second))
	}
	p.MaxCheckpointAge = time.Duration(age) * time.Second
	return p, nil
}

// keySetErr marks a *VerifyError as a key set's, for its message.
func keySetErr(err error) error {
	var ve *VerifyError
	if errors.As(err, &ve) {
		ve.doc = "key set"
	}
	return err
}

// Next verifies envelope as the key-set document that follows ks and
// returns the set it declares. In order it requires: a strictly decoded
// key-set envelope of at most MaxKeySetEnvelopeSize bytes; valid
// signatures by ks.Threshold() distinct keys of ks; a valid payload
// (KeySetDocument) decoded from exactly those bytes; version
// ks.Version()+1, never lower or equal (ReasonRollback) nor higher
// (ReasonVersionGap); valid signatures by the new set's own threshold of
// its own keys; and now before its expiry. A key in both sets counts
// towards both thresholds.
//
// now should be the caller's fixed start time; a zero now is rejected as
// ReasonExpired. Next does not remember versions across calls: refusing a
// set older than one verified on an earlier boot is the caller's job.
// Every error is a *VerifyError. Next is safe for concurrent use.
func (ks KeySet) Next(envelope []byte, now time.Time) (KeySet, error) {
	if now.IsZero() {
		return KeySet{}, keySetErr(verifyErr(ReasonExpired, errors.New("no current time to check expiry against")))
	}
	next, err := ks.next(envelope)
	if err != nil {
		return KeySet{}, err
	}
	if err := checkExpires(next, now); err != nil {
		return KeySet{}, err
	}
	return next, nil
}

// next is Next without the expiry check.
func (ks KeySet) next(data []byte) (KeySet, error) {
	env, err := parseEnvelopeOf(data, keySetPayloadType)
	if err != nil {
		return KeySet{}, keySetErr(err)
	}
	env.proven = map[string]bool{} // a key in both sets is checked once
	if err := ks.verifySignatures(env, fmt.Sprintf("keys of version %d", ks.Version())); err != nil {
		return KeySet{}, keySetErr(err)
	}
	d, err := parseKeySetDocument(env.payload)
	if err != nil {
		return KeySet{}, keySetErr(err)
	}
	switch want := ks.Version() + 1; {
	case d.Version < want:
		return KeySet{}, keySetErr(verifyErr(ReasonRollback, fmt.Errorf("version %d does not follow version %d: want %d", d.Version, ks.Version(), want)))
	case d.Version > want:
		return KeySet{}, keySetErr(verifyErr(ReasonVersionGap, fmt.Errorf("version %d skips versions after %d: want %d", d.Version, ks.Version(), want)))
	}
	next := newKeySet(d)
	if err := next.verifySignatures(env, fmt.Sprintf("own keys of version %d", next.Version())); err != nil {
		return KeySet{}, keySetErr(err)
	}
	return next, nil
}

func checkExpires(ks KeySet, now time.Time) error {
	if !now.Before(ks.expires) {
		return keySetErr(verifyErr(ReasonExpired, fmt.Errorf("version %d expired at %s, now is %s", ks.Version(), formatNotAfter(ks.expires), now.UTC().Format(time.RFC3339))))
	}
	return nil
}

// ChainError is the error Walk returns: which link failed and why.
type ChainError struct {
	// Link is the index of the failing link in Walk's links, from 0.
	Link int
	// Version is the version the link declares, 0 if it does not decode;
	// Want the version it had to be.
	Version, Want int64
	// Reason is Err's.
	Reason Reason
	// Err is the *VerifyError of the link.
	Err error
}

// Error returns "walk key sets: link <i> (version <v>): <cause>".
func (e *ChainError) Error() string {
	return fmt.Sprintf("walk key sets: link %d (version %d, want %d): %v", e.Link, e.Version, e.Want, e.Err)
}

// Unwrap returns the link's *VerifyError.
func (e *ChainError) Unwrap() error { return e.Err }

// Walk applies links in order from ks, each verified by Next against the
// set before it, and returns the newest set. Only the last link's expiry
// is checked against now: an older link may have expired since it was
// signed (as TUF roots may), what matters is that the set in use has not.
// No links return ks itself. More than MaxChain links is refused whole
// (ReasonChainTooLong). Every error is a *ChainError wrapping a
// *VerifyError. Walk is safe for concurrent use.
func (ks KeySet) Walk(links [][]byte, now time.Time) (KeySet, error) {
	if len(links) == 0 {
		return ks, nil
	}
	if len(links) > MaxChain {
		return KeySet{}, &ChainError{Link: MaxChain, Want: ks.Version() + MaxChain + 1, Reason: ReasonChainTooLong,
			Err: keySetErr(verifyErr(ReasonChainTooLong, fmt.Errorf("%d links, at most %d", len(links), MaxChain)))}
	}
	fail := func(i int, want int64, err error) (KeySet, error) {
		var ve *VerifyError
		errors.As(err, &ve)
		ce := &ChainError{Link: i, Want: want, Reason: ve.Reason, Err: err}
		if d, derr := InspectKeySet(links[i]); derr == nil {
			ce.Version = d.Version
		}
		return KeySet{}, ce
	}
	if now.IsZero() {
		return fail(len(links)-1, ks.Version()+int64(len(links)), keySetErr(verifyErr(ReasonExpired, errors.New("no current time to check expiry against"))))
	}
	cur := ks
	for i, l := range links {
		next, err := cur.next(l)
		if err != nil {
			return fail(i, cur.Version()+1, err)
		}
		cur = next
	}
	if err := checkExpires(cur, now); err != nil {
		return fail(len(links)-1, cur.Version(), err)
	}
	return cur, nil
}
