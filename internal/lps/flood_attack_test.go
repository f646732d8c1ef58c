package lps

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"nodehotfix/internal/assess"
	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/lpswire"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// readmeCanary publishes, in a new memory store, a draft release planned
// with the README's steps (20n:30m:20,10:1h:100,100:2h:500) from now.
func readmeCanary(t *testing.T) (*memstore.Store, rollout.Release, time.Time) {
	t.Helper()
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
	return st, rel, start
}

// TestSeatsGoOnlyToBootsThatCount: a VM that declares it reports but no
// boot gets no canary seat: lpsd records no served boot for it, so it
// would count nowhere, and a canary whose minimum is its seats (the
// README's 20n:30m:20) waited for it until its deadline, then paused
// inconclusive. The seat goes to the next genuine node instead, and the
// canary of 20 genuine nodes that all succeed is healthy.
func TestSeatsGoOnlyToBootsThatCount(t *testing.T) {
	t.Parallel()
	st, rel, start := readmeCanary(t)
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

// TestOneVMCannotFillTheReportQueue: while the store writes nothing,
// one vmId's repeats of its own report wait at most maxPendingPerVM (the
// rest are refused at once), so other nodes' reports still queue; before,
// one VM filled all reportQueue slots and every other report was refused.
func TestOneVMCannotFillTheReportQueue(t *testing.T) {
	t.Parallel()
	b := newReportBatcher(nil) // not running: nothing is written
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	attacker := store.Report{VMID: "attacker", Boot: testBoot}
	refused := make(chan bool, maxPendingPerVM+200)
	for range maxPendingPerVM + 200 {
		go func() {
			_, err := b.put(ctx, attacker)
			refused <- errors.Is(err, errReportQueueFull)
		}()
	}
	for i := range 200 { // the first 200 answers: refusals, since the others wait
		if !<-refused {
			t.Fatalf("answer %d to the attacker's repeats was not a refusal", i)
		}
	}
	for i := range 20 {
		r := store.Report{VMID: fmt.Sprintf("genuine-%d", i), Boot: testBoot}
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Millisecond)
		_, err := b.put(pctx, r)
		pcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("genuine report %d: %v, want it queued (waiting past its deadline)", i, err)
		}
	}
	b.mu.Lock()
	waiting, total := b.perVM["attacker"], len(b.pending)
	b.mu.Unlock()
	if waiting != maxPendingPerVM || total != maxPendingPerVM+20 {
		t.Errorf("%d of the attacker's reports wait, %d in all; want %d and %d", waiting, total, maxPendingPerVM, maxPendingPerVM+20)
	}
}

// slowHolds is a seat store whose HoldsSeat takes a store round trip of
// 20 ms (etcd under load), counting the calls; TakeSeat is fast.
type slowHolds struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *slowHolds) HoldsSeat(ctx context.Context, v, vm string) (bool, error) {
	s.calls.Add(1)
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return s.Store.HoldsSeat(ctx, v, vm)
}

// TestSeatlessReportsNeverStarveSeatTakes: reports about a canary release
// from VMs that hold no seat each ask the store whether they do; those
// reads have their own slot, so genuine nodes' seat takes never queue
// behind them (8 VMs with 128 reports in flight left 4 of 10 genuine nodes
// seatless); and once the canary is full and this replica learned every
// holder, the answer for a VM that holds none comes from memory.
func TestSeatlessReportsNeverStarveSeatTakes(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	rel := canaryRelease(t, 10)
	publish(t, st, rel)
	m := NewMetrics(nil)
	snaps := NewSnapshotter(st, testLog(t), nil)
	if err := snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	slow := &slowHolds{Store: st}
	seats := NewSeats(slow, m.seatResult)
	svc := NewService(snaps, seats, m, "", testLog(t))
	rs := &reportService{snaps: snaps, seats: seats, m: m, now: time.Now}
	bogus := func(ctx context.Context, i int) {
		attacker := attest.Identity{VMID: vmName(5000 + i%8), SubscriptionID: "attacker-sub"}
		req := &nodev1.ReportOutcomeRequest{BootId: testBoot, BakedVersion: "202501.15.0",
			Agent: nodev1.Agent_AGENT_HOTFIX, AgentVersion: rel.Version, HotfixVersion: rel.Version}
		rs.validate(ctx, attacker, req) // refused not-offered, after a store read
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 128 { // 8 VMs x 16 streams
		wg.Go(func() {
			for ctx.Err() == nil {
				bogus(ctx, i)
			}
		})
	}
	for slow.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	got := 0
	for i := range 10 {
		if _, err := svc.GetComponentConfig(declaring(t, vmName(i), "202501.15"), &lpsv1.GetComponentConfigRequest{ComponentName: Component}); err == nil {
			got++
		}
	}
	cancel()
	wg.Wait()
	if got != 10 {
		t.Errorf("%d of 10 genuine nodes were served the canary while seatless VMs reported", got)
	}
	// Full now: the next genuine node learns every holder from the store.
	if _, err := svc.GetComponentConfig(declaring(t, vmName(10), "202501.15"), &lpsv1.GetComponentConfigRequest{ComponentName: Component}); err == nil {
		t.Error("an eleventh node was served a canary of 10")
	}
	before := slow.calls.Load()
	for i := range 50 {
		bogus(t.Context(), i)
	}
	if n := slow.calls.Load() - before; n != 0 {
		t.Errorf("with the canary full and its holders known, 50 seatless reports read the store %d times, want none", n)
	}
}

// TestResumedCanarySeatsNewNodes: resuming a halted canary opens a fresh
// evidence window and with it a fresh set of seats (rollout.Release
// SeatSet), so the retry seats new nodes and hears from them; before, the
// seats stayed with the halted attempt's holders, who had provisioned
// already, so the retry could gather no evidence and paused at its
// deadline, and squatters who got it halted parked it for good.
func TestResumedCanarySeatsNewNodes(t *testing.T) {
	t.Parallel()
	st, rel, _ := readmeCanary(t)
	r := newReplica(t, st)
	ask := func(vm string) bool {
		_, err := r.svc.GetComponentConfig(declaring(t, vm, "202501.15"), &lpsv1.GetComponentConfigRequest{ComponentName: Component})
		return err == nil
	}
	for i := range 20 {
		if !ask(vmName(i)) {
			t.Fatal("holder not served")
		}
	}
	if ask(vmName(500)) {
		t.Fatal("a 21st node was served a canary of 20")
	}
	cur, rev, _ := st.Release(t.Context(), rel.Version)
	halted, _ := cur.Transition(rollout.Halted)
	rev, err := st.PutRelease(t.Context(), halted, rev, store.AuditEntry{Actor: "t", Action: "halt", Target: rel.Version}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := halted.Resume(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutRelease(t.Context(), resumed, rev, store.AuditEntry{Actor: "t", Action: "resume", Target: rel.Version}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	fresh := 0
	for i := range 30 {
		if ask(vmName(1000 + i)) {
			fresh++
		}
	}
	if fresh != 20 {
		t.Errorf("after the resume %d of 30 new nodes were served the canary of 20, want 20", fresh)
	}
	if ask(vmName(0)) {
		t.Error("a holder of the halted attempt is still served the retry's canary")
	}
	f, err := assess.Assess(t.Context(), st, []rollout.Release{resumed}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Releases[rel.Version].Counts.Seated; got != 20 {
		t.Errorf("the retry counts %d seated, want its own 20", got)
	}
}
