// Package store defines the storage contract of the live-patching service:
// release records with their rollouts, an append-only audit log, and nodes'
// provisioning outcome reports, and component configurations.
//
// Backends live in subpackages (memstore, boltstore, etcdstore) and all pass
// the storetest conformance suite. The service never reads a store on the
// request path: it serves from a snapshot rebuilt when Watch signals.
package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"nodehotfix/internal/rollout"
)

// Errors returned (possibly wrapped) by every backend.
var (
	// ErrNotFound: no record with that key.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the record's revision is not the one the write expected
	// (a concurrent admin write won), or it exists when it must not.
	ErrConflict = errors.New("conflict")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrInvalidReport: a report's key (VMID, Boot) cannot be stored.
	ErrInvalidReport = errors.New("invalid report")
	// ErrInvalidSeat: a canary seat's key (version, VMID) cannot be stored.
	ErrInvalidSeat = errors.New("invalid canary seat")
)

// AuditEntry is one change to the state, recorded in the same transaction
// as the change.
type AuditEntry struct {
	// Seq orders entries; assigned by the store, strictly increasing.
	Seq int64 `json:"seq"`
	// Time is when the change was made (set by the caller).
	Time time.Time `json:"time"`
	// Actor identifies who made it (admin credential identity).
	Actor string `json:"actor"`
	// Action is a short verb: publish, rollout-set, pause, resume, halt,
	// complete, revoke.
	Action string `json:"action"`
	// Target is the release version.
	Target string `json:"target"`
	// Before and After are the record before and after the change (JSON);
	// Before is null for a publish.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	// Evidence is what an automatic change was decided on (the counts, the
	// rule and its numbers), JSON; empty for an operator's change.
	Evidence json.RawMessage `json:"evidence,omitempty"`
	// Reason is why, in words: what the operator gave with the change, or
	// the autopilot's summary of its evidence; empty when none.
	Reason string `json:"reason,omitempty"`
}

// Report is one node's provisioning outcome for one boot, as lpsd stores it.
// (VMID, Boot) is its key.
type Report struct {
	VMID           string    `json:"vm_id"`
	Boot           string    `json:"boot"` // the node's kernel boot ID
	SubscriptionID string    `json:"subscription_id"`
	Base           string    `json:"base"` // the image base YYYYMM.DD
	BakedVersion   string    `json:"baked_version"`
	Agent          string    `json:"agent"` // "baked" or "hotfix": who provisioned
	AgentVersion   string    `json:"agent_version"`
	HotfixVersion  string    `json:"hotfix_version,omitempty"` // the release launch chose; "" for the control cohort
	Decision       string    `json:"decision,omitempty"`
	CheckHotfix    string    `json:"check_hotfix,omitempty"`
	DownloadHotfix string    `json:"download_hotfix,omitempty"`
	Route          string    `json:"route,omitempty"`
	Fallback       bool      `json:"fallback,omitempty"`
	FallbackReason string    `json:"fallback_reason,omitempty"`
	ExitCode       int       `json:"exit_code"`
	CheckMS        int64     `json:"check_ms,omitempty"`
	DownloadMS     int64     `json:"download_ms,omitempty"`
	ProvisionMS    int64     `json:"provision_ms,omitempty"`
	Time           time.Time `json:"time"` // when lpsd accepted it
}

// ValidateKey returns an error wrapping ErrInvalidReport unless r's VMID and
// Boot are both non-empty and free of "/", which backends use to join them
// into one key.
func (r Report) ValidateKey() error {
	for _, f := range []struct{ name, v string }{{"vm id", r.VMID}, {"boot", r.Boot}} {
		if f.v == "" || strings.Contains(f.v, "/") {
			return fmt.Errorf("report %s %q: empty or contains \"/\": %w", f.name, f.v, ErrInvalidReport)
		}
	}
	return nil
}

// Seat is one node's seat of a release's canary.
type Seat struct {
	VMID string `json:"vm_id"`
	// Since is when the node took it (set by the caller), so a holder that
	// never reports can be told from one still provisioning.
	Since time.Time `json:"since"`
}

// ValidateSeat returns an error wrapping ErrInvalidSeat unless version and
// vmID are both non-empty and free of "/", which backends join them with.
func ValidateSeat(version, vmID string) error {
	for _, f := range []struct{ name, v string }{{"version", version}, {"vm id", vmID}} {
		if f.v == "" || strings.Contains(f.v, "/") {
			return fmt.Errorf("canary seat %s %q: empty or contains \"/\": %w", f.name, f.v, ErrInvalidSeat)
		}
	}
	return nil
}

// CompareReports orders reports by (VMID, Boot), the order of Reports, for
// slices.SortFunc.
func CompareReports(a, b Report) int {
	return cmp.Or(strings.Compare(a.VMID, b.VMID), strings.Compare(a.Boot, b.Boot))
}

// Store persists releases, the audit log, reports, canary seats and
// component configurations.
// Implementations are safe for concurrent use.
type Store interface {
	// Releases returns every release (in version order) and the store-wide
	// revision the list reflects.
	Releases(ctx context.Context) ([]rollout.Release, int64, error)

	// Release returns one release and its revision (the revision of its
	// last write). ErrNotFound if there is none.
	Release(ctx context.Context, version string) (rollout.Release, int64, error)

	// PutRelease writes r if the stored revision of r.Version equals ifRev,
	// where ifRev 0 means "must not exist yet", and appends a (with Seq
	// assigned) in the same atomic transaction. It returns r's new
	// revision. ErrConflict if ifRev does not match.
	PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a AuditEntry) (int64, error)

	// Audit returns up to limit entries with Seq greater than after, oldest
	// first.
	Audit(ctx context.Context, after int64, limit int) ([]AuditEntry, error)

	// Watch returns a channel that receives a value after any change to the
	// releases, from this process or (for shared backends) any other,
	// coalescing bursts; it is closed when ctx is done or the store is
	// closed. Consumers re-read Releases on each signal.
	Watch(ctx context.Context) <-chan struct{}

	// PutReports stores rs in one atomic write per call (a backend may split
	// a call into consecutive atomic writes of at most 128 reports, say so),
	// each keyed by (VMID, Boot): a report whose key is already stored
	// replaces it, so a (vmId, boot) is stored once however often it reports.
	// It returns, per report, whether its key was new. Reports with an empty
	// VMID or Boot, or one containing "/", are refused with ErrInvalidReport
	// (wrapped) and nothing of the call is stored. Within one call, a later
	// report for the same key wins, and only the first occurrence of a new key
	// is reported new.
	//
	// Reports are not releases: PutReports changes neither the revision
	// Releases returns nor any release's, and does not signal Watch.
	// ErrClosed after Close; ctx's error if it is done before the write.
	PutReports(ctx context.Context, rs []Report) (first []bool, err error)

	// Reports returns every stored report, ordered by (VMID, Boot).
	// ErrClosed after Close.
	Reports(ctx context.Context) ([]Report, error)

	// TakeSeat gives seat.VMID one of the canary seats of release
	// version, of which there are limit (rollout.PlanStep.Nodes), taken at
	// seat.Since. It returns true if the vmId holds a seat already (its
	// Since unchanged) or took one because fewer than limit were held,
	// false if it holds none and none is free. A limit of 0 only reads. A seat is never given back, and a limit may grow from step to
	// step (held seats count against the new one).
	//
	// Atomic across every process sharing the store: however many take at
	// once, no more than limit vmIds hold seats (unless an earlier, larger
	// limit gave them out) and none holds two. Seats are not releases: no
	// revision changes and Watch is not signalled. ErrInvalidSeat (wrapped)
	// for an empty version or vmID or one containing "/"; ErrClosed after
	// Close.
	TakeSeat(ctx context.Context, version string, seat Seat, limit int) (bool, error)

	// Seats returns version's canary seats, sorted by VMID.
	Seats(ctx context.Context, version string) ([]Seat, error)

	// Configs returns every component configuration, ordered by
	// rollout.CompareConfigs, and the revision the list reflects: it moves
	// with every PutConfig and never goes back (a backend may share it
	// with Releases'). Watch signals configuration changes as release
	// changes.
	Configs(ctx context.Context) ([]rollout.Config, int64, error)

	// Config returns one component configuration and its revision.
	// ErrNotFound if there is none.
	Config(ctx context.Context, component string, version int64) (rollout.Config, int64, error)

	// PutConfig writes c if the stored revision of (c.Component,
	// c.Version) equals ifRev (0: must not exist yet) and appends a in
	// the same atomic transaction, as PutRelease does; it returns c's new
	// revision. ErrConflict if ifRev does not match.
	PutConfig(ctx context.Context, c rollout.Config, ifRev int64, a AuditEntry) (int64, error)

	// Close releases the backend's resources.
	Close() error
}
