package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	"nodehotfix/internal/regression"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
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

// PublishRelease stores a signed release envelope as a draft rollout.
// InvalidArgument for an envelope that is malformed, expired or (with
// ReleaseKeys) not verified; FailedPrecondition, with an ErrorInfo of
// reason ReasonBelowThreshold, for one signed by fewer of ReleaseKeys than
// their threshold; AlreadyExists if the version is published.
func (s *Server) PublishRelease(ctx context.Context, req *adminv1.PublishReleaseRequest) (*adminv1.PublishReleaseResponse, error) {
	actor, env, err := publishRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	now := s.now()
	keys, _, err := s.currentKeys(ctx)
	if err != nil {
		return nil, err
	}
	rel, err := checkEnvelope(keys, env, now)
	if err != nil {
		return nil, envelopeError(err, keys)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "envelope rejected: %v", err)
	}
	r := rollout.Release{
		Version:     rel.Version,
		Base:        rel.Base,
		Envelope:    compact.Bytes(),
		Rollout:     rollout.Rollout{State: rollout.Draft},
		NotAfter:    rel.NotAfter,
		PublishedAt: now,
		UpdatedAt:   now,
	}
	if err := r.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "envelope rejected: %v", err)
	}
	if err := s.checkBudget(ctx, r, now); err != nil {
		return nil, err
	}
	// A retried publish of the stored envelope is done already, even
	// while appends are refused.
	if cur, rev, err := s.store.Release(ctx, r.Version); err == nil && bytes.Equal(cur.Envelope, r.Envelope) {
		return &adminv1.PublishReleaseResponse{Release: toProto(cur, rev), Unchanged: true}, nil
	}
	if err := s.checkAppend(ctx, "publish "+r.Version, ""); err != nil {
		return nil, err
	}
	var cur rollout.Release
	rev, same, err := s.publish(ctx, "release", r, r.Envelope, store.AuditEntry{
		Time: now, Actor: actor, Action: ActionPublish, Target: r.Version, Reason: req.GetReason(),
	}, func(ctx context.Context, e store.AuditEntry) (int64, error) {
		// The envelope as stored and served is the log's record of it.
		return s.store.PutRelease(ctx, r, 0, e, r.Envelope)
	}, func(ctx context.Context) (json.RawMessage, int64, error) {
		got, rev, err := s.store.Release(ctx, r.Version)
		cur = got
		return got.Envelope, rev, err
	}, "a version is published once; sign the change as a new patch version")
	if err != nil {
		return nil, err
	}
	if same {
		return &adminv1.PublishReleaseResponse{Release: toProto(cur, rev), Unchanged: true}, nil
	}
	s.log.Info("release published", "version", r.Version, "actor", actor, "revision", rev)
	return &adminv1.PublishReleaseResponse{Release: toProto(r, rev)}, nil
}

// envelopeRequest is every publish request: a signed envelope and a
// reason.
type envelopeRequest interface {
	GetEnvelopeJson() string
	GetReason() string
}

// publishRequest checks what every publish needs (an actor, a reason
// within the rules, an envelope) and returns the actor and the envelope.
func publishRequest(ctx context.Context, req envelopeRequest) (string, []byte, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return "", nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return "", nil, err
	}
	env := bytes.TrimSpace([]byte(req.GetEnvelopeJson()))
	if len(env) == 0 {
		return "", nil, status.Error(codes.InvalidArgument, "envelope_json is empty")
	}
	return actor, env, nil
}

// publish writes rec, newly published, with put (compare-and-swap on
// revision 0) and e as its audit entry, rec its after. A retried publish
// of the same envelope env succeeds: when put conflicts and stored reads
// a record with env, publish reports it unchanged with the stored
// revision. Another envelope under e.Target is AlreadyExists, with hint.
func (s *Server) publish(ctx context.Context, what string, rec any, env []byte, e store.AuditEntry, put func(context.Context, store.AuditEntry) (int64, error), stored func(context.Context) (json.RawMessage, int64, error), hint string) (int64, bool, error) {
	var err error
	if e.After, err = json.Marshal(rec); err != nil {
		return 0, false, s.internal("encode "+what, err)
	}
	rev, err := put(ctx, e)
	if errors.Is(err, store.ErrConflict) {
		cur, curRev, rerr := stored(ctx)
		if rerr == nil && bytes.Equal(cur, env) {
			return curRev, true, nil
		}
		return 0, false, status.Errorf(codes.AlreadyExists, "a different envelope is already published as %s: %s", e.Target, hint)
	}
	if err != nil {
		return 0, false, s.storeError("publish "+e.Target, err)
	}
	return rev, false, nil
}

// checkBudget refuses a release that could take a node's pointer document
// over lps.ServedBudget: nodes would refuse the whole document, and with
// it every hotfix and revocation in it. Releases expired at now no longer
// count (they are never served again).
func (s *Server) checkBudget(ctx context.Context, r rollout.Release, now time.Time) error {
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return s.storeError("list releases", err)
	}
	for i := range rels {
		rels[i] = rels[i].WithNotAfter()
	}
	declared, trimmed, err := rollout.PointerSizes(append(rels, r), r.Base, now)
	if err != nil {
		return s.internal("size pointer", err)
	}
	// A node that declares its base is served the trust evidence too.
	links, err := s.store.KeySets(ctx)
	if err != nil {
		return s.storeError("list key sets", err)
	}
	evidence := lps.EvidenceAllowance
	for _, l := range links {
		evidence += len(l.Envelope)
	}
	switch {
	case declared+evidence > lps.ServedBudget:
		return status.Errorf(codes.FailedPrecondition, "a node of base %s would be served a %d-byte pointer with %s and up to %d bytes of trust evidence (key-set links, log proofs), over the %d bytes lpsd serves (nodes accept %d): make the envelope smaller (fewer artifacts, shorter URLs)", r.Base, declared, r.Version, evidence, lps.ServedBudget, hotfix.MaxPointerSize)
	case trimmed > lps.ServedBudget:
		return status.Errorf(codes.FailedPrecondition, "a node that declares no base would be served a %d-byte pointer (every base's hotfix and every revocation) with %s, over the %d bytes lpsd serves", trimmed, r.Version, lps.ServedBudget)
	}
	return nil
}

// Machine-readable refusals: the ErrorInfo a status carries.
const (
	// ErrorDomain is the Domain of every ErrorInfo the admin API sends.
	ErrorDomain = "nodehotfix.admin"
	// ReasonBelowThreshold: an envelope signed by fewer distinct release
	// keys than lpsd's key set requires. Metadata: "signers" (the key IDs
	// whose signature verifies, comma-separated), "missing" and
	// "threshold" (decimal).
	ReasonBelowThreshold = "BELOW_THRESHOLD"
)

// envelopeError converts a refused envelope to its status: one that only
// lacks co-signatures is FailedPrecondition, naming who signed and how
// many more must; anything else is InvalidArgument.
func envelopeError(err error, keys *release.KeySet) error {
	var ve *release.VerifyError
	if !errors.As(err, &ve) || ve.Reason != release.ReasonBelowThreshold || keys == nil {
		return status.Errorf(codes.InvalidArgument, "envelope rejected: %v", err)
	}
	return withInfo(status.Newf(codes.FailedPrecondition, "envelope signed by %d of the %d distinct release keys lpsd requires (signed: %s); %d more signature(s) needed: co-sign it and publish again",
		len(ve.Signers), keys.Threshold(), strings.Join(ve.Signers, ", "), ve.Missing), ReasonBelowThreshold, map[string]string{
		"signers":   strings.Join(ve.Signers, ","),
		"missing":   strconv.Itoa(ve.Missing),
		"threshold": strconv.Itoa(keys.Threshold()),
	})
}

// checkEnvelope returns the release env signs: verified by keys (the
// newest key set, currentKeys) when the server holds release keys, else
// only decoded; unexpired either way, since nodes would refuse an expired
// one.
func checkEnvelope(keys *release.KeySet, env []byte, now time.Time) (release.Release, error) {
	if keys != nil {
		return keys.Verify(env, now)
	}
	rel, err := release.Inspect(env)
	if err != nil {
		return release.Release{}, err
	}
	if !now.Before(rel.NotAfter) {
		return release.Release{}, fmt.Errorf("release %s expired at %s", rel.Version, rel.NotAfter.UTC().Format(time.RFC3339))
	}
	return rel, nil
}

// SetPlan puts a release on a plan from its first step, or from_step
// (rollout.Release.SetPlan: a start step the release is past is
// FailedPrecondition). With dry_run it answers the same, with nothing
// written. Either way the answer has the plan's preview.
func (s *Server) SetPlan(ctx context.Context, req *adminv1.SetPlanRequest) (*adminv1.SetPlanResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	p, err := planFromProto(req.GetPlan())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "plan: %v", err)
	}
	if !req.GetDryRun() {
		if err := s.checkFrozen(ctx, "plan "+req.GetVersion()); err != nil {
			return nil, err
		}
	}
	from := int(req.GetFromStep())
	if from < 0 || from > len(p.Steps) {
		return nil, status.Errorf(codes.InvalidArgument, "from_step %d: the plan has steps 1 to %d (0: the first)", from, len(p.Steps))
	}
	if from > 0 {
		p.Step = from - 1 // from_step counts from 1, the plan's index from 0
	}
	// A plan changes no scope, so it is not checked against the nodes
	// seen (SetRollout checks a scope when it is set): a plan whose scope
	// reaches nobody is paused as stalled at its step's deadline.
	now := s.now()
	if component, version, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		apply := func(c rollout.Config) (rollout.Config, error) { return c.SetPlan(p, now) }
		if req.GetDryRun() {
			// A timed plan has no preview: only its steps' bake times.
			cur, rev, err := s.store.Config(ctx, component, version)
			if err != nil {
				return nil, s.storeError("read component config "+req.GetVersion(), err)
			}
			next, err := apply(cur)
			if err != nil {
				return nil, domainError(err)
			}
			return &adminv1.SetPlanResponse{ComponentConfig: configProto(next, rev), DryRun: true}, nil
		}
		c, _, err := s.changeConfig(ctx, actor, ActionPlan, req.GetVersion(), req.GetIfRevision(), req.GetReason(), apply)
		if err != nil {
			return nil, err
		}
		return &adminv1.SetPlanResponse{ComponentConfig: c}, nil
	}
	// A canary scoped to every subscription is spread over those its base
	// was seen in, as over a scope that lists them.
	if p.HasCanary() {
		seen, err := s.seenNodesOf(ctx, req.GetVersion())
		if err != nil {
			return nil, err
		}
		p.SpreadOver = p.SpreadCount(seen)
	}
	apply := func(r rollout.Release) (rollout.Release, error) {
		q := p
		if len(r.Rollout.Subscriptions) > 0 {
			q.SpreadOver = 0 // the scope's list spreads it
		}
		return r.SetPlan(q, now)
	}
	if req.GetDryRun() {
		cur, rev, err := s.current(ctx, req.GetVersion(), req.GetIfRevision())
		if err != nil {
			return nil, err
		}
		next, err := apply(cur)
		if err != nil {
			return nil, domainError(err)
		}
		// Judged as the plan itself is (change).
		why, _, err := s.judge(cur, next, s.now())
		if err != nil {
			return nil, err
		}
		pv, err := s.preview(ctx, next)
		if err != nil {
			return nil, err
		}
		return &adminv1.SetPlanResponse{Release: toProto(next, rev), DryRun: true, Preview: pv, NeedsApproval: why}, nil
	}
	var planned rollout.Release
	r, _, err := s.change(ctx, actor, ActionPlan, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		next, err := apply(r)
		planned = next
		return next, err
	})
	if err != nil {
		return nil, err
	}
	// The plan is in place: a preview that cannot be read (logged by
	// storeError) must not make it look refused.
	pv, _ := s.preview(ctx, planned)
	return &adminv1.SetPlanResponse{Release: r, Preview: pv}, nil
}

// preview says what r's plan will do from its current step, judged
// against the incumbent the store's releases give r's base now.
func (s *Server) preview(ctx context.Context, r rollout.Release) (*adminv1.PlanPreview, error) {
	p := r.Rollout.Plan
	if p == nil {
		return nil, nil
	}
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return nil, s.storeError("list releases", err)
	}
	incumbent := tally.Incumbent(rels, r, s.now())
	out := &adminv1.PlanPreview{Baseline: &adminv1.Baseline{
		MaxFailureRate:  p.MaxFailureRate,
		Margin:          p.Margin,
		Floor:           int32(p.Floor()),
		ComparedWith:    comparedWith(r.Base, incumbent),
		Incumbent:       incumbent,
		MaxSilentRate:   p.SilentCeiling(),
		MaxDeliveryRate: p.DeliveryCeiling(),
	}}
	wait := p.StepDeadline().Sub(p.Due())
	for _, w := range p.Schedule() {
		sw := &adminv1.StepWindow{}
		if !w.Start.IsZero() {
			sw.EarliestStart, sw.EarliestEnd, sw.Deadline = timestamppb.New(w.Start), timestamppb.New(w.End), timestamppb.New(w.End.Add(wait))
			out.EarliestComplete = sw.EarliestEnd
		}
		out.Steps = append(out.Steps, sw)
	}
	return out, nil
}

// comparedWith says, for people, what a release of base is judged against
// besides its plan's ceilings, incumbent being tally.Incumbent's answer.
func comparedWith(base, incumbent string) string {
	what := "the baked agent"
	if incumbent != tally.IncumbentBaked {
		what = incumbent + ", its previous complete hotfix"
	}
	return fmt.Sprintf("the incumbent of base %s (as of now %s), measured on that base's nodes not served this release, from their reports of the last %g h, or its whole record when those are too few",
		base, what, tally.BaselineWindow.Hours())
}

// SkipStep moves a rolling release past its plan's current step
// (rollout.Release.Skip), audited as "skip". A reason is required;
// FailedPrecondition when there is no step to skip to.
func (s *Server) SkipStep(ctx context.Context, req *adminv1.SkipStepRequest) (*adminv1.SkipStepResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetReason()) == "" {
		return nil, status.Error(codes.InvalidArgument, "reason is required: a skip gives up the step's evidence, so the audit log says why")
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if err := s.checkFrozen(ctx, "skip "+req.GetVersion()); err != nil {
		return nil, err
	}
	now := s.now()
	var left int
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, _, err := s.changeConfig(ctx, actor, ActionSkip, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			next, from, err := c.Skip(now)
			left = from
			return next, err
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.SkipStepResponse{ComponentConfig: c, SkippedStep: int32(left)}, nil
	}
	r, _, err := s.change(ctx, actor, ActionSkip, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		next, from, err := r.Skip(now)
		left = from
		return next, err
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.SkipStepResponse{Release: r, SkippedStep: int32(left)}, nil
}

func planFromProto(pp *adminv1.Plan) (rollout.Plan, error) {
	if pp == nil {
		return rollout.Plan{}, errors.New("no plan")
	}
	p := rollout.Plan{Margin: pp.GetMargin(), MaxFailureRate: pp.GetMaxFailureRate(), Timed: pp.GetTimed()}
	if s := pp.GetSilentAfterSeconds(); s < 0 || s > int64(24*time.Hour/time.Second) {
		return p, fmt.Errorf("silent after %d s out of range", s)
	}
	p.SilentAfter = time.Duration(pp.GetSilentAfterSeconds()) * time.Second
	if d := pp.GetDeadlineSeconds(); d < 0 || d > int64(30*24*time.Hour/time.Second) {
		return p, fmt.Errorf("deadline %d s out of range", d)
	}
	p.Deadline = time.Duration(pp.GetDeadlineSeconds()) * time.Second
	p.MaxSilentRate, p.MaxDeliveryRate = pp.GetMaxSilentRate(), pp.GetMaxDeliveryRate()
	for _, st := range pp.GetSteps() {
		if b := st.GetBakeSeconds(); b < 0 || b > int64(30*24*time.Hour/time.Second) {
			return p, fmt.Errorf("bake %d s out of range", b)
		}
		p.Steps = append(p.Steps, rollout.PlanStep{Percent: int(st.GetPercent()), Nodes: int(st.GetNodes()), Bake: time.Duration(st.GetBakeSeconds()) * time.Second, MinReports: int(st.GetMinReports())})
	}
	return p, p.Validate()
}

func planToProto(p *rollout.Plan) *adminv1.Plan {
	if p == nil {
		return nil
	}
	out := &adminv1.Plan{Margin: p.Margin, MaxFailureRate: p.MaxFailureRate, Step: int32(p.Step), StepSince: timestamppb.New(p.StepSince), SilentAfterSeconds: int64(p.SilenceDeadline() / time.Second),
		MaxSilentRate: p.SilentCeiling(), MaxDeliveryRate: p.DeliveryCeiling(), DeadlineSeconds: int64(p.StepDeadline().Sub(p.Due()) / time.Second)}
	if p.Timed {
		// Nothing reports on a timed plan, so it has no silent-after,
		// ceilings or deadline.
		out.Timed = true
		out.SilentAfterSeconds, out.MaxSilentRate, out.MaxDeliveryRate, out.DeadlineSeconds = 0, 0, 0, 0
	}
	for _, st := range p.Steps {
		out.Steps = append(out.Steps, &adminv1.PlanStep{Percent: int32(st.Percent), Nodes: int32(st.Nodes), BakeSeconds: int64(st.Bake / time.Second), MinReports: int32(st.MinReports)})
	}
	return out
}

// SetRollout grows a release's percentage and optionally replaces its
// scope; a draft starts rolling (rollout.Release.SetScope says what each
// state allows). InvalidArgument for a scope value that is not a GUID or
// region label, or a bad reason; FailedPrecondition for a decrease, a
// percentage change while paused, or a halted or revoked release.
func (s *Server) SetRollout(ctx context.Context, req *adminv1.SetRolloutRequest) (*adminv1.SetRolloutResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	pct := req.GetPercent()
	if pct < 0 || pct > 100 {
		return nil, status.Errorf(codes.InvalidArgument, "percent %d out of range 0..100", pct)
	}
	if err := s.checkFrozen(ctx, "rollout set "+req.GetVersion()); err != nil {
		return nil, err
	}
	var subs, regions []string
	if req.GetSetSubscriptions() {
		if subs = req.GetSubscriptions(); subs == nil {
			subs = []string{}
		}
	}
	if req.GetSetRegions() {
		if regions = req.GetRegions(); regions == nil {
			regions = []string{}
		}
	}
	var envs []string
	if req.GetSetDeployEnvs() {
		if envs = req.GetDeployEnvs(); envs == nil {
			envs = []string{}
		}
	}
	for _, l := range [][]string{subs, regions, envs} {
		if err := checkIDs(l); err != nil {
			return nil, err
		}
	}
	if err := rollout.CheckScope(subs, regions); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := rollout.CheckDeployEnvs(envs); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.checkSeen(ctx, subs, regions, req.GetAllowUnseen()); err != nil {
		return nil, err
	}
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, same, err := s.changeConfig(ctx, actor, ActionRolloutSet, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			p := int(pct)
			if req.GetKeepPercent() {
				p = c.Rollout.Percent
			}
			c, err := c.SetScope(p, subs, regions)
			if err != nil {
				return c, err
			}
			return c.SetDeployEnvs(envs)
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.SetRolloutResponse{ComponentConfig: c, Unchanged: same}, nil
	}
	// A planned canary's scope widened from a list to every subscription
	// is spread over those its base was seen in, as SetPlan spreads one,
	// so that widening a scope never drops the per-subscription bound.
	// The nodes are read before the change; whether it widens, and the
	// plan counted, are the change's own (it may retry on a newer record).
	var seen map[string]int
	if subs != nil {
		if seen, err = s.seenNodesOf(ctx, req.GetVersion()); err != nil {
			return nil, err
		}
	}
	r, same, err := s.change(ctx, actor, ActionRolloutSet, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		p := int(pct)
		if req.GetKeepPercent() {
			p = r.Rollout.Percent
		}
		listed := len(r.Rollout.Subscriptions) > 0
		r, err := r.SetScope(p, subs, regions)
		if err != nil {
			return r, err
		}
		if pl := r.Rollout.Plan; pl != nil {
			q := *pl
			switch {
			case len(r.Rollout.Subscriptions) > 0:
				q.SpreadOver = 0 // the scope's list spreads it
			case listed:
				q.SpreadOver = q.SpreadCount(seen)
			}
			r.Rollout.Plan = &q
		}
		return r.SetDeployEnvs(envs)
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.SetRolloutResponse{Release: r, Unchanged: same}, nil
}

func checkIDs(ids []string) error {
	if len(ids) > maxScopeEntries {
		return status.Errorf(codes.InvalidArgument, "%d scope entries, at most %d", len(ids), maxScopeEntries)
	}
	for _, id := range ids {
		if len(id) > maxIDLength {
			return status.Errorf(codes.InvalidArgument, "scope entry longer than %d bytes", maxIDLength)
		}
	}
	return nil
}

// actionStates maps each transition to its audit action and target state.
var actionStates = map[adminv1.Action]struct {
	name string
	to   rollout.State
}{
	adminv1.Action_ACTION_PAUSE:    {ActionPause, rollout.Paused},
	adminv1.Action_ACTION_RESUME:   {ActionResume, rollout.Rolling},
	adminv1.Action_ACTION_HALT:     {ActionHalt, rollout.Halted},
	adminv1.Action_ACTION_COMPLETE: {ActionComplete, rollout.Complete},
}

// Transition pauses, resumes, halts or completes a rollout.
// FailedPrecondition for a move the state machine does not allow.
func (s *Server) Transition(ctx context.Context, req *adminv1.TransitionRequest) (*adminv1.TransitionResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	a, ok := actionStates[req.GetAction()]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "action %v: want pause, resume, halt or complete", req.GetAction())
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	already := false
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, _, err := s.changeConfig(ctx, actor, a.name, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			if c.Rollout.State == a.to && !c.Revoked {
				already = true
				return c, nil
			}
			if err := s.checkStart(ctx, a.name, req.GetVersion(), a.to); err != nil {
				return c, err
			}
			if a.to == rollout.Rolling {
				return c.Resume(s.now())
			}
			return c.Transition(a.to)
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.TransitionResponse{ComponentConfig: c, Unchanged: already}, nil
	}
	r, _, err := s.change(ctx, actor, a.name, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		// A transition to the state the release is in is done already,
		// not refused: a retried pause must not look like a failure.
		if r.Rollout.State == a.to && !r.Revoked {
			already = true
			return r, nil
		}
		if err := s.checkStart(ctx, a.name, req.GetVersion(), a.to); err != nil {
			return r, err
		}
		if a.to == rollout.Rolling {
			return r.Resume(s.now())
		}
		return r.Transition(a.to)
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.TransitionResponse{Release: r, Unchanged: already}, nil
}

// Revoke marks a release revoked. Revoking a revoked release changes
// nothing and says so (unchanged). A stale if_revision is Aborted.
func (s *Server) Revoke(ctx context.Context, req *adminv1.RevokeRequest) (*adminv1.RevokeResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if _, _, ok := rollout.ParseConfigID(req.GetVersion()); ok {
		c, same, err := s.changeConfig(ctx, actor, ActionRevoke, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(c rollout.Config) (rollout.Config, error) {
			c.Revoked = true
			return c, nil
		})
		if err != nil {
			return nil, err
		}
		return &adminv1.RevokeResponse{ComponentConfig: c, Unchanged: same}, nil
	}
	r, same, err := s.change(ctx, actor, ActionRevoke, req.GetVersion(), req.GetIfRevision(), req.GetReason(), func(r rollout.Release) (rollout.Release, error) {
		r.Revoked = true
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return &adminv1.RevokeResponse{Release: r, Unchanged: same}, nil
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

// Status lists every release (in the store's version order) with its revision, this instance's request
// counts and the serving snapshot's revision.
func (s *Server) Status(ctx context.Context, _ *adminv1.StatusRequest) (*adminv1.StatusResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return nil, s.storeError("list releases", err)
	}
	now := s.now()
	resp := &adminv1.StatusResponse{Region: s.region, Policy: policyProto(s.policy, s.window)}
	if _, ok := s.store.(store.Freezer); ok {
		f, rev, err := s.freeze(ctx)
		if err != nil {
			return nil, err
		}
		resp.Freeze = freezeProto(f, rev)
	}
	var read []rollout.Release // per resp.Releases entry
	// Releases carries no per-record revision; read each record so the
	// revision shown is the one a compare-and-swap must name.
	for _, listed := range rels {
		r, rev, err := s.store.Release(ctx, listed.Version)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, s.storeError("read release "+listed.Version, err)
		}
		p := toProto(r, rev)
		p.Rollout.Approval = s.approvalProto(r, now)
		resp.Releases = append(resp.Releases, p)
		read = append(read, r)
	}
	fleet, err := assess.Assess(ctx, s.evidence, read, now)
	if err != nil {
		return nil, s.storeError("assess releases", err)
	}
	t := fleet.Tally
	var served map[string]uint64
	if s.served != nil {
		served = s.served()
	}
	for i, r := range resp.Releases {
		r.Served = served[r.Version]
		a := fleet.Releases[r.Version]
		r.Counts = countsProto(a.Counts)
		r.Rollout.CanarySeats = int32(a.Counts.Seated)
		if p := read[i].Rollout.Plan; p != nil {
			r.Rollout.Health = healthProto(a.Verdict, *p)
		}
	}
	for _, base := range slices.Sorted(maps.Keys(t.Control)) {
		resp.Control = append(resp.Control, &adminv1.ControlCohort{Base: base, Counts: countsProto(t.Control[base])})
	}
	if s.counts != nil {
		for outcome, n := range s.counts() {
			resp.Requests = append(resp.Requests, &adminv1.OutcomeCount{Outcome: outcome, Count: n})
		}
		slices.SortFunc(resp.Requests, func(a, b *adminv1.OutcomeCount) int { return cmp.Compare(a.Outcome, b.Outcome) })
	}
	hs, err := s.replicas(ctx)
	if err != nil {
		return nil, err
	}
	resp.Replicas = replicasProto(hs, s.replicaID, now, fleet.Clocks)
	snap := s.currentSnapshot()
	if snap != nil {
		resp.SnapshotRevision = snap.Revision
		resp.SnapshotTime = timestamppb.New(snap.Built)
	}
	resp.ServedNow, resp.FailureRateDefinition = servedNow(snap, places(hs), fleet), FailureRateDefinition
	if err := s.statusConfigs(ctx, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func countsProto(c tally.Counts) *adminv1.Counts {
	return &adminv1.Counts{Reported: c.Reported(), Ok: c.OK, Failed: c.Failed, Fallback: c.Fallback, Silent: c.Silent,
		RefusedIntegrity: c.RefusedIntegrity, RefusedDelivery: c.RefusedDelivery, NotApplicable: c.NotApplicable, Pending: c.Pending}
}

// CountsOf reads the API's counts back into the tally's (countsProto's
// inverse), so clients compute rates as the rule does.
func CountsOf(c *adminv1.Counts) tally.Counts {
	return tally.Counts{OK: c.GetOk(), Failed: c.GetFailed(), Fallback: c.GetFallback(), RefusedIntegrity: c.GetRefusedIntegrity(),
		RefusedDelivery: c.GetRefusedDelivery(), NotApplicable: c.GetNotApplicable(), Silent: c.GetSilent(), Pending: c.GetPending()}
}

func healthProto(v regression.Verdict, p rollout.Plan) *adminv1.Health {
	return &adminv1.Health{Verdict: v.Health, Rule: v.Rule, Reason: v.Reason, Detail: v.Detail, NextDue: timestamppb.New(p.Due()),
		BaselineIncumbent: v.Baseline.Incumbent, BaselineRecorded: v.Baseline.Recorded, Baseline: countsProto(v.Baseline.Counts),
		Deadline: timestamppb.New(p.StepDeadline())}
}

func (s *Server) currentSnapshot() *lps.Snapshot {
	if s.snaps == nil {
		return nil
	}
	return s.snaps.Current()
}

// Explain evaluates the serving snapshot for one node at the server's
// time, rule by rule (an expired release fails not-expired). The region
// defaults to this instance's. InvalidArgument for a subscription that is
// not a GUID; Unavailable before the first snapshot.
func (s *Server) Explain(ctx context.Context, req *adminv1.ExplainRequest) (*adminv1.ExplainResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	n := rollout.Node{VMID: req.GetVmId(), SubscriptionID: req.GetSubscriptionId(), Region: req.GetRegion(), DeployEnv: req.GetDeployEnv(), Now: s.now()}
	if n.Region == "" {
		n.Region = s.region
	}
	if n.DeployEnv == "" {
		n.DeployEnv = s.env
	}
	for _, f := range []struct{ name, v string }{{"vm_id", n.VMID}, {"subscription_id", n.SubscriptionID}, {"region", n.Region}, {"deploy_env", n.DeployEnv}} {
		switch {
		case f.v == "" && f.name != "region" && f.name != "deploy_env":
			return nil, status.Errorf(codes.InvalidArgument, "%s is required", f.name)
		case len(f.v) > maxIDLength:
			return nil, status.Errorf(codes.InvalidArgument, "%s longer than %d bytes", f.name, maxIDLength)
		}
	}
	// The subscription is compared with scopes, which hold only GUIDs: a
	// typo would explain a node that cannot exist.
	if err := rollout.CheckScope([]string{n.SubscriptionID}, nil); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "subscription_id: %v", err)
	}
	snap := s.currentSnapshot()
	if snap == nil {
		return nil, status.Error(codes.Unavailable, "no serving snapshot yet; retry shortly")
	}
	if c := req.GetComponent(); c != "" && c != lps.Component {
		return s.explainComponent(snap, c, n)
	}
	// Seats as the store has them: the answer is this node's on any
	// replica.
	seats := make(map[string][]store.Seat)
	for _, r := range snap.Releases {
		if !r.HasCanary() {
			continue
		}
		held, err := s.store.Seats(ctx, r.SeatSet())
		if err != nil && !unreadable(err) { // a seat whose time cannot be read is still a seat
			return nil, s.storeError("list canary seats of "+r.Version, err)
		}
		seats[r.Version] = held
		// Attested vmIds are lower case; an operator may type them in any.
		if slices.ContainsFunc(held, func(h store.Seat) bool { return strings.EqualFold(h.VMID, n.VMID) }) {
			n.Seats = append(n.Seats, r.Version)
		}
	}
	decisions, sel := rollout.Explain(snap.Releases, n)
	plans := make(map[string]rollout.Release)
	for _, r := range snap.Releases {
		if r.Rollout.Plan != nil {
			plans[r.Version] = r
		}
	}
	var fleet assess.Fleet
	if len(plans) > 0 {
		var err error
		if fleet, err = assess.Assess(ctx, s.evidence, snap.Releases, s.now()); err != nil {
			return nil, s.storeError("assess releases", err)
		}
	}
	resp := &adminv1.ExplainResponse{}
	for _, d := range decisions {
		pd := &adminv1.Decision{Version: d.Version, Base: d.Base, Included: d.Included, Chosen: d.Chosen}
		for _, r := range d.Rules {
			if r.Rule == rollout.RuleCanarySeat && !r.Passed {
				r.Detail = seatDetail(plans[d.Version], n, seats[d.Version])
			}
			pd.Rules = append(pd.Rules, &adminv1.Rule{Rule: r.Rule, Passed: r.Passed, Detail: r.Detail})
		}
		// A plan's step and the health rule's verdict decide what this
		// node may be offered next: shown, but they do not gate this answer.
		if r, ok := plans[d.Version]; ok {
			v := fleet.Releases[r.Version].Verdict
			pd.Rules = append(pd.Rules,
				&adminv1.Rule{Rule: "plan", Passed: true, Detail: planDetail(r, s.window)},
				&adminv1.Rule{Rule: "health", Passed: v.Health != regression.Regressing, Detail: v.Health + ": " + v.Detail})
		}
		resp.Decisions = append(resp.Decisions, pd)
	}
	if !sel.Empty() {
		ptr, err := sel.Pointer().MarshalJSON()
		if err != nil {
			return nil, s.internal("encode pointer", err)
		}
		resp.PointerJson = string(ptr)
	}
	trust, err := s.baseTrust(ctx, decisions)
	if err != nil {
		return nil, err
	}
	resp.Trust = trust
	return resp, nil
}

// baseTrust says, for each base of decisions, what its nodes verify: the
// newest key set's threshold and log policy for nodes that walk the chain,
// and one signature and no log for images baked before it, with the
// answers this instance gave each kind.
func (s *Server) baseTrust(ctx context.Context, decisions []rollout.Decision) ([]*adminv1.BaseTrust, error) {
	keys, _, err := s.currentKeys(ctx)
	if err != nil && status.Code(err) != codes.FailedPrecondition {
		return nil, err
	}
	var counts map[string]lps.TrustCounts
	if s.trust != nil {
		counts = s.trust()
	}
	var out []*adminv1.BaseTrust
	seen := map[string]bool{}
	for _, d := range decisions {
		if seen[d.Base] {
			continue
		}
		seen[d.Base] = true
		c := counts[d.Base]
		bt := &adminv1.BaseTrust{Base: d.Base, NodesDeclared: c.Declared, NodesLegacy: c.None}
		switch {
		case keys == nil && err != nil:
			bt.Detail = "the key-set chain does not verify now: nodes that walked it refuse every release until the next version is published"
		case keys == nil:
			bt.Detail = "lpsd has no --release-keys: what nodes verify depends only on the key file their image was baked with"
		default:
			bt.KeysetVersion, bt.Threshold, bt.LogRequired = keys.Version(), int32(keys.Threshold()), keys.Log().Required
			log := "no log"
			if bt.LogRequired {
				log = "an inclusion proof under a checkpoint of its witnesses"
			}
			bt.Detail = fmt.Sprintf("nodes that walk the chain to key-set version %d need %d of its %d keys' signatures and %s; images baked before release trust v2 accept one signature by a baked key and know no log", keys.Version(), keys.Threshold(), len(keys.KeyIDs()), log)
		}
		if c.Declared+c.None > 0 {
			bt.Detail += fmt.Sprintf(" (this instance answered %d nodes of %s that declared a key-set version, %d that declared none)", c.Declared, d.Base, c.None)
		}
		out = append(out, bt)
	}
	return out, nil
}

// seatDetail says why a node holds no seat of r's canary, with held of
// them taken, and whether it would take one.
func seatDetail(r rollout.Release, n rollout.Node, held []store.Seat) string {
	limit := r.Rollout.Plan.Current().Nodes
	share := r.SeatsPerSubscription(limit)
	ofSub := 0
	for _, h := range held {
		if strings.EqualFold(h.SubscriptionID, n.SubscriptionID) {
			ofSub++
		}
	}
	switch {
	case r.OpenSeats(n) == 0:
		return fmt.Sprintf("holds none of the canary's %d seats (%d held); the canary hands out none while %s", limit, len(held), r.Rollout.State)
	case len(held) >= limit:
		return fmt.Sprintf("holds none of the canary's %d seats: all are held by other nodes", limit)
	case share > 0 && ofSub >= share:
		return fmt.Sprintf("holds none of the canary's %d seats (%d held): its subscription's nodes hold %d, the most one subscription may (the seats are spread over the scope's subscriptions)", limit, len(held), ofSub)
	default:
		return fmt.Sprintf("holds none of the canary's %d seats (%d held): it takes a free one on its next request", limit, len(held))
	}
}

// planDetail says where a planned release's plan stands and what moves it
// next.
func planDetail(r rollout.Release, w autopilot.Window) string {
	p := r.Rollout.Plan
	at := fmt.Sprintf("step %d/%d at %d%%", p.Step+1, len(p.Steps), r.Rollout.Percent)
	if c := p.Current(); c.Canary() {
		at = fmt.Sprintf("step %d/%d, a canary of %d nodes", p.Step+1, len(p.Steps), c.Nodes)
	}
	switch {
	case r.Revoked:
		return at + "; revoked: the plan no longer runs"
	case r.Rollout.State == rollout.Complete:
		return at + "; complete"
	case r.Rollout.State == rollout.Rolling:
		s := fmt.Sprintf("%s; the next is due %s once %d reports are in", at, p.Due().UTC().Format(time.RFC3339), p.Current().MinReports)
		if w.String() != "" {
			s += ", and advances only " + w.String() + " (lpsd --advance-window)"
		}
		return s
	default:
		return fmt.Sprintf("%s; %s: the plan waits until an operator resumes it", at, r.Rollout.State)
	}
}

// ListAudit returns audit entries after a sequence number that match the
// request's filters (target, actor, since), oldest first; a limit of 0
// means 100, and at most 1000 are returned. One call examines at most
// maxAuditScan entries: next_after_seq and more say where to go on.
func (s *Server) ListAudit(ctx context.Context, req *adminv1.ListAuditRequest) (*adminv1.ListAuditResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	after, limit := req.GetAfterSeq(), int(req.GetLimit())
	switch {
	case after < 0:
		return nil, status.Errorf(codes.InvalidArgument, "after_seq %d is negative", after)
	case limit < 0:
		return nil, status.Errorf(codes.InvalidArgument, "limit %d is negative", limit)
	case limit == 0:
		limit = defaultAuditLimit
	case limit > maxAuditLimit:
		limit = maxAuditLimit
	}
	var since time.Time
	if ts := req.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "since: %v", err)
		}
		since = ts.AsTime()
	}
	if a := req.GetAction(); a != "" && !slices.Contains(Actions(), a) {
		return nil, status.Errorf(codes.InvalidArgument, "action %q: want one of %s", a, strings.Join(Actions(), ", "))
	}
	match := func(e store.AuditEntry) bool {
		return (req.GetTarget() == "" || e.Target == req.GetTarget()) &&
			(req.GetActor() == "" || e.Actor == req.GetActor()) &&
			(req.GetAction() == "" || e.Action == req.GetAction()) &&
			(since.IsZero() || !e.Time.Before(since))
	}
	filtered := req.GetTarget() != "" || req.GetActor() != "" || req.GetAction() != "" || !since.IsZero()
	resp := &adminv1.ListAuditResponse{NextAfterSeq: after}
	scanned := 0
	for {
		// Unfiltered, every entry read is returned: read no more than the
		// page needs.
		chunk := min(auditChunk, maxAuditScan-scanned)
		if !filtered {
			chunk = limit - len(resp.Entries)
		}
		entries, err := s.store.Audit(ctx, resp.NextAfterSeq, chunk)
		if err != nil {
			return nil, s.storeError("read audit log", err)
		}
		for _, e := range entries {
			resp.NextAfterSeq = e.Seq
			scanned++
			if match(e) {
				resp.Entries = append(resp.Entries, auditProto(e))
				if len(resp.Entries) == limit {
					// Stopped at the limit: later entries, read or not,
					// are for the next call.
					resp.More = true
					return resp, nil
				}
			}
		}
		if len(entries) < chunk {
			return resp, nil // the end of the log
		}
		if scanned >= maxAuditScan {
			resp.More = true
			return resp, nil
		}
	}
}

func auditProto(e store.AuditEntry) *adminv1.AuditEntry {
	return &adminv1.AuditEntry{
		Seq:          e.Seq,
		Time:         timestamppb.New(e.Time),
		Actor:        e.Actor,
		Action:       e.Action,
		Target:       e.Target,
		BeforeJson:   rawText(e.Before),
		AfterJson:    rawText(e.After),
		EvidenceJson: rawText(e.Evidence),
		Reason:       e.Reason,
	}
}

// rawText returns JSON as text, with null as "".
func rawText(m json.RawMessage) string {
	if t := bytes.TrimSpace(m); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		return string(t)
	}
	return ""
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
