// Package storecodec is the stored form of releases, audit entries,
// reports, component configurations, key sets and the transparency log
// that the durable backends (boltstore, etcdstore) share: JSON with a
// format version (log records: a version byte; log hashes: their 32
// bytes), a reader refusing any other version rather than misreading it.
// Signed envelopes and audit snapshots are kept as exact bytes beside the
// record, because encoding/json would compact them as RawMessage and nodes
// verify a signature over what is served.
package storecodec

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// version is written in every stored value.
const version = 1

type releaseRecord struct {
	V int `json:"v"`
	// Rev is the release's revision where the backend has no revision of
	// its own to give (bbolt); 0 and absent elsewhere.
	Rev      int64           `json:"rev,omitempty"`
	Release  rollout.Release `json:"release"` // Envelope moved out
	Envelope []byte          `json:"envelope"`
}

type auditRecord struct {
	V      int              `json:"v"`
	Entry  store.AuditEntry `json:"entry"` // Before and After moved out
	Before []byte           `json:"before"`
	After  []byte           `json:"after"`
}

type servedRecord struct {
	V      int          `json:"v"`
	Served store.Served `json:"served"`
}

type reportRecord struct {
	V      int          `json:"v"`
	Report store.Report `json:"report"`
}

// EncodeRelease returns the stored form of r at revision rev (0: none).
func EncodeRelease(r rollout.Release, rev int64) ([]byte, error) {
	rec := releaseRecord{V: version, Rev: rev, Release: r, Envelope: r.Envelope}
	rec.Release.Envelope = nil
	return json.Marshal(rec)
}

// DecodeRelease reads what EncodeRelease wrote.
func DecodeRelease(v []byte) (rollout.Release, int64, error) {
	var rec releaseRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return rollout.Release{}, 0, fmt.Errorf("decode release record: %w", err)
	}
	if rec.V != version {
		return rollout.Release{}, 0, fmt.Errorf("release record encoding version %d, want %d", rec.V, version)
	}
	rec.Release.Envelope = rec.Envelope
	return rec.Release, rec.Rev, nil
}

// EncodeAudit returns the stored form of a.
func EncodeAudit(a store.AuditEntry) ([]byte, error) {
	rec := auditRecord{V: version, Entry: a, Before: a.Before, After: a.After}
	rec.Entry.Before, rec.Entry.After = nil, nil
	return json.Marshal(rec)
}

// DecodeAudit reads what EncodeAudit wrote.
func DecodeAudit(v []byte) (store.AuditEntry, error) {
	var rec auditRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return store.AuditEntry{}, fmt.Errorf("decode audit record: %w", err)
	}
	if rec.V != version {
		return store.AuditEntry{}, fmt.Errorf("audit record encoding version %d, want %d", rec.V, version)
	}
	rec.Entry.Before, rec.Entry.After = rec.Before, rec.After
	return rec.Entry, nil
}

// startedVersion is the encoding version of a started report
// (store.PhaseStarted). A replica that predates started reports refuses it
// as another version, skipping it as unreadable, where reading it as
// version 1 would count an outcome of exit code 0: a success. Outcomes
// stay version 1, which every replica reads.
const startedVersion = 2

// EncodeReport returns the stored form of r.
func EncodeReport(r store.Report) ([]byte, error) {
	v := version
	if r.Started() {
		v = startedVersion
	}
	return json.Marshal(reportRecord{V: v, Report: r})
}

// DecodeReport reads what EncodeReport wrote.
func DecodeReport(v []byte) (store.Report, error) {
	var rec reportRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return store.Report{}, fmt.Errorf("decode report record: %w", err)
	}
	switch {
	case rec.V == version && rec.Report.Phase == "", rec.V == startedVersion && rec.Report.Started():
		return rec.Report, nil
	case rec.V == version || rec.V == startedVersion:
		return store.Report{}, fmt.Errorf("report record encoding version %d with phase %q", rec.V, rec.Report.Phase)
	}
	return store.Report{}, fmt.Errorf("report record encoding version %d, want %d or %d", rec.V, version, startedVersion)
}

// EncodeServed returns the stored form of sv.
func EncodeServed(sv store.Served) ([]byte, error) {
	return json.Marshal(servedRecord{V: version, Served: sv})
}

// DecodeServed reads what EncodeServed wrote.
func DecodeServed(v []byte) (store.Served, error) {
	var rec servedRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return store.Served{}, fmt.Errorf("decode served record: %w", err)
	}
	if rec.V != version {
		return store.Served{}, fmt.Errorf("served record encoding version %d, want %d", rec.V, version)
	}
	return rec.Served, nil
}

type configRecord struct {
	V        int            `json:"v"`
	Rev      int64          `json:"rev,omitempty"` // as releaseRecord's
	Config   rollout.Config `json:"config"`        // Envelope moved out
	Envelope []byte         `json:"envelope"`
}

// EncodeConfig returns the stored form of component configuration c at
// revision rev (0: none).
func EncodeConfig(c rollout.Config, rev int64) ([]byte, error) {
	rec := configRecord{V: version, Rev: rev, Config: c, Envelope: c.Envelope}
	rec.Config.Envelope = nil
	return json.Marshal(rec)
}

// ReportTime is the time of the report encoded in v (DecodeReport's),
// which is what retention prunes by.
func ReportTime(v []byte) (time.Time, error) {
	r, err := DecodeReport(v)
	return r.Time, err
}

// ServedTime is the time of the served record encoded in v.
func ServedTime(v []byte) (time.Time, error) {
	sv, err := DecodeServed(v)
	return sv.Time, err
}

// DecodeConfig reads what EncodeConfig wrote.
func DecodeConfig(v []byte) (rollout.Config, int64, error) {
	var rec configRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return rollout.Config{}, 0, fmt.Errorf("decode component config record: %w", err)
	}
	if rec.V != version {
		return rollout.Config{}, 0, fmt.Errorf("component config record encoding version %d, want %d", rec.V, version)
	}
	rec.Config.Envelope = rec.Envelope
	return rec.Config, rec.Rev, nil
}

// logRecordVersion is the first byte of a stored log record; the record's
// exact bytes follow. A log record is not JSON-wrapped: tiles read records
// 256 at a time, and base64 would grow each by a third.
const logRecordVersion = 1

// EncodeLogRecord returns the stored form of log record rec.
func EncodeLogRecord(rec []byte) []byte {
	return append([]byte{logRecordVersion}, rec...)
}

// DecodeLogRecord reads what EncodeLogRecord wrote.
func DecodeLogRecord(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("log record: empty stored value")
	}
	if v[0] != logRecordVersion {
		return nil, fmt.Errorf("log record encoding version %d, want %d", v[0], logRecordVersion)
	}
	return slices.Clone(v[1:]), nil
}

// DecodeHash reads a stored log hash: its tlog.HashSize bytes, nothing
// else. Any other length is an error, never a zero hash.
func DecodeHash(v []byte) (tlog.Hash, error) {
	var h tlog.Hash
	if len(v) != tlog.HashSize {
		return h, fmt.Errorf("log hash of %d bytes, want %d", len(v), tlog.HashSize)
	}
	copy(h[:], v)
	return h, nil
}

type keySetRecord struct {
	V        int    `json:"v"`
	Version  int64  `json:"version"`
	Envelope []byte `json:"envelope"`
}

// EncodeKeySet returns the stored form of k.
func EncodeKeySet(k store.KeySetRecord) ([]byte, error) {
	return json.Marshal(keySetRecord{V: version, Version: k.Version, Envelope: k.Envelope})
}

// DecodeKeySet reads what EncodeKeySet wrote.
func DecodeKeySet(v []byte) (store.KeySetRecord, error) {
	var rec keySetRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return store.KeySetRecord{}, fmt.Errorf("decode key set record: %w", err)
	}
	if rec.V != version {
		return store.KeySetRecord{}, fmt.Errorf("key set record encoding version %d, want %d", rec.V, version)
	}
	if len(rec.Envelope) == 0 {
		return store.KeySetRecord{}, fmt.Errorf("key set record version %d: no envelope", rec.Version)
	}
	return store.KeySetRecord{Version: rec.Version, Envelope: rec.Envelope}, nil
}

type checkpointRecord struct {
	V    int    `json:"v"`
	Size int64  `json:"size"`
	Note []byte `json:"note"`
}

// EncodeCheckpoint returns the stored form of a checkpoint of size records.
func EncodeCheckpoint(size int64, note []byte) ([]byte, error) {
	return json.Marshal(checkpointRecord{V: version, Size: size, Note: note})
}

// DecodeCheckpoint reads what EncodeCheckpoint wrote.
func DecodeCheckpoint(v []byte) (int64, []byte, error) {
	var rec checkpointRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return 0, nil, fmt.Errorf("decode checkpoint record: %w", err)
	}
	if rec.V != version {
		return 0, nil, fmt.Errorf("checkpoint record encoding version %d, want %d", rec.V, version)
	}
	if rec.Size < 0 || len(rec.Note) == 0 {
		return 0, nil, fmt.Errorf("checkpoint record of size %d with a %d-byte note", rec.Size, len(rec.Note))
	}
	return rec.Size, rec.Note, nil
}

type freezeRecord struct {
	V      int          `json:"v"`
	Freeze store.Freeze `json:"freeze"`
}

// EncodeFreeze returns the stored form of the fleet-wide freeze f. Its
// revision is kept beside it by the backend (a bbolt key of its own, the
// etcd key's ModRevision), so that a record nobody can decode still has
// one to compare a replacing write against.
func EncodeFreeze(f store.Freeze) ([]byte, error) {
	return json.Marshal(freezeRecord{V: version, Freeze: f})
}

// DecodeFreeze reads what EncodeFreeze wrote.
func DecodeFreeze(v []byte) (store.Freeze, error) {
	var rec freezeRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return store.Freeze{}, fmt.Errorf("decode freeze record: %w", err)
	}
	if rec.V != version {
		return store.Freeze{}, fmt.Errorf("freeze record encoding version %d, want %d", rec.V, version)
	}
	return rec.Freeze, nil
}
