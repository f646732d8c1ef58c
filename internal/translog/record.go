package translog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// revocationType is the "type" of a revocation record.
const revocationType = "nodehotfix-revocation"

// maxVersionLen bounds a revoked version's text; real ones are short.
const maxVersionLen = 128

// RevocationRecord is the log record of a revocation: release Version is
// revoked as of Time. Its encoding is
// {"type":"nodehotfix-revocation","version":"…","time":"…Z"}, exactly.
type RevocationRecord struct {
	Version string
	Time    time.Time
}

type revocationJSON struct {
	Type    string `json:"type"`
	Version string `json:"version"`
	Time    string `json:"time"`
}

// Marshal returns the record's one encoding: the keys in that order, no
// white space, the time in RFC 3339 UTC with whole seconds (sub-second
// precision is dropped).
func (r RevocationRecord) Marshal() ([]byte, error) {
	if r.Version == "" || len(r.Version) > maxVersionLen || !validText(r.Version) {
		return nil, fmt.Errorf("revocation record: version %q: want 1 to %d printable bytes", r.Version, maxVersionLen)
	}
	if r.Time.IsZero() {
		return nil, fmt.Errorf("revocation record of %q: no time", r.Version)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(revocationJSON{revocationType, r.Version, r.Time.UTC().Format(time.RFC3339)}); err != nil {
		return nil, fmt.Errorf("revocation record of %q: %w", r.Version, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ParseRevocationRecord decodes a record that must be exactly what Marshal
// writes: anything else (another type, white space, key order, escapes,
// extra or duplicate keys) is a different leaf and refused, so one
// revocation has one leaf hash. Errors are *VerifyError with
// ReasonMalformed.
func ParseRevocationRecord(data []byte) (RevocationRecord, error) {
	r, err := parseRevocation(data)
	if err != nil {
		return RevocationRecord{}, verifyErr(ReasonMalformed, fmt.Errorf("revocation record: %w", err))
	}
	return r, nil
}

func parseRevocation(data []byte) (RevocationRecord, error) {
	if len(data) > 1<<10 {
		return RevocationRecord{}, fmt.Errorf("%d bytes, limit 1024", len(data))
	}
	var j revocationJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return RevocationRecord{}, err
	}
	if j.Type != revocationType {
		return RevocationRecord{}, fmt.Errorf("type %q, want %q", j.Type, revocationType)
	}
	t, err := time.Parse(time.RFC3339, j.Time)
	if err != nil {
		return RevocationRecord{}, fmt.Errorf("time: %w", err)
	}
	r := RevocationRecord{Version: j.Version, Time: t.UTC()}
	canon, err := r.Marshal()
	if err != nil {
		return RevocationRecord{}, err
	}
	if !bytes.Equal(canon, data) {
		return RevocationRecord{}, fmt.Errorf("not the canonical encoding %s", canon)
	}
	return r, nil
}

// LeafHash returns the RFC 6962 leaf hash of a record: the bytes of a
// release envelope, a key-set envelope or a revocation record, exactly.
func LeafHash(record []byte) tlog.Hash { return tlog.RecordHash(record) }
