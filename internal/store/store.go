// Package store defines the storage contract of the live-patching service:
// release records with their rollouts, an append-only audit log, nodes'
// provisioning outcome reports, component configurations, and the
// transparency log of releases, revocations and key-set versions.
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
	// ErrInvalidServed: a served record's key (Version, VMID, Boot) cannot
	// be stored.
	ErrInvalidServed = errors.New("invalid served record")
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
	VMID           string `json:"vm_id"`
	Boot           string `json:"boot"` // the node's kernel boot ID
	SubscriptionID string `json:"subscription_id"`
	Base           string `json:"base"` // the image base YYYYMM.DD
	BakedVersion   string `json:"baked_version"`
	Agent          string `json:"agent"` // "baked" or "hotfix": who provisioned
	AgentVersion   string `json:"agent_version"`
	HotfixVersion  string `json:"hotfix_version,omitempty"` // the release launch chose; "" when it chose the baked agent
	// RequestedVersion is the release the node's staged pointer requested
	// for its base and lpsd had offered it, run or not: a node that was
	// served a release and refused it counts for that release. "" when it
	// requested none, or one lpsd never offered it (a custom-data pin).
	RequestedVersion string    `json:"requested_version,omitempty"`
	Decision         string    `json:"decision,omitempty"`
	CheckHotfix      string    `json:"check_hotfix,omitempty"`
	DownloadHotfix   string    `json:"download_hotfix,omitempty"`
	Route            string    `json:"route,omitempty"`
	Fallback         bool      `json:"fallback,omitempty"`
	FallbackReason   string    `json:"fallback_reason,omitempty"`
	ExitCode         int       `json:"exit_code"`
	CheckMS          int64     `json:"check_ms,omitempty"`
	DownloadMS       int64     `json:"download_ms,omitempty"`
	ProvisionMS      int64     `json:"provision_ms,omitempty"`
	Time             time.Time `json:"time"` // when lpsd accepted it
	// Replica is the lpsd replica that accepted it, whose clock Time is
	// by (Served.Replica's kind); "" from a replica older than the field.
	Replica string `json:"replica,omitempty"`
	// Phase is PhaseStarted for a started report (the node was about to
	// run HotfixVersion), "" for an outcome. A started report is never an
	// outcome: its ExitCode means nothing.
	Phase string `json:"phase,omitempty"`
}

// PhaseStarted marks a started report: a node about to run a hotfix agent.
// Stored only where its (VMID, Boot) has no report yet, and replaced by
// that boot's outcome.
const PhaseStarted = "started"

// Started reports whether r is a started report rather than an outcome.
func (r Report) Started() bool { return r.Phase == PhaseStarted }

// MergeReport is the rule every backend's PutReports applies to a key:
// given what is stored (ok: something is) and a new report, it returns
// whether the new one is written. An outcome always is (a repeat replaces
// the earlier report); a started report only where nothing is stored, so
// it never replaces an outcome, however late it arrives.
func MergeReport(stored bool, r Report) bool { return !stored || !r.Started() }

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
	// SubscriptionID is the node's, counted against SeatLimit's
	// PerSubscription when it takes a seat. Seats returns it for a seat
	// taken under such a bound (where explain counts a subscription's
	// share), empty for one taken without (on bbolt also for one taken
	// before 2026-12-04).
	SubscriptionID string `json:"subscription_id,omitempty"`
}

// SeatLimit bounds a canary's seats.
type SeatLimit struct {
	// Seats is how many vmIds may hold one (rollout.PlanStep.Nodes); 0
	// only reads.
	Seats int
	// PerSubscription, when positive, is how many of them one
	// subscription's vmIds may hold, so that a few subscriptions' VMs
	// cannot fill a canary; 0 means no such bound.
	PerSubscription int
}

// ErrSubscriptionSeats is returned (wrapped) by TakeSeat when the node's
// subscription already holds its share of the seats (SeatLimit's
// PerSubscription): the canary is not full for other subscriptions.
var ErrSubscriptionSeats = errors.New("the subscription holds its share of the canary's seats")

// ValidateTake is ValidateSeat for a take under limit: with a
// PerSubscription bound, the seat's subscription must be non-empty and free
// of "/" too.
func ValidateTake(version string, seat Seat, limit SeatLimit) error {
	if err := ValidateSeat(version, seat.VMID); err != nil {
		return err
	}
	if limit.PerSubscription > 0 && (seat.SubscriptionID == "" || strings.Contains(seat.SubscriptionID, "/")) {
		return fmt.Errorf("canary seat subscription %q: empty or contains \"/\": %w", seat.SubscriptionID, ErrInvalidSeat)
	}
	return nil
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

// Joiner is a store shared by several replicas (etcdstore): they join it
// to elect the one whose autopilot decides, and to compare clocks. A store
// one process holds alone (bbolt, memory) is no Joiner: its one replica
// always decides.
type Joiner interface {
	// Join starts the membership of replica id (unique among them),
	// which serves nodes from place (its --region and --deploy-env
	// labels, shown to the others with its heartbeat).
	Join(ctx context.Context, id string, place rollout.Place) (Replica, error)
}

// Replica is one process's membership of the replicas sharing a store.
type Replica interface {
	// Beat writes this replica's heartbeat: now, by its own clock.
	Beat(ctx context.Context, now time.Time) error
	// Peers returns the other live replicas' last heartbeats.
	Peers(ctx context.Context) ([]Heartbeat, error)
	// Campaign blocks until this replica leads, ctx ends, or the
	// membership is lost.
	Campaign(ctx context.Context) error
	// Resign gives the leadership up.
	Resign(ctx context.Context) error
	// Done is closed when the membership is lost (and any leadership
	// with it).
	Done() <-chan struct{}
	Close() error
}

// ReplicaLister is an optional capability of a Store replicas share,
// checked by type assertion: the live replicas' last heartbeats, this
// process's too if it joined, by ID (etcdstore). One that has joined but
// not yet beaten has a zero Time.
type ReplicaLister interface {
	Replicas(ctx context.Context) ([]Heartbeat, error)
}

// Heartbeat is a replica's last heartbeat: its wall clock when it wrote
// it, and the place it serves nodes from (its labels, as it joined).
type Heartbeat struct {
	ID    string
	Time  time.Time
	Place rollout.Place
}

// UnreadableError is returned, beside every record that could be read, by
// a list of records (Reports, Served) in which some could not be decoded: a
// newer encoding written mid-upgrade, another writer of the prefix, a bit
// flip. The list is usable; the caller counts and logs what was skipped,
// and never lets one bad record stop what the others decide. (Freezer's
// Freeze returns one beside the frozen stand-in for its one record.)
type UnreadableError struct {
	Kind  string // "release", "report", "served record", "seat", "key set" or "freeze"
	Count int
	First error // the first record's decode error, with its key
	// Keys are the unreadable records' keys where the caller needs them
	// (a release's version); nil otherwise.
	Keys []string
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("%d %s(s) could not be read and were skipped; the first: %v", e.Count, e.Kind, e.First)
}

// Unreadable is the collector a backend's list fills: add for each record
// it cannot decode, then Err.
type Unreadable struct{ e UnreadableError }

// NewUnreadable returns a collector for records of kind.
func NewUnreadable(kind string) *Unreadable { return &Unreadable{e: UnreadableError{Kind: kind}} }

// Add records one undecodable record.
func (u *Unreadable) Add(err error) {
	if u.e.Count == 0 {
		u.e.First = err
	}
	u.e.Count++
}

// AddKey records one undecodable record and its key.
func (u *Unreadable) AddKey(key string, err error) {
	u.Add(err)
	u.e.Keys = append(u.e.Keys, key)
}

// Err returns the *UnreadableError, or nil if every record was read.
func (u *Unreadable) Err() error {
	if u.e.Count == 0 {
		return nil
	}
	e := u.e
	return &e
}

// Served records that lpsd served release Version to one boot of a node
// that declared it reports its outcome (and its boot): the evidence that
// counts the node for the release whether its report arrives or not, so a
// node that hangs, dies or never reports is silent rather than unseen.
// (Version, VMID, Boot) is its key.
type Served struct {
	Version        string    `json:"version"`
	VMID           string    `json:"vm_id"`
	Boot           string    `json:"boot"`
	Base           string    `json:"base"`
	SubscriptionID string    `json:"subscription_id"`
	Time           time.Time `json:"time"` // when lpsd served it
	// Replica is the ID of the lpsd replica that served it (its host
	// name and pid, as it joins the others); empty for records written
	// before it was kept.
	Replica string `json:"replica,omitempty"`
}

// ValidateKey returns an error wrapping ErrInvalidServed unless s's
// Version, VMID and Boot are all non-empty and free of "/", which backends
// join them with.
func (s Served) ValidateKey() error {
	for _, f := range []struct{ name, v string }{{"version", s.Version}, {"vm id", s.VMID}, {"boot", s.Boot}} {
		if f.v == "" || strings.Contains(f.v, "/") {
			return fmt.Errorf("served record %s %q: empty or contains \"/\": %w", f.name, f.v, ErrInvalidServed)
		}
	}
	return nil
}

// CompareServed orders served records by (Version, VMID, Boot), the order
// of Store.Served, for slices.SortFunc.
func CompareServed(a, b Served) int {
	return cmp.Or(strings.Compare(a.Version, b.Version), strings.Compare(a.VMID, b.VMID), strings.Compare(a.Boot, b.Boot))
}

// CompareReports orders reports by (VMID, Boot), the order of Reports, for
// slices.SortFunc.
func CompareReports(a, b Report) int {
	return cmp.Or(strings.Compare(a.VMID, b.VMID), strings.Compare(a.Boot, b.Boot))
}

// Beats is an optional capability of a Store, checked by type assertion:
// marks of the minutes in which some lpsd replica was up, so that silence
// is counted in lpsd's uptime and an outage does not turn its gap into
// silent nodes (internal/tally). Every backend here has it.
type Beats interface {
	// PutBeat marks t's minute (UTC, truncated to the minute) and forgets
	// marks older than BeatRetention before t. Idempotent and safe across
	// replicas. ErrClosed after Close.
	PutBeat(ctx context.Context, t time.Time) error
	// Beats returns the marked minutes from from's minute on, ascending.
	// ErrClosed after Close.
	Beats(ctx context.Context, from time.Time) ([]time.Time, error)
}

// BeatRetention is how long a beat is kept: the longest a served boot's
// silence can be stretched by outages (tally.MaxStretch) plus the longest
// silent-after.
const BeatRetention = 72 * time.Hour

// Store persists releases, the audit log, reports, canary seats,
// component configurations, key-set versions and the transparency log.
// Implementations are safe for concurrent use.
type Store interface {
	// Releases returns every release (in version order) and the store-wide
	// revision the list reflects. Records that cannot be decoded are
	// skipped, and the others returned with an *UnreadableError whose Keys
	// are the skipped records' versions: lpsd serves those as revoked, so
	// a record nobody can read never leaves a revoked release served.
	Releases(ctx context.Context) ([]rollout.Release, int64, error)

	// Release returns one release and its revision (the revision of its
	// last write). ErrNotFound if there is none.
	Release(ctx context.Context, version string) (rollout.Release, int64, error)

	// PutRelease writes r if the stored revision of r.Version equals ifRev,
	// where ifRev 0 means "must not exist yet", and appends a (with Seq
	// assigned) and, unless rec is nil, the log record rec (a release or
	// revocation envelope) in the same atomic transaction. It returns r's
	// new revision. ErrConflict if ifRev does not match, and then nothing
	// is appended; ErrInvalidRecord (nothing stored) for a non-nil rec that
	// ValidateRecord refuses. A concurrent append by another replica is
	// not a conflict: the backend retries on the new log size.
	PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a AuditEntry, rec []byte) (int64, error)

	// PutKeySet stores k, appends a (with Seq assigned) and appends
	// k.Envelope to the log, in one atomic transaction. ErrConflict unless
	// k.Version is exactly one more than the highest version stored (any
	// version when none is); ErrInvalidRecord (KeySetRecord.Validate).
	// Key sets are not releases: no revision moves, but Watch signals.
	PutKeySet(ctx context.Context, k KeySetRecord, a AuditEntry) error

	// KeySets returns every stored key-set record, ascending by version.
	// Records that cannot be decoded are skipped, and the others returned
	// with an *UnreadableError whose Keys are the skipped versions
	// (decimal): the chain has a hole there, which the caller must not
	// paper over. ErrClosed after Close.
	KeySets(ctx context.Context) ([]KeySetRecord, error)

	// Log is the transparency log that PutRelease and PutKeySet append
	// to. PutCheckpoint signals Watch when it changes the kept checkpoint.
	Log

	// Audit returns up to limit entries with Seq greater than after, oldest
	// first.
	Audit(ctx context.Context, after int64, limit int) ([]AuditEntry, error)

	// Watch returns a channel that receives a value after any change to the
	// releases (component configurations, key sets and the kept checkpoint
	// too), from this process or (for shared backends) any other,
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
	// is reported new. A started report (Phase PhaseStarted) is written
	// only where its key has no report, stored or earlier in the call
	// (MergeReport): it never replaces an outcome, and its first says
	// whether it was written.
	//
	// Reports are not releases: PutReports changes neither the revision
	// Releases returns nor any release's, and does not signal Watch.
	// ErrClosed after Close; ctx's error if it is done before the write.
	PutReports(ctx context.Context, rs []Report) (first []bool, err error)

	// Reports returns every stored report, ordered by (VMID, Boot).
	// Reports that cannot be decoded are skipped, and the others returned
	// with an *UnreadableError. ErrClosed after Close.
	Reports(ctx context.Context) ([]Report, error)

	// TakeSeat gives seat.VMID one of the canary seats of release
	// version, of which there are limit.Seats (rollout.PlanStep.Nodes),
	// taken at seat.Since. It returns true if the vmId holds a seat already
	// (its Since unchanged) or took one because fewer than limit.Seats were
	// held, false if it holds none and none is free. With
	// limit.PerSubscription, a vmId whose seat.SubscriptionID already holds
	// that many is refused with ErrSubscriptionSeats (wrapped) instead.
	// limit.Seats 0 gives no seat (HoldsSeat is the read). A seat is never
	// given back, and a limit may grow from step to step (held seats count
	// against the new one).
	//
	// Atomic across every process sharing the store: however many take at
	// once, no more than limit.Seats vmIds hold seats, and no more than
	// limit.PerSubscription of one subscription (unless an earlier, larger
	// limit gave them out), and none holds two. Seats are not releases: no
	// revision changes and Watch is not signalled. ErrInvalidSeat (wrapped)
	// for an empty version or vmID or one containing "/", or a
	// PerSubscription bound without a subscription free of "/"; ErrClosed
	// after Close.
	TakeSeat(ctx context.Context, version string, seat Seat, limit SeatLimit) (bool, error)

	// HoldsSeat reports whether vmID holds one of the canary seats of
	// release version; it never takes one. ErrInvalidSeat (wrapped) as
	// TakeSeat; ErrClosed after Close.
	HoldsSeat(ctx context.Context, version, vmID string) (bool, error)

	// Seats returns version's canary seats, sorted by VMID. A seat whose
	// time cannot be read is still a seat (its holder is its key): it is
	// returned with a zero Since, beside an *UnreadableError of kind
	// "seat" that counts them.
	Seats(ctx context.Context, version string) ([]Seat, error)

	// PutServed stores ss, each keyed by (Version, VMID, Boot), in one
	// atomic write per call (or, as PutReports, consecutive atomic writes of
	// at most 128): a key already stored keeps its first Time, so a boot
	// that asks again does not move its silence deadline. A record with an
	// empty or "/"-holding key part is refused with ErrInvalidServed
	// (wrapped) and nothing of the call is stored. Like reports, served
	// records change no revision and do not signal Watch. ErrClosed after
	// Close.
	PutServed(ctx context.Context, ss []Served) error

	// Served returns every served record, ordered by (Version, VMID,
	// Boot); as Reports, with an *UnreadableError beside the readable ones
	// when some cannot be decoded. ErrClosed after Close.
	Served(ctx context.Context) ([]Served, error)

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

// Pruner is an optional capability of a Store, checked by type assertion:
// it deletes old reports and served records, so that what a look reads
// (every report and served record) stays bounded as history grows. Every
// backend here has it. Neither method ever holds every record in memory:
// they scan in pages, keeping at most Prune.Keep times, and delete in
// bounded transactions, each a write of its own. A record written or
// replaced while a prune runs is never deleted for its earlier time.
// Safe across replicas, though lpsd prunes on the autopilot's replica only.
type Pruner interface {
	// PruneReports deletes the reports p selects by their Time. ErrClosed
	// after Close; ctx's error when it ends first, with what was deleted
	// by then staying deleted.
	PruneReports(ctx context.Context, p Prune) (Pruned, error)
	// PruneServed deletes the served records p selects, as PruneReports.
	PruneServed(ctx context.Context, p Prune) (Pruned, error)
	// PruneSeats deletes each canary seat set (the version TakeSeat was
	// given: rollout.Release.SeatSet) that drop selects, with every seat
	// and count of it, so TakeSeat starts it afresh; Pruned counts sets
	// (Deleted, and Stored: those left), never a Cutoff. ErrClosed after
	// Close; ctx's error when it ends first, with the sets deleted by
	// then staying deleted.
	PruneSeats(ctx context.Context, drop func(set string) bool) (Pruned, error)
}

// Prune selects the records of one kind to delete: those older than
// Before, then the oldest beyond Keep, but never one at or after Floor.
type Prune struct {
	// Before deletes every record whose Time is before it; zero: none
	// by age.
	Before time.Time
	// Keep, when positive, deletes the oldest records beyond that many:
	// every record older than the Keep-th newest (records of the same
	// Time as it stay, so a few more may). 0: no bound by count.
	Keep int
	// Floor protects the recent records: none at or after it is deleted,
	// whatever Before and Keep say. Zero protects nothing.
	Floor time.Time
}

// Pruned is what a prune did.
type Pruned struct {
	// Deleted is how many records it deleted; Stored how many it left
	// (undecodable ones included: a prune never deletes what it cannot
	// read).
	Deleted, Stored int
	// Cutoff is the Time it deleted records before (zero: it deleted by
	// no time).
	Cutoff time.Time
	// OverKeep says the records at or after Floor alone are more than
	// Keep: they were kept, and so more than Keep stay.
	OverKeep bool
}

// Cutoff is the first pass of a backend's prune: fed every record's Time
// (Add), it finds the time to delete records before (Time). It holds at
// most Prune.Keep times, and none without Keep. Not safe for concurrent
// use.
type Cutoff struct {
	p Prune
	n int
	// newest is a min-heap of the Keep newest times (Unix nanoseconds).
	newest []int64
}

// NewCutoff returns a Cutoff for p.
func NewCutoff(p Prune) *Cutoff { return &Cutoff{p: p} }

// Scans reports whether Time needs every record's Time first: only a
// bound by count does.
func (c *Cutoff) Scans() bool { return c.p.Keep > 0 }

// Add counts one record of time t.
func (c *Cutoff) Add(t time.Time) {
	c.n++
	if c.p.Keep <= 0 {
		return
	}
	v := t.UnixNano()
	h := c.newest
	if len(h) < c.p.Keep {
		h = append(h, v)
		for i := len(h) - 1; i > 0; {
			parent := (i - 1) / 2
			if h[parent] <= h[i] {
				break
			}
			h[parent], h[i] = h[i], h[parent]
			i = parent
		}
		c.newest = h
		return
	}
	if v <= h[0] {
		return
	}
	h[0] = v
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(h) && h[l] < h[least] {
			least = l
		}
		if r < len(h) && h[r] < h[least] {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

// Time returns the time to delete records before (zero: none), and
// whether Floor kept more than Keep records.
func (c *Cutoff) Time() (cut time.Time, overKeep bool) {
	cut = c.p.Before
	if c.p.Keep > 0 && c.n > c.p.Keep {
		// The Keep-th newest: everything older goes.
		if k := time.Unix(0, c.newest[0]); k.After(cut) {
			cut = k
		}
	}
	if !c.p.Floor.IsZero() && cut.After(c.p.Floor) {
		overKeep = c.p.Keep > 0 && c.n > c.p.Keep && time.Unix(0, c.newest[0]).After(c.p.Floor)
		cut = c.p.Floor
	}
	return cut, overKeep
}

// Deletes reports whether a record of time t goes under cut (Cutoff.Time).
func Deletes(cut, t time.Time) bool { return !cut.IsZero() && t.Before(cut) }
