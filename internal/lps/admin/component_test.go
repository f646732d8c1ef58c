package admin

import (
	"crypto/ed25519"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/release"
)

func signedComponent(t *testing.T, priv ed25519.PrivateKey, component string, version int64) string {
	t.Helper()
	env, err := release.SignComponent(release.ComponentConfig{
		Component: component, Version: version, Config: `{"corefile":"v` + string(rune('0'+version)) + `"}`, NotAfter: testNow.Add(30 * 24 * time.Hour),
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(env)
}

func TestComponentConfigLifecycle(t *testing.T) {
	pub, priv := newKey(t)
	ks, err := release.NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{keys: &ks})
	c := h.ops(t)
	ctx := t.Context()

	pub1, err := c.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: signedComponent(t, priv, "localDNS", 1), Reason: "corefile v1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := pub1.GetComponentConfig(); got.GetRollout().GetState() != "draft" || got.GetConfigJson() != `{"corefile":"v1"}` {
		t.Errorf("published %+v", got)
	}
	again, err := c.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: signedComponent(t, priv, "localDNS", 1)})
	if err != nil || !again.GetUnchanged() {
		t.Errorf("republish = %v, %v; want unchanged", again, err)
	}
	_, other := newKey(t)
	_, err = c.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: signedComponent(t, other, "localDNS", 2)})
	wantCode(t, "publish untrusted", err, codes.InvalidArgument)
	_, err = c.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: signedComponent(t, priv, "aksNodeController", 1)})
	wantCode(t, "publish the agent's component", err, codes.InvalidArgument)
	_, err = c.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: signed(t, priv, "202604.01.1")})
	wantCode(t, "publish a release envelope", err, codes.InvalidArgument)

	set, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: "localDNS@1", Percent: 100, DeployEnvs: []string{"Prod"}, SetDeployEnvs: true})
	if err != nil {
		t.Fatal(err)
	}
	if ro := set.GetComponentConfig().GetRollout(); ro.GetState() != "rolling" || ro.GetPercent() != 100 || len(ro.GetDeployEnvs()) != 1 || ro.GetDeployEnvs()[0] != "prod" {
		t.Errorf("SetRollout = %+v", ro)
	}
	_, err = c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: "localDNS@1", Percent: 100, DeployEnvs: []string{"pro-d"}, SetDeployEnvs: true})
	wantCode(t, "bad deploy env", err, codes.InvalidArgument)
	_, err = c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: "localDNS@1", Plan: &adminv1.Plan{Steps: []*adminv1.PlanStep{{Percent: 100, MinReports: 5}}, MaxFailureRate: 0.5}})
	wantCode(t, "judged plan on a config", err, codes.InvalidArgument)

	h.reload(t)
	exp, err := c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: "0a1b2c3d-0000-4000-8000-00000000000a", Component: "localDNS", DeployEnv: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.GetDecisions()) != 1 || !exp.GetDecisions()[0].GetChosen() || exp.GetConfigJson() == "" {
		t.Errorf("Explain(prod) = %+v", exp)
	}
	exp, err = c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: "0a1b2c3d-0000-4000-8000-00000000000a", Component: "localDNS", DeployEnv: "staging"})
	if err != nil || exp.GetConfigJson() != "" || exp.GetDecisions()[0].GetIncluded() {
		t.Errorf("Explain(staging) = %+v, %v; want refused by deploy-env-in-scope", exp, err)
	}

	tr, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: "localDNS@1", Action: adminv1.Action_ACTION_HALT})
	if err != nil || tr.GetComponentConfig().GetRollout().GetState() != "halted" {
		t.Errorf("halt = %v, %v", tr, err)
	}
	_, err = c.Revoke(ctx, &adminv1.RevokeRequest{Version: "localDNS@1", Reason: "bad corefile", IfRevision: tr.GetComponentConfig().GetRevision() - 1})
	wantCode(t, "revoke at a stale if_revision", err, codes.Aborted)
	rv, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: "localDNS@1", Reason: "bad corefile", IfRevision: tr.GetComponentConfig().GetRevision()})
	if err != nil || !rv.GetComponentConfig().GetRevoked() {
		t.Errorf("revoke = %v, %v", rv, err)
	}
	_, err = c.Transition(ctx, &adminv1.TransitionRequest{Version: "localDNS@1", Action: adminv1.Action_ACTION_RESUME})
	wantCode(t, "resume revoked", err, codes.FailedPrecondition)
	_, err = c.Transition(ctx, &adminv1.TransitionRequest{Version: "localDNS@9", Action: adminv1.Action_ACTION_HALT})
	wantCode(t, "halt unpublished", err, codes.NotFound)

	st, err := c.Status(ctx, &adminv1.StatusRequest{})
	if err != nil || len(st.GetComponentConfigs()) != 1 || len(st.GetReleases()) != 0 {
		t.Errorf("Status = %v, %v", st, err)
	}
	audit, err := c.ListAudit(ctx, &adminv1.ListAuditRequest{Target: "localDNS@1"})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit.GetEntries() {
		actions = append(actions, e.GetAction())
	}
	if want := []string{"publish", "rollout-set", "halt", "revoke"}; len(actions) != len(want) {
		t.Errorf("audit actions %v, want %v", actions, want)
	}
}

func TestComponentConfigTimedPlanAndSkip(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	_, priv := newKey(t)
	c := h.ops(t)
	ctx := t.Context()
	if _, err := c.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: signedComponent(t, priv, "localDNS", 2)}); err != nil {
		t.Fatal(err)
	}
	timed := &adminv1.Plan{Timed: true, Steps: []*adminv1.PlanStep{{Percent: 10, BakeSeconds: 3600}, {Percent: 100}}}
	dry, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: "localDNS@2", Plan: timed, DryRun: true})
	if err != nil || !dry.GetDryRun() || dry.GetComponentConfig().GetRollout().GetPercent() != 10 {
		t.Fatalf("SetPlan(dry run) = %v, %v", dry, err)
	}
	if got, _, _ := h.store.Config(ctx, "localDNS", 2); got.Rollout.Plan != nil {
		t.Error("a dry run stored the plan")
	}
	set, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: "localDNS@2", Plan: timed, Reason: "timed"})
	if err != nil || !set.GetComponentConfig().GetRollout().GetPlan().GetTimed() {
		t.Fatalf("SetPlan = %v, %v", set, err)
	}
	skip, err := c.SkipStep(ctx, &adminv1.SkipStepRequest{Version: "localDNS@2", Reason: "resolver verified by hand"})
	if err != nil || skip.GetComponentConfig().GetRollout().GetPercent() != 100 || skip.GetSkippedStep() != 0 {
		t.Errorf("SkipStep = %v, %v; want at 100%% having left step 0", skip, err)
	}
}
