package release

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/jsonobj"
)

// Wire constants of the envelope and payload (see the package doc).
const (
	payloadType   = "application/vnd.nodehotfix.release.v1+json"
	releaseType   = "nodehotfix-release"
	schemaVersion = 1
)

// LooksLikeRelease reports whether data names the release payload type:
// a cheap filter (no decoding) for scanning many records for the release
// envelopes among them; Inspect or Verify decide.
func LooksLikeRelease(data []byte) bool {
	return bytes.Contains(data, []byte(`"`+payloadType+`"`))
}

// maxSignatures bounds the signature checks one release or component
// envelope can cost a verifier, and so the highest threshold a key set can
// have.
const maxSignatures = 8

// maxKeySetSignatures bounds a key-set envelope's signatures: a link is
// signed by the thresholds of two sets, which may share no key.
const maxKeySetSignatures = 2 * maxSignatures

// Keys of the envelope and payload objects.
const (
	keyPayloadType = "payloadType"
	keyPayload     = "payload"
	keySignatures  = "signatures"
	keyKeyID       = "keyid"
	keySig         = "sig"

	keySchema    = "schema"
	keyType      = "type"
	keyBase      = "base"
	keyVersion   = "version"
	keyArtifacts = "artifacts"
	keyNotAfter  = "not_after"
	// keyLaunchRecords is the one optional key (Release.LaunchRecords).
	keyLaunchRecords = "launch_records"

	keyURL    = "url"
	keySHA256 = "sha256"
	keySize   = "size"
)

// envelope is a decoded but unverified envelope.
type envelope struct {
	payloadType string
	payload     []byte
	sigs        []signature
	// proven, when set, remembers the (key, signature) pairs that
	// verified, so a key-set link checked against two sets verifies a key
	// both hold once.
	proven map[string]bool
}

type signature struct {
	keyID string
	sig   []byte
}

// parseEnvelope decodes a release envelope strictly. Errors are
// *VerifyError with ReasonMalformed, or ReasonWrongType for another payload
// type.
func parseEnvelope(data []byte) (envelope, error) {
	return parseEnvelopeOf(data, payloadType)
}

// docKind is what differs between the three signed document types.
type docKind struct {
	name        string // in messages
	payloadType string
	limit       int // envelope size
	maxSigs     int
	// check decodes a payload strictly, as a verifier would.
	check func(payload []byte) error
}

// kindOf returns the document kind of payload type typ.
func kindOf(typ string) (docKind, bool) {
	switch typ {
	case payloadType:
		return docKind{"release", payloadType, MaxEnvelopeSize, maxSignatures,
			func(p []byte) error { _, err := parseRelease(p); return err }}, true
	case componentPayloadType:
		return docKind{"component config", componentPayloadType, MaxComponentEnvelopeSize, maxSignatures,
			func(p []byte) error { _, err := parseComponent(p); return err }}, true
	case keySetPayloadType:
		return docKind{"key set", keySetPayloadType, MaxKeySetEnvelopeSize, maxKeySetSignatures,
			func(p []byte) error { _, err := parseKeySetDocument(p); return err }}, true
	}
	return docKind{}, false
}

// maxAnyEnvelopeSize is the largest envelope of any kind.
const maxAnyEnvelopeSize = max(MaxEnvelopeSize, MaxComponentEnvelopeSize, MaxKeySetEnvelopeSize)

// parseEnvelopeOf decodes an envelope that must be of payload type typ,
// within that type's size and signature limits.
func parseEnvelopeOf(data []byte, typ string) (envelope, error) {
	k, _ := kindOf(typ)
	if len(data) > k.limit {
		return envelope{}, verifyErr(ReasonMalformed, fmt.Errorf("envelope is %d bytes, limit %d", len(data), k.limit))
	}
	env, err := decodeEnvelope(data)
	if err != nil {
		return envelope{}, verifyErr(ReasonMalformed, fmt.Errorf("decode envelope: %w", err))
	}
	if env.payloadType != typ {
		return envelope{}, verifyErr(ReasonWrongType, fmt.Errorf("payload type %q, want %q", env.payloadType, typ))
	}
	if len(env.sigs) > k.maxSigs {
		return envelope{}, verifyErr(ReasonMalformed, fmt.Errorf("decode envelope: %d signatures, want 1 to %d", len(env.sigs), k.maxSigs))
	}
	return env, nil
}

// parseAnyEnvelope decodes an envelope of any of the three document types,
// within its type's limits, and returns its kind.
func parseAnyEnvelope(data []byte) (envelope, docKind, error) {
	if len(data) > maxAnyEnvelopeSize {
		return envelope{}, docKind{}, verifyErr(ReasonMalformed, fmt.Errorf("envelope is %d bytes, limit %d", len(data), maxAnyEnvelopeSize))
	}
	env, err := decodeEnvelope(data)
	if err != nil {
		return envelope{}, docKind{}, verifyErr(ReasonMalformed, fmt.Errorf("decode envelope: %w", err))
	}
	k, ok := kindOf(env.payloadType)
	if !ok {
		return envelope{}, docKind{}, verifyErr(ReasonWrongType, fmt.Errorf("payload type %q is not a release, component config or key set", env.payloadType))
	}
	if len(data) > k.limit {
		return envelope{}, docKind{}, verifyErr(ReasonMalformed, fmt.Errorf("%s envelope is %d bytes, limit %d", k.name, len(data), k.limit))
	}
	if len(env.sigs) > k.maxSigs {
		return envelope{}, docKind{}, verifyErr(ReasonMalformed, fmt.Errorf("decode envelope: %d signatures, want 1 to %d", len(env.sigs), k.maxSigs))
	}
	return env, k, nil
}

func decodeEnvelope(data []byte) (envelope, error) {
	m, err := exactFields(data, keyPayloadType, keyPayload, keySignatures)
	if err != nil {
		return envelope{}, err
	}
	var env envelope
	var enc string
	var rawSigs []json.RawMessage
	if err := cmp.Or(
		decodeValue(m, keyPayloadType, &env.payloadType),
		decodeValue(m, keyPayload, &enc),
		decodeValue(m, keySignatures, &rawSigs),
	); err != nil {
		return envelope{}, err
	}
	if env.payload, err = decodeBase64(enc); err != nil {
		return envelope{}, fmt.Errorf("key %q: %w", keyPayload, err)
	}
	// The kind's own, lower limit is checked once the type is known.
	if len(rawSigs) == 0 || len(rawSigs) > maxKeySetSignatures {
		return envelope{}, fmt.Errorf("%d signatures, want 1 to %d", len(rawSigs), maxKeySetSignatures)
	}
	for i, raw := range rawSigs {
		s, err := decodeSignature(raw)
		if err != nil {
			return envelope{}, fmt.Errorf("signature %d: %w", i, err)
		}
		env.sigs = append(env.sigs, s)
	}
	return env, nil
}

func decodeSignature(data []byte) (signature, error) {
	m, err := exactFields(data, keyKeyID, keySig)
	if err != nil {
		return signature{}, err
	}
	var s signature
	var enc string
	if err := cmp.Or(decodeValue(m, keyKeyID, &s.keyID), decodeValue(m, keySig, &enc)); err != nil {
		return signature{}, err
	}
	// Only KeyID's own form is accepted, which also keeps error text built
	// from IDs short and printable.
	if len(s.keyID) != 16 || !isLowerHex(s.keyID) {
		return signature{}, fmt.Errorf("key id %q: want 16 lowercase hex digits", s.keyID)
	}
	if s.sig, err = decodeBase64(enc); err != nil {
		return signature{}, fmt.Errorf("key %q: %w", keySig, err)
	}
	return s, nil
}

// parseRelease decodes and validates a payload. Errors are *VerifyError with
// ReasonMalformed, ReasonWrongType (another document type or schema) or
// ReasonInvalid.
func parseRelease(data []byte) (Release, error) {
	fields, err := payloadFields(data, releaseType)
	if err != nil {
		return Release{}, err
	}
	r, err := decodeRelease(fields)
	if err != nil {
		return Release{}, verifyErr(ReasonMalformed, fmt.Errorf("decode payload: %w", err))
	}
	if err := r.Validate(); err != nil {
		return Release{}, verifyErr(ReasonInvalid, err)
	}
	return r, nil
}

// payloadFields returns the members of a payload of document type
// wantType: a *VerifyError with ReasonMalformed when data is not a JSON
// object, ReasonWrongType for another type or schema. The type is checked
// before the shape so that a signed document of another kind reports as
// such, not as a malformed one.
func payloadFields(data []byte, wantType string) ([]jsonobj.Member, error) {
	fields, err := jsonobj.Members(data)
	if err != nil {
		return nil, verifyErr(ReasonMalformed, fmt.Errorf("decode payload: %w", err))
	}
	m := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		m[f.Key] = f.Value
	}
	var typ string
	var schema int
	if err := cmp.Or(decodeValue(m, keyType, &typ), decodeValue(m, keySchema, &schema)); err != nil {
		return nil, verifyErr(ReasonWrongType, fmt.Errorf("decode payload: %w", err))
	}
	if typ != wantType || schema != schemaVersion {
		return nil, verifyErr(ReasonWrongType, fmt.Errorf("payload is type %q schema %d, want %q schema %d", typ, schema, wantType, schemaVersion))
	}
	return fields, nil
}

func decodeRelease(fields []jsonobj.Member) (Release, error) {
	var r Release
	if i := slices.IndexFunc(fields, func(f jsonobj.Member) bool { return f.Key == keyLaunchRecords }); i >= 0 {
		// Only true is ever signed: false would be two encodings of one
		// release.
		if string(bytes.TrimSpace(fields[i].Value)) != "true" {
			return Release{}, fmt.Errorf("key %q: %s, want true or no key", keyLaunchRecords, fields[i].Value)
		}
		r.LaunchRecords = true
		fields = slices.Delete(slices.Clone(fields), i, i+1)
	}
	m, err := requireKeys(fields, keySchema, keyType, keyBase, keyVersion, keyArtifacts, keyNotAfter)
	if err != nil {
		return Release{}, err
	}
	var notAfter string
	if err := cmp.Or(
		decodeValue(m, keyBase, &r.Base),
		decodeValue(m, keyVersion, &r.Version),
		decodeValue(m, keyNotAfter, &notAfter),
	); err != nil {
		return Release{}, err
	}
	if r.NotAfter, err = parseNotAfter(notAfter); err != nil {
		return Release{}, err
	}
	artifacts, err := jsonobj.Members(m[keyArtifacts])
	if err != nil {
		return Release{}, fmt.Errorf("key %q: %w", keyArtifacts, err)
	}
	r.Artifacts = make(map[string]Artifact, len(artifacts))
	for _, f := range artifacts {
		a, err := decodeArtifact(f.Value)
		if err != nil {
			return Release{}, fmt.Errorf("artifact %q: %w", f.Key, err)
		}
		r.Artifacts[f.Key] = a
	}
	return r, nil
}

func decodeArtifact(data []byte) (Artifact, error) {
	m, err := exactFields(data, keyURL, keySHA256, keySize)
	if err != nil {
		return Artifact{}, err
	}
	var a Artifact
	err = cmp.Or(
		decodeValue(m, keyURL, &a.URL),
		decodeValue(m, keySHA256, &a.SHA256),
		decodeValue(m, keySize, &a.Size),
	)
	return a, err
}

// parseNotAfter accepts only the one spelling formatNotAfter writes, so the
// signed text and the parsed instant cannot disagree between readers.
func parseNotAfter(s string) (time.Time, error) { return parseTime(keyNotAfter, s) }

// parseTime parses the signed time s of member key as parseNotAfter does.
func parseTime(key, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("key %q: %w", key, err)
	}
	t = t.UTC()
	if formatNotAfter(t) != s {
		return time.Time{}, fmt.Errorf("key %q: %q is not RFC 3339 UTC with whole seconds", key, s)
	}
	return t, nil
}

func formatNotAfter(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// decodeBase64 decodes padded standard base64, refusing the line breaks
// encoding/base64 would skip so each byte string has exactly one encoding.
func decodeBase64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("line break in base64")
	}
	return base64.StdEncoding.Strict().DecodeString(s)
}

// exactFields decodes a JSON object that must have exactly the given keys.
func exactFields(data []byte, keys ...string) (map[string]json.RawMessage, error) {
	fields, err := jsonobj.Members(data)
	if err != nil {
		return nil, err
	}
	return requireKeys(fields, keys...)
}

// requireKeys indexes fields by key, failing unless the keys are exactly the
// given ones. Keys match case-sensitively, unlike encoding/json.
func requireKeys(fields []jsonobj.Member, keys ...string) (map[string]json.RawMessage, error) {
	m := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if !slices.Contains(keys, f.Key) {
			return nil, fmt.Errorf("unknown key %q", f.Key)
		}
		m[f.Key] = f.Value
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("missing key %q", k)
		}
	}
	return m, nil
}

// decodeValue unmarshals m[key] into v. A missing key or a null is an error:
// encoding/json would silently leave v at its zero value.
func decodeValue(m map[string]json.RawMessage, key string, v any) error {
	raw, ok := m[key]
	if !ok {
		return fmt.Errorf("missing key %q", key)
	}
	if string(bytes.TrimSpace(raw)) == "null" {
		return fmt.Errorf("key %q: null", key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return nil
}
