package lps

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"nodehotfix/internal/assess"
	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/lpswire"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// TestSeatsGoOnlyToBootsThatCount: a VM that declares it reports but no
// boot gets no canary seat: lpsd records no served boot for it, so it
// would count nowhere, and a canary whose minimum is its seats (the
// README's 20n:30m:20) waited for it until its deadline, then paused
// inconclusive. The seat goes to the next genuine node instead, and the
// canary of 20 genuine nodes that all succeed is healthy.
func TestSeatsGoOnlyToBootsThatCount(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	p := rollout.Plan{Steps: []rollout.PlanStep{{Nodes: 20, Bake: 30 * time.Minute, MinReports: 20}, {Percent: 10, Bake: time.Hour, MinReports: 100}, {Percent: 100, Bake: 2 * time.Hour, MinReports: 500}},
		Margin: 0.05, MaxFailureRate: 0.2}
	start := time.Now()
	rel, err := release("202501.15.2", rollout.Rollout{State: rollout.Draft}, false).SetPlan(p, start)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, st, rel)
	r := newReplica(t, st)
	r.svc.served = newServedBatcher(st)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.svc.served.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ask := func(vm, boot string) bool {
		md := metadata.Pairs(lpswire.BaseMetadata, "202501.15", lpswire.ReportsMetadata, "1")
		if boot != "" {
			md.Append(lpswire.BootMetadata, boot)
		}
		c := metadata.NewIncomingContext(withIdentity(t.Context(), attest.Identity{VMID: vm, SubscriptionID: testSub}), md)
		_, err := r.svc.GetComponentConfig(c, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
		return err == nil
	}
	squatter := vmName(999)
	if ask(squatter, "") {
		t.Error("a VM that declared no boot was served the canary")
	}
	var reports []store.Report
	for i := range 20 {
		vm := vmName(i)
		if !ask(vm, testBoot) {
			t.Fatalf("genuine %s not served", vm)
		}
		reports = append(reports, store.Report{VMID: vm, Boot: testBoot, SubscriptionID: testSub, Base: "202501.15", BakedVersion: "202501.15.0",
			Agent: "hotfix", AgentVersion: rel.Version, HotfixVersion: rel.Version, Time: time.Now()})
	}
	for i := range 60 { // a healthy baseline, larger than the canary
		reports = append(reports, store.Report{VMID: vmName(100 + i), Boot: testBoot, SubscriptionID: testSub, Base: "202501.15", BakedVersion: "202501.15.0",
			Agent: "baked", AgentVersion: "202501.15.0", Time: time.Now()})
	}
	if _, err := st.PutReports(t.Context(), reports); err != nil {
		t.Fatal(err)
	}
	seats, err := st.Seats(t.Context(), rel.Version)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seats {
		if s.VMID == squatter {
			t.Errorf("the VM that declared no boot holds a seat")
		}
	}
	cur, _, _ := st.Release(t.Context(), rel.Version)
	f, err := assess.Assess(t.Context(), st, []rollout.Release{cur}, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if a := f.Releases[rel.Version]; len(seats) != 20 || a.Verdict.Health != regression.Healthy {
		t.Errorf("%d seats, counts %+v, verdict %s (%s); want 20 genuine seats and healthy", len(seats), a.Counts, a.Verdict.Health, a.Verdict.Detail)
	}
}

// TestBootLimitForgetsOldBoots: the boot limit counts a vmId's boots
// within bootWindow, so a long-lived node that reboots daily is admitted
// every day (before, it was refused from its 17th boot on, on every
// replica), and one that invents boots is still refused past
// maxBootsPerVM within the window.
func TestBootLimitForgetsOldBoots(t *testing.T) {
	t.Parallel()
	l := newBootLimit()
	day := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for d := range 40 {
		if !l.admit("long-lived", fmt.Sprintf("%08d-0000-4000-8000-000000000000", d), day.Add(time.Duration(d)*25*time.Hour)) {
			t.Fatalf("the daily boot of day %d refused", d+1)
		}
	}
	for i := range maxBootsPerVM + 1 {
		ok := l.admit("inventor", fmt.Sprintf("%08d-0000-4000-8000-000000000001", i), day.Add(time.Duration(i)*time.Minute))
		if ok != (i < maxBootsPerVM) {
			t.Errorf("boot %d within an hour admitted %v, want %v", i+1, ok, i < maxBootsPerVM)
		}
	}
	if !l.admit("inventor", "00000000-0000-4000-8000-000000000001", day.Add(time.Hour)) {
		t.Error("a boot already admitted refused again")
	}
	if !l.admit("inventor", "99999999-0000-4000-8000-000000000001", day.Add(bootWindow+time.Hour)) {
		t.Error("a new boot after the window refused")
	}
}
