package schedule

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/autopilot"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/store/storetest"
)

func TestStepAdvancesWhenBaked(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	start := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	c := storetest.Config("localDNS", 1)
	c, err := c.SetPlan(rollout.Plan{Timed: true, Steps: []rollout.PlanStep{{Percent: 10, Bake: time.Hour}, {Percent: 50, Bake: time.Hour}, {Percent: 100}}}, start)
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustPutConfig(t, st, c, 0)
	halted := storetest.Config("localDNS", 2)
	halted, _ = halted.SetPlan(rollout.Plan{Timed: true, Steps: []rollout.PlanStep{{Percent: 10, Bake: time.Minute}, {Percent: 100}}}, start)
	halted, _ = halted.Transition(rollout.Halted)
	storetest.MustPutConfig(t, st, halted, 0)

	now := start.Add(30 * time.Minute)
	s := New(st, Config{Now: func() time.Time { return now }})
	for _, tc := range []struct {
		at      time.Duration
		want    []string
		percent int
		state   rollout.State
	}{
		{30 * time.Minute, nil, 10, rollout.Rolling},
		{time.Hour, []string{"localDNS@1"}, 50, rollout.Rolling},
		{90 * time.Minute, nil, 50, rollout.Rolling},
		{2 * time.Hour, []string{"localDNS@1"}, 100, rollout.Rolling},
		// After the last step's bake (none here), it completes.
		{2 * time.Hour, []string{"localDNS@1"}, 100, rollout.Complete},
		{10 * time.Hour, nil, 100, rollout.Complete},
	} {
		now = start.Add(tc.at)
		got, err := s.Step(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("at +%v: Step() mismatch (-want +got):\n%s", tc.at, diff)
		}
		cur, _, _ := st.Config(t.Context(), "localDNS", 1)
		if cur.Rollout.Percent != tc.percent || cur.Rollout.State != tc.state {
			t.Errorf("at +%v: %d%% %s, want %d%% %s", tc.at, cur.Rollout.Percent, cur.Rollout.State, tc.percent, tc.state)
		}
	}
	entries, err := st.Audit(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var auto int
	for _, e := range entries {
		if e.Action == autopilot.ActionAdvance && e.Actor == autopilot.Actor && e.Target == "localDNS@1" && len(e.Evidence) > 0 {
			auto++
		}
	}
	if auto != 3 {
		t.Errorf("%d audited advances, want 3", auto)
	}
}

// TestStepHoldsWhileFrozen: a timed plan set before a freeze does not
// advance while every rollout is frozen, and advances at the first look
// after the thaw.
func TestStepHoldsWhileFrozen(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	start := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	c := storetest.Config("localDNS", 3)
	c, err := c.SetPlan(rollout.Plan{Timed: true, Steps: []rollout.PlanStep{{Percent: 10, Bake: time.Hour}, {Percent: 100}}}, start)
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustPutConfig(t, st, c, 0)
	rev, err := st.PutFreeze(ctx, store.Freeze{Frozen: true, Reason: "incident", Actor: "op", Since: start.Add(time.Minute)}, 0, store.AuditEntry{Actor: "op", Action: "freeze", Target: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	now := start.Add(2 * time.Hour)
	s := New(st, Config{Now: func() time.Time { return now }})
	if got, err := s.Step(ctx); err != nil || len(got) != 0 {
		t.Errorf("Step while frozen = %v, %v; want nothing advanced", got, err)
	}
	if cur, _, _ := st.Config(ctx, "localDNS", 3); cur.Rollout.Percent != 10 {
		t.Errorf("while frozen localDNS@3 is at %d%%, want 10%%", cur.Rollout.Percent)
	}
	if _, err := st.PutFreeze(ctx, store.Freeze{Frozen: false, Reason: "over", Actor: "op", Since: now}, rev, store.AuditEntry{Actor: "op", Action: "unfreeze", Target: "fleet"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Step(ctx); err != nil || len(got) != 1 {
		t.Errorf("Step after the thaw = %v, %v; want localDNS@3 advanced", got, err)
	}
}
