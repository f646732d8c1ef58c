package tiles

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/release"
)

// Payload types and record types of the log's records (internal/release,
// internal/translog).
const (
	payloadRelease = "application/vnd.nodehotfix.release.v1+json"
	payloadKeySet  = "application/vnd.nodehotfix.keyset.v1+json"
	typeKeySet     = "nodehotfix-keyset"
	typeRevocation = "nodehotfix-revocation"
)

// Kind is what a log record is.
type Kind string

// Kinds of records.
const (
	KindRelease    Kind = "release"
	KindRevocation Kind = "revocation"
	KindKeySet     Kind = "keyset"
	// KindUnknown is a record none of the others decode: a monitor shows
	// it, since nothing should append one.
	KindUnknown Kind = "unknown"
)

// Entry describes one log record, decoded WITHOUT verifying any release
// signature: a monitor lists what the log holds, nodes decide what runs.
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
	// Signers are the key IDs that a release's or key set's signatures
	// name. They are claims: nothing here checks the signatures.
	Signers []string
	// Threshold and Keys (key IDs, release.KeyID) are a key set's.
	Threshold int
	Keys      []string
	// Problem says why a KindUnknown record did not decode.
	Problem string
}

// Describe decodes record, the log's record at index.
func Describe(index int64, record []byte) Entry {
	e := Entry{Index: index, Hash: tlog.RecordHash(record)}
	if err := describe(&e, record); err != nil {
		e = Entry{Index: e.Index, Hash: e.Hash, Kind: KindUnknown, Problem: err.Error()}
	}
	return e
}

// dsse is the part of a DSSE envelope Describe reads.
type dsse struct {
	PayloadType string `json:"payloadType"`
	Payload     []byte `json:"payload"`
	Signatures  []struct {
		KeyID string `json:"keyid"`
	} `json:"signatures"`
}

func describe(e *Entry, record []byte) error {
	var head struct {
		PayloadType *string `json:"payloadType"`
		Type        string  `json:"type"`
	}
	if err := json.Unmarshal(record, &head); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	switch {
	case head.PayloadType == nil && head.Type == typeRevocation:
		return describeRevocation(e, record)
	case head.PayloadType == nil:
		return fmt.Errorf("neither an envelope nor a revocation (type %q)", head.Type)
	}
	var env dsse
	if err := json.Unmarshal(record, &env); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	for _, s := range env.Signatures {
		e.Signers = append(e.Signers, s.KeyID)
	}
	switch env.PayloadType {
	case payloadRelease:
		r, err := release.Inspect(record)
		if err != nil {
			return err
		}
		e.Kind, e.Version, e.Base, e.NotAfter = KindRelease, r.Version, r.Base, r.NotAfter
		return nil
	case payloadKeySet:
		return describeKeySet(e, env.Payload)
	}
	return fmt.Errorf("envelope of payload type %q", env.PayloadType)
}

func describeRevocation(e *Entry, record []byte) error {
	var r struct {
		Type    string    `json:"type"`
		Version string    `json:"version"`
		Time    time.Time `json:"time"`
	}
	if err := strictJSON(record, &r); err != nil {
		return fmt.Errorf("revocation: %w", err)
	}
	if r.Version == "" {
		return fmt.Errorf("revocation: no version")
	}
	e.Kind, e.Version, e.Time = KindRevocation, r.Version, r.Time
	return nil
}

func describeKeySet(e *Entry, payload []byte) error {
	var k struct {
		Type      string          `json:"type"`
		Version   int64           `json:"version"`
		Expires   time.Time       `json:"expires"`
		Threshold int             `json:"threshold"`
		Keys      []string        `json:"keys"`
		Schema    int             `json:"schema"`
		Log       json.RawMessage `json:"log"`
	}
	if err := strictJSON(payload, &k); err != nil {
		return fmt.Errorf("key set: %w", err)
	}
	if k.Type != typeKeySet {
		return fmt.Errorf("key set payload of type %q", k.Type)
	}
	for i, s := range k.Keys {
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return fmt.Errorf("key set: key %d is not a base64 ed25519 key", i)
		}
		e.Keys = append(e.Keys, release.KeyID(raw))
	}
	e.Kind, e.Version, e.Expires, e.Threshold = KindKeySet, fmt.Sprint(k.Version), k.Expires, k.Threshold
	return nil
}

// strictJSON decodes one JSON object into v, refusing unknown keys and
// trailing data.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the object")
	}
	return nil
}
