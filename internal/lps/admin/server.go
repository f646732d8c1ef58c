package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// Audit actions.
const (
	ActionPublish    = "publish"
	ActionRolloutSet = "rollout-set"
	ActionPlan       = "plan"
	ActionSkip       = "skip"
	ActionPause      = "pause"
	ActionResume     = "resume"
	ActionHalt       = "halt"
	ActionComplete   = "complete"
	ActionRevoke     = "revoke"
)

// Actions returns every action the audit log records, the operators' and
// then the autopilot's, in the order the manuals list them.
func Actions() []string {
	return []string{ActionPublish, ActionRolloutSet, ActionPlan, ActionSkip, ActionPause, ActionResume, ActionHalt, ActionComplete, ActionRevoke, ActionRotateKeys, ActionRestoreLog, ActionFreeze, ActionUnfreeze, ActionRequestApproval,
		autopilot.ActionAdvance, autopilot.ActionHalt, autopilot.ActionPause, autopilot.ActionExpire}
}

// Request limits.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
	maxIDLength       = 256
	maxScopeEntries   = 1000
	// MaxReasonBytes caps an audit reason: a sentence or a ticket link,
	// not a document; every audit read returns it.
	MaxReasonBytes = 1024
	// maxAuditScan bounds the entries one ListAudit call examines, so a
	// filter that matches nothing costs a bounded read, not the whole log.
	maxAuditScan = 10000
	// auditChunk is how many entries ListAudit reads from the store at once.
	auditChunk = 1000
)

// SnapshotSource returns the snapshot the node-facing service serves from;
// *lps.Snapshotter is one.
type SnapshotSource interface {
	// Current returns the latest snapshot, or nil before the first load.
	Current() *lps.Snapshot
}

// Config configures a Server.
type Config struct {
	// Store holds releases and the audit log; required.
	Store store.Store
	// Snapshots is what Explain evaluates and Status reports the revision
	// of. nil: Explain fails with Unavailable and Status reports no
	// snapshot.
	Snapshots SnapshotSource
	// Counts returns this instance's node request counts by outcome. nil:
	// Status reports none.
	Counts func() map[string]uint64
	// Served returns, per release version, the node requests this instance
	// answered with it. nil: none shown.
	Served func() map[string]uint64
	// Trust returns, per base, this instance's answers with a release by
	// what the nodes declared of their release trust (lps.Metrics
	// TrustByBase). nil: none shown.
	Trust func() map[string]lps.TrustCounts
	// Evidence is what status, explain and the nodes list read the
	// reports and served records from: an *assess.Shared the autopilot's
	// looks share, so readers who arrive together cost one read; nil: the
	// store.
	Evidence assess.Source
	// Region is this instance's region label, the default for Explain.
	// Empty: none.
	Region string
	// DeployEnv is this instance's deploy-environment label, the default
	// for Explain. Empty: none.
	DeployEnv string
	// ReplicaID is this instance's ID among the replicas of a shared
	// store (what it joins them as), for Status to mark it. Empty: none.
	ReplicaID string
	// ReleaseKeys, when set, makes PublishRelease refuse every envelope
	// they do not verify. nil: envelopes are only checked for form and
	// expiry (nodes still verify them).
	ReleaseKeys *release.KeySet
	// TransparencyLog is this replica's keeper of the log's checkpoints
	// (lps.Checkpointer). nil (no --log-key): RestoreLog is refused and
	// appends are not checked against what witnesses cosigned.
	TransparencyLog LogKeeper
	// Policy is what every operator's change to a release's rollout must
	// comply with (rollout.Policy), and its two-person rule. Zero:
	// nothing is enforced.
	Policy rollout.Policy
	// AdvanceWindow is when this replica's autopilot may advance a plan
	// step (lpsd --advance-window), shown beside the policy and in
	// explain; the zero Window is any time.
	AdvanceWindow autopilot.Window
	// Now returns the current time. nil: time.Now.
	Now func() time.Time
	// Log records changes and internal errors. nil: discard.
	Log *slog.Logger
}

// ErrorDomain is the Domain of every ErrorInfo (a machine-readable
// refusal) the admin API sends; each Reason constant names one.
const ErrorDomain = "nodehotfix.admin"

// Server implements adminv1.AdminServiceServer. Register it on a
// grpc.Server whose interceptors include an Auth; every handler refuses a
// context without an actor. Safe for concurrent use.
type Server struct {
	adminv1.UnimplementedAdminServiceServer

	store     store.Store
	evidence  assess.Source
	snaps     SnapshotSource
	counts    func() map[string]uint64
	served    func() map[string]uint64
	trust     func() map[string]lps.TrustCounts
	region    string
	env       string
	replicaID string
	keys      *release.KeySet
	logs      LogKeeper
	policy    rollout.Policy
	window    autopilot.Window
	// restored is the largest checkpoint RestoreLog verified: the log
	// nodes may have been shown is at least that large.
	restored atomic.Int64
	now      func() time.Time
	log      *slog.Logger
}

var _ adminv1.AdminServiceServer = (*Server)(nil)

// New returns a Server for cfg. It panics if cfg.Store is nil.
func New(cfg Config) *Server {
	if cfg.Store == nil {
		panic("admin.New: nil Store")
	}
	if cfg.Evidence == nil {
		cfg.Evidence = cfg.Store
	}
	s := &Server{
		store:     cfg.Store,
		evidence:  cfg.Evidence,
		snaps:     cfg.Snapshots,
		counts:    cfg.Counts,
		served:    cfg.Served,
		trust:     cfg.Trust,
		region:    cfg.Region,
		env:       cfg.DeployEnv,
		replicaID: cfg.ReplicaID,
		keys:      cfg.ReleaseKeys,
		logs:      cfg.TransparencyLog,
		policy:    cfg.Policy,
		window:    cfg.AdvanceWindow,
		now:       cfg.Now,
		log:       cfg.Log,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// CheckReason refuses an audit reason that is too long, not UTF-8, or
// holds a control or format character (a terminal escape, a bidi
// override): every reader of the audit log prints it. lpsctl checks with it
// before it sends.
func CheckReason(reason string) error {
	switch {
	case len(reason) > MaxReasonBytes:
		return fmt.Errorf("reason is %d bytes, at most %d", len(reason), MaxReasonBytes)
	case !utf8.ValidString(reason):
		return errors.New("reason is not valid UTF-8")
	}
	for i, r := range reason {
		if !unicode.IsGraphic(r) {
			return fmt.Errorf("reason has the control or format character %U at byte %d; use plain text on one line", r, i)
		}
	}
	return nil
}

func checkReason(reason string) error {
	if err := CheckReason(reason); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// change applies one read-modify-write by actor to a release,
// compare-and-swap on its revision (ifRev, or the one read when 0), with its
// audit entry carrying reason. It reports whether nothing changed (then
// nothing is written).
func (s *Server) change(ctx context.Context, actor, action, version string, ifRev int64, reason string, apply func(rollout.Release) (rollout.Release, error)) (*adminv1.Release, bool, error) {
	cur, rev, err := s.current(ctx, version, ifRev)
	if err != nil {
		return nil, false, err
	}
	version = cur.Version
	next, err := apply(cur)
	if err != nil {
		return nil, false, domainError(err)
	}
	if unchanged(cur, next) {
		return toProto(cur, rev), true, nil
	}
	now := s.now()
	why, needs, err := s.judge(cur, next, now)
	if err != nil {
		return nil, false, err
	}
	var approval *rollout.Approval
	if needs {
		if approval, err = s.approve(ctx, actor, action, reason, why, cur, next, rev, now); err != nil {
			return nil, false, err
		}
	}
	next.UpdatedAt = now
	next.Rollout.Approval = nil
	if rollout.Rises(cur, next) {
		next.Rollout.RaisedAt = now
	}
	var rec []byte
	if next.Revoked && !cur.Revoked {
		// A revocation is on the log too: whoever monitors it sees it,
		// and a withheld one is a visible lie.
		if rec, err = (translog.RevocationRecord{Version: version, Time: now}).Marshal(); err != nil {
			return nil, false, s.internal("encode revocation record", err)
		}
		// A halt is not on the log: it stops the serving at once.
		if err := s.checkAppend(ctx, "revoke "+version, "; meanwhile halt it (lpsctl rollout halt), which stops serving it and appends nothing"); err != nil {
			return nil, false, err
		}
	}
	e := store.AuditEntry{Time: now, Actor: actor, Action: action, Target: version, Reason: reason}
	if approval != nil {
		if e.Evidence, err = json.Marshal(approvedEvidence{Approval: *approval}); err != nil {
			return nil, false, s.internal("encode the approval", err)
		}
	}
	newRev, err := s.write(ctx, "release", cur, next, rev, e, func(ctx context.Context, e store.AuditEntry) (int64, error) {
		return s.store.PutRelease(ctx, next, rev, e, rec)
	})
	if err != nil {
		return nil, false, err
	}
	s.log.Info("release changed", "action", action, "version", version, "actor", actor, "revision", newRev,
		"state", next.Rollout.State, "percent", next.Rollout.Percent, "revoked", next.Revoked)
	return toProto(next, newRev), false, nil
}

// write ends a read-modify-write of change or changeConfig: it puts next,
// read as cur at revision rev, with e as its audit entry (cur and next
// its before and after). A lost compare-and-swap is Aborted.
func (s *Server) write(ctx context.Context, what string, cur, next any, rev int64, e store.AuditEntry, put func(context.Context, store.AuditEntry) (int64, error)) (int64, error) {
	var err error
	if e.Before, err = json.Marshal(cur); err != nil {
		return 0, s.internal("encode "+what, err)
	}
	if e.After, err = json.Marshal(next); err != nil {
		return 0, s.internal("encode "+what, err)
	}
	newRev, err := put(ctx, e)
	if errors.Is(err, store.ErrConflict) {
		return 0, conflict(e.Target, rev)
	}
	if err != nil {
		return 0, s.storeError(e.Action+" "+e.Target, err)
	}
	return newRev, nil
}

// current reads version's record for a change, as an RPC error: NotFound,
// InvalidArgument for a bad version or ifRev, Aborted when ifRev (0: any)
// is not its revision.
func (s *Server) current(ctx context.Context, version string, ifRev int64) (rollout.Release, int64, error) {
	v, err := hotfix.ParseVersion(version)
	if err != nil {
		return rollout.Release{}, 0, status.Errorf(codes.InvalidArgument, "version: %v", err)
	}
	version = v.String()
	if ifRev < 0 {
		return rollout.Release{}, 0, status.Errorf(codes.InvalidArgument, "if_revision %d is negative", ifRev)
	}
	cur, rev, err := s.store.Release(ctx, version)
	if err != nil {
		return rollout.Release{}, 0, s.storeError("read release "+version, err)
	}
	if ifRev != 0 && ifRev != rev {
		return rollout.Release{}, 0, conflict(version, ifRev)
	}
	// A record stored before releases carried their expiry gets it with
	// its next change.
	return cur.WithNotAfter(), rev, nil
}

func unchanged(a, b rollout.Release) bool {
	return a.Revoked == b.Revoked &&
		reflect.DeepEqual(a.Rollout.Plan, b.Rollout.Plan) &&
		a.Rollout.State == b.Rollout.State &&
		a.Rollout.Percent == b.Rollout.Percent &&
		a.Rollout.EvidenceSince.Equal(b.Rollout.EvidenceSince) &&
		a.Rollout.HaltedFrom == b.Rollout.HaltedFrom &&
		slices.Equal(a.Rollout.Subscriptions, b.Rollout.Subscriptions) &&
		slices.Equal(a.Rollout.Regions, b.Rollout.Regions) &&
		slices.Equal(a.Rollout.DeployEnvs, b.Rollout.DeployEnvs)
}

func conflict(version string, rev int64) error {
	return status.Errorf(codes.Aborted, "release %s changed since revision %d (a concurrent change won); re-read its status and retry", version, rev)
}

func (s *Server) currentSnapshot() *lps.Snapshot {
	if s.snaps == nil {
		return nil
	}
	return s.snaps.Current()
}

func requireActor(ctx context.Context) (string, error) {
	actor, ok := ActorFrom(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "unauthenticated")
	}
	return actor, nil
}

// domainError converts a rollout rule's refusal; a status error (a
// refusal the server decided itself) passes as it is.
func domainError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, rollout.ErrPercentDecrease),
		errors.Is(err, rollout.ErrInvalidTransition),
		errors.Is(err, rollout.ErrStepPassed),
		errors.Is(err, rollout.ErrNoStepToSkip),
		errors.Is(err, rollout.ErrRevoked):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// storeError converts a store error; unexpected ones are logged and hidden.
func (s *Server) storeError(op string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: not found", op)
	case errors.Is(err, store.ErrConflict):
		return status.Errorf(codes.Aborted, "%s: concurrent change; retry", op)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, store.ErrClosed):
		return status.Errorf(codes.Unavailable, "%s: store closed", op)
	case errors.Is(err, store.ErrInvalidRecord):
		return status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	}
	return s.internal(op, err)
}

func (s *Server) internal(op string, err error) error {
	s.log.Error("admin request failed", "op", op, "err", err)
	return status.Errorf(codes.Internal, "%s: internal error (see the service log)", op)
}

// toProto returns r as the API shows it, with its expiry read from the
// envelope when the record predates NotAfter.
func toProto(r rollout.Release, rev int64) *adminv1.Release {
	r = r.WithNotAfter()
	var notAfter *timestamppb.Timestamp
	if !r.NotAfter.IsZero() {
		notAfter = timestamppb.New(r.NotAfter)
	}
	var evidenceSince *timestamppb.Timestamp
	if !r.Rollout.EvidenceSince.IsZero() {
		evidenceSince = timestamppb.New(r.Rollout.EvidenceSince)
	}
	return &adminv1.Release{
		NotAfter:     notAfter,
		Version:      r.Version,
		Base:         r.Base,
		EnvelopeJson: string(r.Envelope),
		Rollout: &adminv1.Rollout{
			State:         string(r.Rollout.State),
			Percent:       int32(r.Rollout.Percent),
			Subscriptions: r.Rollout.Subscriptions,
			Regions:       r.Rollout.Regions,
			DeployEnvs:    r.Rollout.DeployEnvs,
			Plan:          planToProto(r.Rollout.Plan),
			EvidenceSince: evidenceSince,
			HaltedFrom:    string(r.Rollout.HaltedFrom),
			Reason:        r.Rollout.Reason,
		},
		Revoked:     r.Revoked,
		PublishedAt: timestamppb.New(r.PublishedAt),
		UpdatedAt:   timestamppb.New(r.UpdatedAt),
		Revision:    rev,
	}
}
