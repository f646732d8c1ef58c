package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// PublishComponentConfig stores a signed component configuration as a
// draft rollout. InvalidArgument for an envelope that is malformed,
// expired or (with ReleaseKeys) not verified, or one for aksNodeController,
// whose configuration is its releases; AlreadyExists if that version of
// the component is published with another envelope.
func (s *Server) PublishComponentConfig(ctx context.Context, req *adminv1.PublishComponentConfigRequest) (*adminv1.PublishComponentConfigResponse, error) {
	actor, env, err := publishRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	now := s.now()
	keys, _, err := s.currentKeys(ctx)
	if err != nil {
		return nil, err
	}
	cc, err := checkComponentEnvelope(keys, env, now)
	if err != nil {
		return nil, envelopeError(err, keys)
	}
	if cc.Component == lps.Component {
		return nil, status.Errorf(codes.InvalidArgument, "envelope rejected: %s is served from releases (lpsctl release publish), not from a component configuration", lps.Component)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "envelope rejected: %v", err)
	}
	c := rollout.Config{
		Component:   cc.Component,
		Version:     cc.Version,
		Envelope:    compact.Bytes(),
		Rollout:     rollout.Rollout{State: rollout.Draft},
		NotAfter:    cc.NotAfter,
		PublishedAt: now,
		UpdatedAt:   now,
	}
	if err := c.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "envelope rejected: %v", err)
	}
	if body, err := c.Served(); err != nil || len(body) > lps.ServedBudget {
		return nil, status.Errorf(codes.FailedPrecondition, "%s would be served as %d bytes, over the %d bytes lpsd serves: make the configuration smaller", c.ID(), len(body), lps.ServedBudget)
	}
	var cur rollout.Config
	rev, same, err := s.publish(ctx, "component config", c, c.Envelope, store.AuditEntry{
		Time: now, Actor: actor, Action: ActionPublish, Target: c.ID(), Reason: req.GetReason(),
	}, func(ctx context.Context, e store.AuditEntry) (int64, error) {
		return s.store.PutConfig(ctx, c, 0, e)
	}, func(ctx context.Context) (json.RawMessage, int64, error) {
		got, rev, err := s.store.Config(ctx, c.Component, c.Version)
		cur = got
		return got.Envelope, rev, err
	}, "a version is published once; sign the change as a new version")
	if err != nil {
		return nil, err
	}
	if same {
		return &adminv1.PublishComponentConfigResponse{ComponentConfig: configProto(cur, rev), Unchanged: true}, nil
	}
	s.log.Info("component config published", "config", c.ID(), "actor", actor, "revision", rev)
	return &adminv1.PublishComponentConfigResponse{ComponentConfig: configProto(c, rev)}, nil
}

// checkComponentEnvelope is checkEnvelope for component configurations.
func checkComponentEnvelope(keys *release.KeySet, env []byte, now time.Time) (release.ComponentConfig, error) {
	if keys != nil {
		return keys.VerifyComponent(env, now)
	}
	c, err := release.InspectComponent(env)
	if err != nil {
		return release.ComponentConfig{}, err
	}
	if !now.Before(c.NotAfter) {
		return release.ComponentConfig{}, fmt.Errorf("%s expired at %s", rollout.ConfigID(c.Component, c.Version), c.NotAfter.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// changeConfig is change for the component configuration id names
// ("<component>@<version>").
func (s *Server) changeConfig(ctx context.Context, actor, action, id string, ifRev int64, reason string, apply func(rollout.Config) (rollout.Config, error)) (*adminv1.ComponentConfig, bool, error) {
	component, version, ok := rollout.ParseConfigID(id)
	if !ok {
		return nil, false, status.Errorf(codes.InvalidArgument, "component config %q: want <component>@<version>", id)
	}
	if ifRev < 0 {
		return nil, false, status.Errorf(codes.InvalidArgument, "if_revision %d is negative", ifRev)
	}
	cur, rev, err := s.store.Config(ctx, component, version)
	if err != nil {
		return nil, false, s.storeError("read component config "+id, err)
	}
	if ifRev != 0 && ifRev != rev {
		return nil, false, conflict(id, ifRev)
	}
	next, err := apply(cur)
	if err != nil {
		return nil, false, domainError(err)
	}
	if next.Revoked == cur.Revoked && reflect.DeepEqual(next.Rollout, cur.Rollout) {
		return configProto(cur, rev), true, nil
	}
	now := s.now()
	next.UpdatedAt = now
	newRev, err := s.write(ctx, "component config", cur, next, rev, store.AuditEntry{
		Time: now, Actor: actor, Action: action, Target: id, Reason: reason,
	}, func(ctx context.Context, e store.AuditEntry) (int64, error) {
		return s.store.PutConfig(ctx, next, rev, e)
	})
	if err != nil {
		return nil, false, err
	}
	s.log.Info("component config changed", "action", action, "config", id, "actor", actor, "revision", newRev,
		"state", next.Rollout.State, "percent", next.Rollout.Percent, "revoked", next.Revoked)
	return configProto(next, newRev), false, nil
}

// statusConfigs adds every component configuration, with its revision,
// and this instance's deploy environment to resp.
func (s *Server) statusConfigs(ctx context.Context, resp *adminv1.StatusResponse) error {
	resp.DeployEnv = s.env
	configs, _, err := s.store.Configs(ctx)
	if err != nil {
		return s.storeError("list component configs", err)
	}
	for _, listed := range configs {
		c, rev, err := s.store.Config(ctx, listed.Component, listed.Version)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return s.storeError("read component config "+listed.ID(), err)
		}
		resp.ComponentConfigs = append(resp.ComponentConfigs, configProto(c, rev))
	}
	return nil
}

// explainComponent answers Explain for a component other than the agent,
// from the serving snapshot.
func (s *Server) explainComponent(snap *lps.Snapshot, component string, n rollout.Node) (*adminv1.ExplainResponse, error) {
	if !release.ValidComponentName(component) {
		return nil, status.Errorf(codes.InvalidArgument, "component %q: want a letter, then letters and digits, at most 64", component)
	}
	decisions, chosen, found := rollout.ExplainConfigs(snap.Configs, component, n)
	resp := &adminv1.ExplainResponse{}
	for _, d := range decisions {
		pd := &adminv1.Decision{Version: d.Version, Included: d.Included, Chosen: d.Chosen}
		for _, r := range d.Rules {
			pd.Rules = append(pd.Rules, &adminv1.Rule{Rule: r.Rule, Passed: r.Passed, Detail: r.Detail})
		}
		resp.Decisions = append(resp.Decisions, pd)
	}
	if found {
		body, err := chosen.Served()
		if err != nil {
			return nil, s.internal("encode component config", err)
		}
		resp.ConfigJson = string(body)
	}
	return resp, nil
}

// configProto returns c as the API shows it.
func configProto(c rollout.Config, rev int64) *adminv1.ComponentConfig {
	c = c.WithNotAfter()
	var notAfter *timestamppb.Timestamp
	if !c.NotAfter.IsZero() {
		notAfter = timestamppb.New(c.NotAfter)
	}
	var config string
	if cc, err := release.InspectComponent(c.Envelope); err == nil {
		config = cc.Config
	}
	return &adminv1.ComponentConfig{
		Component:    c.Component,
		Version:      c.Version,
		EnvelopeJson: string(c.Envelope),
		ConfigJson:   config,
		Rollout:      rolloutProto(c.Rollout),
		Revoked:      c.Revoked,
		PublishedAt:  timestamppb.New(c.PublishedAt),
		UpdatedAt:    timestamppb.New(c.UpdatedAt),
		Revision:     rev,
		NotAfter:     notAfter,
	}
}

// rolloutProto returns ro as the API shows it.
func rolloutProto(ro rollout.Rollout) *adminv1.Rollout {
	return &adminv1.Rollout{
		State:         string(ro.State),
		Percent:       int32(ro.Percent),
		Subscriptions: slices.Clone(ro.Subscriptions),
		Regions:       slices.Clone(ro.Regions),
		DeployEnvs:    slices.Clone(ro.DeployEnvs),
		Plan:          planToProto(ro.Plan),
	}
}
