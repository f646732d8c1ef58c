package lps

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// ServedBudget is the largest pointer document lpsd serves: a quarter
// under what nodes accept (hotfix.MaxPointerSize), since a node merges it
// into the pointer it has staged. A publish that would take a base's
// document past it is refused (PointerSize).
const ServedBudget = hotfix.MaxPointerSize * 3 / 4

// Trust evidence within ServedBudget. A node that declared its base is
// served the key-set links after its version (at most MaxChainBytes in
// all, which lpsd refuses to publish past) and a log bundle: a checkpoint
// with its cosignatures and two proofs, logarithmic in the log's size
// (about 2 KiB at a million records), which EvidenceAllowance bounds for
// logs up to 2^32 records and 16 witnesses. Publishing keeps the pointer,
// the chain and the allowance together under the budget.
const (
	MaxChainBytes     = 24 << 10
	EvidenceAllowance = 6 << 10
)

// Wire constants shared with the node client (internal/node/lpsclient),
// pinned by the reference.
const (
	// Component is the agent's component, served from releases; every
	// other name is served from component configurations.
	Component = "aksNodeController"
	// DefaultServerName is the name nodes verify the service certificate
	// for.
	DefaultServerName = "aks-security-patch.data.mcr.microsoft.com"
)

// statusText is the whole message of each failure code: it never says
// which check failed, so the wire carries no oracle for forging documents.
// The reason goes to the log and the metrics only.
var statusText = map[codes.Code]string{
	codes.NotFound:         "no configuration for this node",
	codes.Unauthenticated:  "unauthenticated",
	codes.PermissionDenied: "permission denied",
	codes.Unavailable:      "service unavailable",
	codes.Internal:         "internal error",
}

// fail counts a request that ended with outcome o and returns the uniform
// status for it.
func fail(m *Metrics, o string) error {
	m.count(o)
	c := outcomeCodes[o]
	return status.Error(c, statusText[c])
}

// snapshots gives the serving snapshot; *Snapshotter is one.
type snapshots interface {
	// Current returns the latest snapshot, or nil before the first. It
	// must not block.
	Current() *Snapshot
}

// Service answers the node-facing LivePatchingService from the current
// snapshot. It touches the store only to hand out canary seats (Seats),
// at most once per seat and replica after they are all held. It relies on the interceptors that
// Server installs: a request whose ctx carries no verified identity fails
// with Internal, so a Service registered without them fails closed. Safe
// for concurrent use.
type Service struct {
	lpsv1.UnimplementedLivePatchingServiceServer
	snaps  snapshots
	seats  *Seats
	m      *Metrics
	region string
	log    *slog.Logger
	now    func() time.Time
	// served records what is served to reporting nodes' boots; nil
	// records nothing. boots bounds the boots recorded per vmId, as the
	// report service bounds reports: a VM inventing boot IDs must not grow
	// the store without end.
	served *batcher[store.Served]
	boots  *bootLimit
	// replica is this instance's ID in the served records it writes.
	replica string
	// deployEnv is this instance's deploy-environment label (SetDeployEnv).
	deployEnv string
}

// servedWait bounds how long an answer waits for its served record: the
// record is what counts a node that never reports, but serving never waits
// on a slow store for long (nodes give up after 3 s).
const servedWait = 500 * time.Millisecond

// Attribution results, for lpsd_served_records_total.
const (
	servedRecorded     = "recorded"
	servedUnrecorded   = "unrecorded"
	servedUnattributed = "unattributed"
	servedTooManyBoots = "too-many-boots"
)

// SetDeployEnv sets this instance's deploy-environment label, matched
// against rollouts' deploy-environment scopes as region is against region
// scopes ("" matches only rollouts without one). Call it before serving.
func (s *Service) SetDeployEnv(env string) { s.deployEnv = env }

// NewService returns a Service serving from snaps and counting into m.
// seats hands out canary seats; nil hands out none, so a release at a
// canary step reaches no node. region is this instance's region label,
// matched against rollout regions ("" matches only releases without a
// region scope). A nil log discards.
func NewService(snaps snapshots, seats *Seats, m *Metrics, region string, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{snaps: snaps, seats: seats, m: m, region: region, log: log, now: time.Now, boots: newBootLimit()}
}

// GetComponentConfig returns the caller's hotfix pointer: the unexpired
// releases its rollouts select for it and every revoked version, as the
// JSON pointer document. The caller is the identity the auth interceptor verified.
//
// NotFound for another component or when nothing applies (the node treats
// both as "no hotfix"); Unavailable before the first snapshot (the node may
// fall back to its cold-start pointer).
func (s *Service) GetComponentConfig(ctx context.Context, req *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
	id, ok := identityFrom(ctx)
	if !ok {
		s.log.Error("request reached the handler without a verified identity")
		return nil, fail(s.m, outcomeInternal)
	}
	if req.GetComponentName() != Component {
		return s.componentConfig(id, req.GetComponentName())
	}
	snap := s.snaps.Current()
	if snap == nil {
		return nil, fail(s.m, outcomeUnavailable)
	}
	c := declared(ctx)
	base := c.base
	n := rollout.Node{VMID: id.VMID, SubscriptionID: id.SubscriptionID, Region: s.region, DeployEnv: s.deployEnv, Base: base, Now: s.now()}
	// A seat goes only to a node that declared it reports and a boot the
	// boot limit admits, the boots lpsd records as served, so every holder
	// counts for the release (silent if it never reports). Before, one
	// that declared no boot held a seat and counted nowhere, so a canary
	// whose minimum is its seats waited for it until its deadline.
	n.Seats = s.seats.Held(ctx, snap, n, c.reports && c.boot != "" && s.boots.admit(id.VMID, c.boot, n.Now))
	sel := rollout.Select(snap.Releases, n)
	s.m.countExpired(sel.Expired)
	if sel.Empty() {
		s.log.Debug("nothing applies", "vm_id", id.VMID, "revision", snap.Revision)
		return nil, fail(s.m, outcomeNotFound)
	}
	body, err := withEvidence(ctx, sel.Pointer(), snap.log, c).MarshalJSON()
	if err == nil && len(body) > ServedBudget && base == "" {
		// A node that declared no base gets every base's hotfix: past the
		// budget, without the envelopes (reference readers use none).
		s.m.trimmed.Inc()
		body, err = sel.Trimmed().Pointer().MarshalJSON()
	}
	if err != nil {
		s.log.Error("encode pointer", "vm_id", id.VMID, "revision", snap.Revision, "err", err)
		return nil, fail(s.m, outcomeInternal)
	}
	if len(body) > ServedBudget {
		// The node would refuse it: say Unavailable, so it falls back to
		// its cold-start pointer, rather than count it served.
		s.log.Error("pointer over the served budget", "vm_id", id.VMID, "base", base, "bytes", len(body), "budget", ServedBudget, "revision", snap.Revision)
		return nil, fail(s.m, outcomeOverBudget)
	}
	s.record(ctx, id, c, sel, n.Now)
	s.m.servedBytes.Observe(float64(len(body)))
	s.m.countServed(sel.Hotfixes)
	if _, ok := sel.Hotfixes[base]; ok && base != "" {
		// Only bases with a release: a VM declaring invented bases adds no
		// label.
		s.m.countTrust(base, c.keySet > 0)
	}
	s.m.count(outcomeServed)
	s.log.Debug("pointer served", "vm_id", id.VMID, "revision", snap.Revision, "hotfixes", len(sel.Hotfixes), "revoked", len(sel.Revoked))
	return &lpsv1.GetComponentConfigResponse{ComponentName: Component, Config: string(body)}, nil
}

// withEvidence adds to p the trust evidence for a node of ours (one that
// declared its base): the key-set links after the version it declared and
// the log bundle proving p's release envelopes. Reference nodes
// declare no base and get none: they would not read it.
func withEvidence(ctx context.Context, p hotfix.Pointer, lg *servedLog, c caller) hotfix.Pointer {
	if lg == nil || c.base == "" {
		return p
	}
	p.KeySets = lg.links(max(c.keySet, 1))
	// Links are proven by their signatures; only releases need proofs.
	b, err := lg.bundle(ctx, p.Releases, c.logSize)
	if err == nil {
		p.Log = b
	}
	return p
}

// record stores that the caller's boot was served its base's hotfix in
// sel, waiting at most servedWait: a node whose record is lost is still
// served (fail-open), and counts for the release only if it reports.
func (s *Service) record(ctx context.Context, id attest.Identity, c caller, sel rollout.Selection, now time.Time) {
	v, ok := sel.Hotfixes[c.base]
	if !ok || c.base == "" {
		return
	}
	if c.boot == "" || s.served == nil {
		s.m.servedRecs.WithLabelValues(servedUnattributed).Inc()
		return
	}
	if !s.boots.admit(id.VMID, c.boot, now) {
		s.m.servedRecs.WithLabelValues(servedTooManyBoots).Inc()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, servedWait)
	defer cancel()
	if _, err := s.served.put(ctx, store.Served{
		Version: v, VMID: id.VMID, Boot: c.boot, Base: c.base, SubscriptionID: id.SubscriptionID, Time: now, Replica: s.replica,
	}); err != nil {
		s.m.servedRecs.WithLabelValues(servedUnrecorded).Inc()
		s.log.Warn("served record not stored; the node counts only if it reports", "vm_id", id.VMID, "version", v, "err", err)
		return
	}
	s.m.servedRecs.WithLabelValues(servedRecorded).Inc()
}

// componentConfig answers for a component other than the agent: the
// highest-versioned published configuration whose rollout includes the
// caller, in its served form (release.ServedComponent). NotFound when none
// does, as for a component nothing was ever published for; Unavailable
// before the first snapshot.
func (s *Service) componentConfig(id attest.Identity, component string) (*lpsv1.GetComponentConfigResponse, error) {
	snap := s.snaps.Current()
	if snap == nil {
		return nil, fail(s.m, outcomeUnavailable)
	}
	if !snap.HasComponent(component) {
		return nil, fail(s.m, outcomeUnknownComponent)
	}
	n := rollout.Node{VMID: id.VMID, SubscriptionID: id.SubscriptionID, Region: s.region, DeployEnv: s.deployEnv, Now: s.now()}
	c, ok := rollout.SelectConfig(snap.Configs, component, n)
	body := snap.served[c.ID()]
	if !ok || body == nil {
		s.log.Debug("no component config applies", "vm_id", id.VMID, "component", component, "revision", snap.Revision)
		return nil, fail(s.m, outcomeNotFound)
	}
	s.m.servedBytes.Observe(float64(len(body)))
	s.m.count(outcomeServed)
	s.log.Debug("component config served", "vm_id", id.VMID, "component", component, "version", c.Version, "revision", snap.Revision)
	return &lpsv1.GetComponentConfigResponse{ComponentName: component, Config: string(body)}, nil
}
