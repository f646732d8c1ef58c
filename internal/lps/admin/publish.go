package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

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

// ReasonBelowThreshold is the ErrorInfo reason of an envelope signed by
// fewer distinct release keys than lpsd's key set requires. Metadata:
// "signers" (the key IDs whose signature verifies, comma-separated),
// "missing" and "threshold" (decimal).
const ReasonBelowThreshold = "BELOW_THRESHOLD"

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
