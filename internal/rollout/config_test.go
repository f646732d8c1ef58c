package rollout

import (
	"errors"
	"testing"
	"time"
)

func testConfig(version int64, ro Rollout) Config {
	return Config{Component: "localDNS", Version: version, Envelope: []byte(`{}`), Rollout: ro, NotAfter: testNow.Add(time.Hour)}
}

func TestParseConfigID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		ok   bool
		name string
		v    int64
	}{
		{"localDNS@3", true, "localDNS", 3},
		{"202604.01.3", false, "", 0},
		{"localDNS@03", false, "", 0},
		{"localDNS@0", false, "", 0},
		{"local-dns@1", false, "", 0},
		{"@1", false, "", 0},
	} {
		name, v, ok := ParseConfigID(tc.id)
		if ok != tc.ok || name != tc.name || v != tc.v {
			t.Errorf("ParseConfigID(%q) = %q, %d, %v; want %q, %d, %v", tc.id, name, v, ok, tc.name, tc.v, tc.ok)
		}
	}
}

func TestSelectConfig(t *testing.T) {
	n := Node{Now: testNow, VMID: "vm-1", SubscriptionID: subA, Region: "eastus", DeployEnv: "prod"}
	configs := []Config{
		testConfig(1, Rollout{State: Complete, Percent: 100}),
		testConfig(2, Rollout{State: Complete, Percent: 100, DeployEnvs: []string{"staging"}}),
		testConfig(3, Rollout{State: Halted, Percent: 100}),
		{Component: "other", Version: 9, Envelope: []byte(`{}`), Rollout: Rollout{State: Complete, Percent: 100}, NotAfter: testNow.Add(time.Hour)},
	}
	got, ok := SelectConfig(configs, "localDNS", n)
	if !ok || got.Version != 1 {
		t.Errorf("SelectConfig() = %s, %v; want localDNS@1", got.ID(), ok)
	}
	n.DeployEnv = "STAGING"
	if got, _ := SelectConfig(configs, "localDNS", n); got.Version != 2 {
		t.Errorf("SelectConfig(staging) = %s; want localDNS@2", got.ID())
	}
	if _, ok := SelectConfig(configs, "nothing", n); ok {
		t.Error("SelectConfig(unpublished component) found one")
	}
	decisions, _, _ := ExplainConfigs(configs, "localDNS", Node{Now: testNow, VMID: "vm-1", SubscriptionID: subA, DeployEnv: "prod"})
	if len(decisions) != 3 || decisions[1].Rules[len(decisions[1].Rules)-1].Rule != RuleDeployEnv || decisions[1].Included {
		t.Errorf("ExplainConfigs() = %+v; want localDNS@2 refused by %s", decisions, RuleDeployEnv)
	}
}

func TestConfigTimedPlan(t *testing.T) {
	c := testConfig(1, Rollout{State: Draft})
	timed := Plan{Timed: true, Steps: []PlanStep{{Percent: 10, Bake: time.Hour}, {Percent: 100}}}
	if _, err := c.SetPlan(Plan{Steps: timed.Steps, Margin: 0.05, MaxFailureRate: 0.5}, testNow); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("SetPlan(judged plan) = %v, want ErrInvalidPlan", err)
	}
	if _, err := (Release{Version: "202604.01.1", Rollout: Rollout{State: Draft}}).SetPlan(timed, testNow); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("Release.SetPlan(timed) = %v, want ErrInvalidPlan", err)
	}
	c, err := c.SetPlan(timed, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rollout.State != Rolling || c.Rollout.Percent != 10 || c.Due(testNow) || !c.Due(testNow.Add(time.Hour)) {
		t.Fatalf("after SetPlan: %+v, due now %v", c.Rollout, c.Due(testNow))
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err = c.Advance(testNow.Add(time.Hour))
	if err != nil || c.Rollout.Percent != 100 || c.Rollout.Plan.Step != 1 {
		t.Fatalf("Advance() = %+v, %v", c.Rollout, err)
	}
	paused, _ := c.Transition(Paused)
	if paused.Due(testNow.Add(48 * time.Hour)) {
		t.Error("a paused config is due")
	}
	if err := (Plan{Timed: true, Steps: []PlanStep{{Nodes: 5, Bake: time.Hour}}}).Validate(); err == nil {
		t.Error("a timed plan with a canary of nodes validates")
	}
}
