package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// ActionRotateKeys is the audit action of a published key-set version.
const ActionRotateKeys = "rotate-keys"

// minLinkLife is the least time a published link must have before it
// expires: once the newest link has, nodes refuse every release until the
// next one is published.
const minLinkLife = 7 * 24 * time.Hour

// currentKeys returns the newest release key set: the root (lpsd's
// --release-keys) walked through every published link, and the links.
// nil, nil, nil when lpsd has no root. A chain that does not verify now
// (its newest link expired, say) is FailedPrecondition: nodes would refuse
// every release until the next rotation is published.
func (s *Server) currentKeys(ctx context.Context) (*release.KeySet, []store.KeySetRecord, error) {
	ks, links, err := s.chain(ctx, false)
	return ks, links, err
}

// chain walks the stored links from the root, checking the newest link's
// expiry unless ignoreExpiry (a rotation may succeed an expired link:
// nodes check only the newest link's expiry, and the new one is the
// newest). Links are walked release.MaxChain at a time, as a node walks
// what it kept.
func (s *Server) chain(ctx context.Context, ignoreExpiry bool) (*release.KeySet, []store.KeySetRecord, error) {
	if s.keys == nil {
		return nil, nil, nil
	}
	links, err := s.store.KeySets(ctx)
	var ue *store.UnreadableError
	if errors.As(err, &ue) {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "key-set versions %s cannot be read: restore them before changing anything signed", strings.Join(ue.Keys, ", "))
	}
	if err != nil {
		return nil, nil, s.storeError("list key sets", err)
	}
	ks := *s.keys
	for start := 0; start < len(links); start += release.MaxChain {
		batch := links[start:min(len(links), start+release.MaxChain)]
		raw := make([][]byte, len(batch))
		for i, l := range batch {
			raw[i] = l.Envelope
		}
		at := s.now()
		last, derr := release.InspectKeySet(raw[len(raw)-1])
		if derr == nil && (ignoreExpiry || start+len(batch) < len(links)) && !last.Expires.IsZero() {
			// Only the newest link's expiry counts.
			at = last.Expires.Add(-time.Second)
		}
		if ks, err = ks.Walk(raw, at); err != nil {
			return nil, nil, status.Errorf(codes.FailedPrecondition, "the release key-set chain lpsd serves does not verify from its --release-keys (%v): nodes refuse every release until it does; sign the next version from the newest (lpsctl keys rotate --current) and publish it (lpsctl keys publish)", err)
		}
	}
	return &ks, links, nil
}

// PublishKeySet stores the next key-set version: a link the current set's
// threshold and its own have signed. It is appended to the log with it.
func (s *Server) PublishKeySet(ctx context.Context, req *adminv1.PublishKeySetRequest) (*adminv1.PublishKeySetResponse, error) {
	actor, env, err := publishRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	if s.keys == nil {
		return nil, status.Error(codes.FailedPrecondition, "lpsd has no --release-keys: there is no key set to rotate from; start it with the key file nodes are baked with")
	}
	cur, links, err := s.chain(ctx, true)
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "envelope rejected: %v", err)
	}
	for _, l := range links {
		if bytes.Equal(l.Envelope, compact.Bytes()) {
			return &adminv1.PublishKeySetResponse{KeySet: s.keySetProto(l.Envelope), Unchanged: true}, nil
		}
	}
	next, err := cur.Next(env, s.now())
	if err != nil {
		return nil, keySetError(err, cur)
	}
	if n := next.Version() - s.keys.Version(); n > release.MaxChain {
		return nil, status.Errorf(codes.FailedPrecondition, "version %d would be %d links past lpsd's root (version %d), and a node baked with the root walks at most %d: re-bake images with a newer key set (lpsctl keys init from the newest), restart lpsd with it as --release-keys, then rotate", next.Version(), n, s.keys.Version(), release.MaxChain)
	}
	if left := next.Expires().Sub(s.now()); left < minLinkLife {
		return nil, status.Errorf(codes.FailedPrecondition, "version %d expires in %s: once it has, nodes refuse every release until the next version is published; sign it with a --valid-for of at least %s", next.Version(), left.Round(time.Minute), minLinkLife)
	}
	if err := s.checkLogPolicy(ctx, next.Log()); err != nil {
		return nil, err
	}
	total := compact.Len()
	for _, l := range links {
		total += len(l.Envelope)
	}
	if total > lps.MaxChainBytes {
		return nil, status.Errorf(codes.FailedPrecondition, "the key-set chain would be %d bytes, over the %d a node baked with version %d is served beside its release", total, lps.MaxChainBytes, s.keys.Version())
	}
	if err := s.checkChainBudget(ctx, total); err != nil {
		return nil, err
	}
	rec := store.KeySetRecord{Version: next.Version(), Envelope: compact.Bytes()}
	target := "keyset@" + strconv.FormatInt(rec.Version, 10)
	if err := s.checkAppend(ctx, "publish "+target, ""); err != nil {
		return nil, err
	}
	e := store.AuditEntry{Time: s.now(), Actor: actor, Action: ActionRotateKeys, Target: target, Reason: req.GetReason()}
	if e.After, err = json.Marshal(keySetSummary(next)); err != nil {
		return nil, s.internal("encode key set", err)
	}
	if err := s.store.PutKeySet(ctx, rec, e); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, status.Errorf(codes.Aborted, "another key-set version was published meanwhile: list them (lpsctl keys list) and rotate from the newest")
		}
		return nil, s.storeError("publish "+target, err)
	}
	s.log.Info("key set published", "version", rec.Version, "threshold", next.Threshold(), "keys", len(next.KeyIDs()), "actor", actor)
	return &adminv1.PublishKeySetResponse{KeySet: s.keySetProto(rec.Envelope)}, nil
}

// checkChainBudget refuses a chain of chain bytes that, beside a base's
// largest pointer and the log evidence, would take a node's document over
// lps.ServedBudget.
func (s *Server) checkChainBudget(ctx context.Context, chain int) error {
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return s.storeError("list releases", err)
	}
	now := s.now()
	seen := map[string]bool{}
	for i := range rels {
		rels[i] = rels[i].WithNotAfter()
	}
	for _, r := range rels {
		if seen[r.Base] {
			continue
		}
		seen[r.Base] = true
		declared, _, err := rollout.PointerSizes(rels, r.Base, now)
		if err != nil {
			return s.internal("size pointer", err)
		}
		if declared+chain+lps.EvidenceAllowance > lps.ServedBudget {
			return status.Errorf(codes.FailedPrecondition, "a node of base %s would be served a %d-byte pointer, %d bytes of key-set links and up to %d of log proofs, over the %d bytes lpsd serves: keep key sets smaller (fewer keys and signatures)", r.Base, declared, chain, lps.EvidenceAllowance, lps.ServedBudget)
		}
	}
	return nil
}

// checkLogPolicy refuses a key set whose log policy nodes could not
// satisfy from what lpsd serves: keys of the wrong kind, a quorum beyond
// its witnesses, and, when it requires the log, a kept checkpoint that the
// policy does not open now (no checkpoint, another log, too few of its
// witnesses' cosignatures, or stale). Nodes would refuse every release
// from the moment they walked to it.
func (s *Server) checkLogPolicy(ctx context.Context, p release.LogPolicy) error {
	if p.Key == "" {
		return nil
	}
	pol, err := translog.NewPolicy(p.Key, p.Witnesses, p.Quorum, p.MaxCheckpointAge)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "the key set's log policy: %v", err)
	}
	if !p.Required {
		return nil
	}
	_, note, err := s.store.Checkpoint(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return status.Errorf(codes.FailedPrecondition, "the key set requires the transparency log %s, and lpsd keeps no checkpoint yet: start lpsd with --log-key (and its --witness list), wait for its first checkpoint, then publish", pol.Log.Name())
	}
	if err != nil {
		return s.storeError("read checkpoint", err)
	}
	if _, _, err := translog.Open(note, pol, s.now()); err != nil {
		return status.Errorf(codes.FailedPrecondition, "the key set requires the transparency log %s with %d of its %d witnesses, but lpsd's checkpoint does not satisfy it (%v): nodes would refuse every release; run lpsd with that --log-key and --witness list (and --witness-quorum), then publish", pol.Log.Name(), p.Quorum, len(p.Witnesses), err)
	}
	return nil
}

// keySetError maps a refused link to a status: below either threshold is
// FailedPrecondition (co-sign it), anything else InvalidArgument.
func keySetError(err error, cur *release.KeySet) error {
	var ve *release.VerifyError
	if errors.As(err, &ve) && ve.Reason == release.ReasonBelowThreshold {
		return status.Errorf(codes.FailedPrecondition, "key set not signed by enough keys (%v): co-sign it with lpsctl keys rotate --envelope and publish again", err)
	}
	return status.Errorf(codes.InvalidArgument, "key set rejected as the successor of version %d: %v", cur.Version(), err)
}

// ListKeySets lists the root and the published links.
func (s *Server) ListKeySets(ctx context.Context, _ *adminv1.ListKeySetsRequest) (*adminv1.ListKeySetsResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	resp := &adminv1.ListKeySetsResponse{}
	if s.keys != nil {
		resp.Root = keySetToProto(*s.keys, nil)
	}
	links, err := s.store.KeySets(ctx)
	var ue *store.UnreadableError
	if err != nil && !errors.As(err, &ue) {
		return nil, s.storeError("list key sets", err)
	}
	for _, l := range links {
		resp.Links = append(resp.Links, s.keySetProto(l.Envelope))
	}
	if ue != nil {
		return resp, status.Errorf(codes.DataLoss, "key-set versions %s cannot be read", strings.Join(ue.Keys, ", "))
	}
	return resp, nil
}

// keySetProto describes a stored link, unverified (what it says).
func (s *Server) keySetProto(env []byte) *adminv1.KeySet {
	d, err := release.InspectKeySet(env)
	if err != nil {
		return &adminv1.KeySet{EnvelopeJson: string(env)}
	}
	ks, err := d.KeySet()
	if err != nil {
		return &adminv1.KeySet{Version: d.Version, EnvelopeJson: string(env)}
	}
	return keySetToProto(ks, env)
}

func keySetToProto(ks release.KeySet, env []byte) *adminv1.KeySet {
	p := ks.Log()
	out := &adminv1.KeySet{
		Version: ks.Version(), Threshold: int32(ks.Threshold()), KeyIds: ks.KeyIDs(),
		LogKey: p.Key, Witnesses: p.Witnesses, WitnessQuorum: int32(p.Quorum),
		MaxCheckpointAgeSeconds: int64(p.MaxCheckpointAge.Seconds()), LogRequired: p.Required,
		EnvelopeJson: string(env),
	}
	if !ks.Expires().IsZero() {
		out.Expires = timestamppb.New(ks.Expires())
	}
	return out
}

// keySetSummary is a key set as the audit log records it.
func keySetSummary(ks release.KeySet) map[string]any {
	return map[string]any{"version": ks.Version(), "threshold": ks.Threshold(), "keys": ks.KeyIDs(), "log_required": ks.Log().Required}
}
