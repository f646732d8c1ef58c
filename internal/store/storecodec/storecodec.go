// Package storecodec is the stored form of releases, audit entries,
// reports and component configurations that the durable backends (boltstore, etcdstore) share: JSON with
// a format version, a reader refusing any other version rather than
// misreading it.
// Signed envelopes and audit snapshots are kept as exact bytes beside the
// record, because encoding/json would compact them as RawMessage and nodes
// verify a signature over what is served.
package storecodec

import (
	"encoding/json"
	"fmt"

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
