package lps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"nodehotfix/internal/lpswire"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// canaryRelease is 202501.15.2 rolling at a canary of seats nodes.
func canaryRelease(t *testing.T, seats int) rollout.Release {
	t.Helper()
	p := rollout.Plan{
		Steps:  []rollout.PlanStep{{Nodes: seats, MinReports: 1}, {Percent: 1, MinReports: 1}, {Percent: 100, MinReports: 1}},
		Margin: 0.05, MaxFailureRate: 0.2,
	}
	r, err := release("202501.15.2", rollout.Rollout{State: rollout.Draft}, false).SetPlan(p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// replica is one lpsd's serving half over a shared store.
type replica struct {
	snaps *Snapshotter
	svc   *Service
	m     *Metrics
}

func newReplica(t *testing.T, st store.Store) *replica {
	t.Helper()
	r := &replica{snaps: NewSnapshotter(st, testLog(t), nil), m: NewMetrics(nil)}
	if err := r.snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.svc = NewService(r.snaps, NewSeats(st, r.m.seatResult), r.m, "", testLog(t))
	return r
}

// served asks as launch does: declaring the node's base, 202501.15, that
// it reports, and its boot.
func (r *replica) served(t *testing.T, vm string) bool {
	t.Helper()
	ctx := declaring(t, vm, "202501.15")
	_, err := r.svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
	if err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("GetComponentConfig(%s): %v", vm, err)
	}
	return err == nil
}

func vmName(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// TestCanarySeatsAcrossReplicas: two replicas over one store serve a
// canary of 3 to exactly 3 nodes, each served by either replica, and keep
// serving them when the rollout moves on to percentages.
func TestCanarySeatsAcrossReplicas(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	rel := canaryRelease(t, 3)
	publish(t, st, rel)
	a, b := newReplica(t, st), newReplica(t, st)

	var holders []string
	for i := range 10 {
		vm := vmName(i)
		if (map[bool]*replica{true: a, false: b})[i%2 == 0].served(t, vm) {
			holders = append(holders, vm)
		}
	}
	if len(holders) != 3 {
		t.Fatalf("a canary of 3 served %d nodes: %v", len(holders), holders)
	}
	for _, vm := range holders {
		if !a.served(t, vm) || !b.served(t, vm) {
			t.Errorf("holder %s not served by both replicas", vm)
		}
	}
	if got := seatCount(t, b.m, seatFull); got == 0 {
		t.Error("no full results counted on a replica that was refused seats")
	}

	// The rollout moves on to 1%: the holders stay, others by bucket only.
	cur, rev, err := st.Release(t.Context(), rel.Version)
	if err != nil {
		t.Fatal(err)
	}
	next, err := cur.Advance(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutRelease(t.Context(), next, rev, store.AuditEntry{Actor: "test", Action: "advance", Target: rel.Version}, nil); err != nil {
		t.Fatal(err)
	}
	c := newReplica(t, st) // a replica that never saw the canary step
	for _, r := range []*replica{a, b, c} {
		if err := r.snaps.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, vm := range holders {
			if !r.served(t, vm) {
				t.Errorf("holder %s not served at 1%%", vm)
			}
		}
		for i := 10; i < 40; i++ {
			in, _ := next.Includes(rollout.Node{Now: time.Now(), VMID: vmName(i), SubscriptionID: testSub})
			if got := r.served(t, vmName(i)); got != in {
				t.Errorf("non-holder %s served=%v at 1%%, want %v (its bucket)", vmName(i), got, in)
			}
		}
	}
	if seats, _ := st.Seats(t.Context(), rel.Version); len(seats) != 3 {
		t.Errorf("%d seats after the canary, want 3: %v", len(seats), seats)
	}
}

// failingSeats fails every call.
type failingSeats struct{}

func (failingSeats) TakeSeat(context.Context, string, store.Seat, store.SeatLimit) (bool, error) {
	return false, errors.New("etcd: no leader")
}
func (failingSeats) HoldsSeat(context.Context, string, string) (bool, error) {
	return false, errors.New("etcd: no leader")
}
func (failingSeats) Seats(context.Context, string) ([]store.Seat, error) {
	return nil, errors.New("etcd: no leader")
}

// hungSeats blocks every call until its context ends, and records each
// call's deadline.
type hungSeats struct {
	mu        sync.Mutex
	deadlines []time.Time
}

func (h *hungSeats) TakeSeat(ctx context.Context, _ string, _ store.Seat, _ store.SeatLimit) (bool, error) {
	d, _ := ctx.Deadline()
	h.mu.Lock()
	h.deadlines = append(h.deadlines, d)
	h.mu.Unlock()
	<-ctx.Done()
	return false, ctx.Err()
}

func (h *hungSeats) HoldsSeat(ctx context.Context, version, vmID string) (bool, error) {
	return h.TakeSeat(ctx, version, store.Seat{VMID: vmID}, store.SeatLimit{})
}

// calls returns the deadlines of the calls so far.
func (h *hungSeats) calls() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.deadlines)
}

func (h *hungSeats) Seats(ctx context.Context, _ string) ([]store.Seat, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// declaring is a node's request context as launch makes it: its base,
// that it reports, and its boot.
func declaring(t *testing.T, vm, base string) context.Context {
	ctx := withIdentity(t.Context(), attest.Identity{VMID: vm, SubscriptionID: testSub})
	return metadata.NewIncomingContext(ctx, metadata.Pairs(lpswire.BaseMetadata, base, lpswire.ReportsMetadata, "1", lpswire.BootMetadata, testBoot))
}

// TestCanarySeatFaults: a failing or hung seat store serves the node as
// holding no seat and counts the error; no seat store at all serves the
// canary to nobody.
func TestCanarySeatFaults(t *testing.T) {
	t.Parallel()
	rel := canaryRelease(t, 3)
	for name, seats := range map[string]seatStore{"failing": failingSeats{}, "hung": &hungSeats{}, "none": nil} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(nil)
			var s *Seats
			if seats != nil {
				s = NewSeats(seats, m.seatResult)
			}
			svc := NewService(snapshotOf(rel), s, m, "", testLog(t))
			_, err := svc.GetComponentConfig(declaring(t, testVMID, "202501.15"), &lpsv1.GetComponentConfigRequest{ComponentName: Component})
			if status.Code(err) != codes.NotFound {
				t.Fatalf("GetComponentConfig = %v, want NotFound (no seat, nothing else applies)", err)
			}
			want := 1.0
			if seats == nil {
				want = 0
			}
			if got := seatCount(t, m, seatError); got != want {
				t.Errorf("seat errors counted %v, want %v", got, want)
			}
		})
	}
}

// TestSeatsAskOnlyForTheChosenRelease: a node takes a seat only of the
// release of its declared base that it would be served, so with canaries
// of several bases open, and a higher patch already serving it, a hung
// store is asked once, within one deadline for the whole request; a node
// that declares no base (a reference node, which never reports) asks for
// none.
func TestSeatsAskOnlyForTheChosenRelease(t *testing.T) {
	t.Parallel()
	plan := func(v string) rollout.Release {
		r := canaryRelease(t, 3)
		r.Version, r.Base = v, v[:9]
		return r
	}
	wide := release("202501.15.9", rollout.Rollout{State: rollout.Complete, Percent: 100}, false)
	rels := []rollout.Release{plan("202501.15.2"), plan("202501.16.2"), plan("202501.17.2"), plan("202501.17.3"), wide}
	hung := &hungSeats{}
	svc := NewService(snapshotOf(rels...), NewSeats(hung, nil), NewMetrics(nil), "", testLog(t))
	call := func(ctx context.Context) {
		t.Helper()
		if _, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component}); err != nil && status.Code(err) != codes.NotFound {
			t.Fatal(err)
		}
	}
	call(declaring(t, testVMID, "202501.15")) // 202501.15.9 serves it: no seat needed
	call(withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub}))
	// check-hotfix run by a reference launcher: its base, but no report.
	call(metadata.NewIncomingContext(withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub}), metadata.Pairs(lpswire.BaseMetadata, "202501.17")))
	if len(hung.calls()) != 0 {
		t.Fatalf("%d seat requests for a node already served a higher patch, one that declared no base and one that does not report, want 0", len(hung.calls()))
	}
	call(declaring(t, testVMID, "202501.17"))
	end := time.Now()
	if len(hung.calls()) != 1 {
		t.Fatalf("%d seat requests for one base's two canaries, want 1 (the higher patch's)", len(hung.calls()))
	}
	// The request returned once the seat's deadline passed, not the
	// node's (the test context has none).
	if d := hung.calls()[0]; d.IsZero() || d.After(end) {
		t.Errorf("the seat request's deadline %v: want one, passed by the time the request returned (%v)", d, end)
	}
}

// TestReportOfferedToSeatHolders: a report about a canary release is
// genuine from a seat holder, whatever the release's state now and whether
// this replica saw the seat taken; a report never takes a seat.
func TestReportOfferedToSeatHolders(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	open := canaryRelease(t, 2)
	halted, err := open.Transition(rollout.Halted)
	if err != nil {
		t.Fatal(err)
	}
	holder, other := attest.Identity{VMID: vmName(1), SubscriptionID: testSub}, attest.Identity{VMID: vmName(2), SubscriptionID: testSub}
	if _, err := st.TakeSeat(t.Context(), open.Version, store.Seat{VMID: holder.VMID, Since: time.Now()}, store.SeatLimit{Seats: 2}); err != nil {
		t.Fatal(err)
	}
	// A store that cannot say is an error (the node is told Unavailable),
	// never a refusal that would lose a holder's only report.
	rs := &reportService{snaps: snapshotOf(open), seats: NewSeats(failingSeats{}, nil), m: NewMetrics(nil)}
	if ok, err := rs.offered(t.Context(), holder, open.Version); ok || err == nil {
		t.Errorf("offered with a failing store = %v, %v; want an error", ok, err)
	}
	for _, rel := range []rollout.Release{open, halted} {
		rs := &reportService{snaps: snapshotOf(rel), seats: NewSeats(st, nil), m: NewMetrics(nil)}
		if ok, err := rs.offered(t.Context(), holder, rel.Version); !ok || err != nil {
			t.Errorf("%s: the seat holder's report refused as never offered", rel.Rollout.State)
		}
		if ok, err := rs.offered(t.Context(), other, rel.Version); ok || err != nil {
			t.Errorf("%s: a node without a seat is taken as offered", rel.Rollout.State)
		}
	}
	if seats, _ := st.Seats(t.Context(), open.Version); len(seats) != 1 {
		t.Errorf("reports changed the seats: %v", seats)
	}
}

// panickingStore panics on Releases, as a backend meeting damage it did
// not catch might.
type panickingStore struct{ *memstore.Store }

func (panickingStore) Releases(context.Context) ([]rollout.Release, int64, error) {
	panic("invalid page type: 0")
}

// TestSnapshotLoadSurvivesAPanickingStore: the loader reports the failure
// (counted as a store error) and keeps serving what it had.
func TestSnapshotLoadSurvivesAPanickingStore(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	publish(t, st, relServed)
	var failures []error
	s := NewSnapshotter(st, testLog(t), func(err error) { failures = append(failures, err) })
	if err := s.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	good := s.Current()
	s.store = panickingStore{st}
	if err := s.Load(t.Context()); err == nil || !strings.Contains(err.Error(), "invalid page type") {
		t.Errorf("Load over a panicking store = %v, want the panic as an error", err)
	}
	if len(failures) != 1 || s.Current() != good {
		t.Errorf("%d store errors counted, snapshot replaced: %v; want 1 and the previous snapshot serving", len(failures), s.Current() != good)
	}
}

func seatCount(t *testing.T, m *Metrics, result string) float64 {
	t.Helper()
	return counterValue(t, m.seats.WithLabelValues(result))
}

// TestServedBudget: with sixty bases' releases, each with a kilobyte-sized
// envelope, the whole document is over what nodes accept: a node that
// declares its base gets its own base's release only, in full; one that
// declares none (a reference node) gets every base's hotfix without the
// envelopes, and the trim is counted. No document served is over the
// budget.
func TestServedBudget(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1200)
	var rels []rollout.Release
	for i := range 60 {
		r := release(fmt.Sprintf("2025%02d.%02d.1", 1+i/28, 1+i%28), rollout.Rollout{State: rollout.Complete, Percent: 100}, false)
		r.Envelope = json.RawMessage(`{"release":"` + r.Version + `","pad":"` + big + `"}`)
		rels = append(rels, r)
	}
	revoked := release("202501.01.0", rollout.Rollout{State: rollout.Complete, Percent: 100}, true)
	rels = append(rels, revoked)
	if full, err := rollout.Select(rels, rollout.Node{Now: time.Now(), VMID: testVMID}).Pointer().MarshalJSON(); err != nil || len(full) <= hotfix.MaxPointerSize {
		t.Fatalf("the test's whole document is %d bytes (%v), want over %d", len(full), err, hotfix.MaxPointerSize)
	}
	m := NewMetrics(nil)
	svc := NewService(snapshotOf(rels...), nil, m, "", testLog(t))
	get := func(ctx context.Context) hotfix.Pointer {
		t.Helper()
		resp, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetConfig()) > ServedBudget {
			t.Fatalf("served %d bytes, over the %d budget", len(resp.GetConfig()), ServedBudget)
		}
		p, err := hotfix.ParsePointer([]byte(resp.GetConfig()))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine := get(metadata.NewIncomingContext(withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub}), metadata.Pairs(lpswire.BaseMetadata, "202501.01")))
	if len(mine.Hotfixes) != 1 || mine.Hotfixes["202501.01"] != "202501.01.1" || len(mine.Releases) != 1 || !slices.Equal(mine.Revoked, []string{"202501.01.0"}) {
		t.Errorf("a node of 202501.01 was served %d hotfixes %v, %d envelopes, revoked %v; want its base's release in full and its revocation", len(mine.Hotfixes), mine.Hotfixes["202501.01"], len(mine.Releases), mine.Revoked)
	}
	if n := counterValue(t, m.trimmed); n != 0 {
		t.Errorf("%v trims for a node that declared its base", n)
	}
	all := get(withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub}))
	if len(all.Hotfixes) != 60 || len(all.Releases) != 0 || len(all.Revoked) != 1 {
		t.Errorf("a node that declared no base was served %d hotfixes, %d envelopes, %d revoked; want all 60 without envelopes and the revocation", len(all.Hotfixes), len(all.Releases), len(all.Revoked))
	}
	if n := counterValue(t, m.trimmed); n != 1 {
		t.Errorf("%v trims counted, want 1", n)
	}
	if got := m.ServedByRelease(); got["202501.01.1"] != 2 || got["202503.04.1"] != 1 || len(got) != 60 {
		t.Errorf("served by release: %d versions, 202501.01.1 %d times, 202503.04.1 %d; want 60 versions, 2 and 1", len(got), got["202501.01.1"], got["202503.04.1"])
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var pm dto.Metric
	if err := c.Write(&pm); err != nil {
		t.Fatal(err)
	}
	return pm.GetCounter().GetValue()
}

// TestOpenCanaryBehindAnotherRollout: a higher patch rolling by percentage
// that does not include the node does not hide the canary of a lower one.
func TestOpenCanaryBehindAnotherRollout(t *testing.T) {
	t.Parallel()
	canary := canaryRelease(t, 3) // 202501.15.2
	other := release("202501.15.5", rollout.Rollout{State: rollout.Rolling, Percent: 1}, false)
	var vm string
	for i := range 1000 {
		if in, _ := other.Includes(rollout.Node{Now: time.Now(), VMID: vmName(i)}); !in {
			vm = vmName(i)
			break
		}
	}
	snap := newSnapshot([]rollout.Release{canary, other}, 1, nil, time.Now())
	r, limit := openCanary(snap, rollout.Node{Now: time.Now(), VMID: vm, SubscriptionID: testSub, Base: "202501.15"}, nil)
	if r.Version != canary.Version || limit != 3 {
		t.Errorf("openCanary = %s with %d seats, want the canary's 3", r.Version, limit)
	}
}

// TestDeclared: a node's base and reporting headers are taken only when
// well formed; junk, repeats and a reports value other than "1" count as
// not declared, which serves the node as a reference node.
func TestDeclared(t *testing.T) {
	t.Parallel()
	const boot = "0c3f5e2a-6c1d-4b8e-9a7f-1d2e3f4a5b6c"
	for _, tt := range []struct {
		md   metadata.MD
		want caller
	}{
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01", lpswire.ReportsMetadata, "1"), caller{base: "202604.01", reports: true}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01", lpswire.ReportsMetadata, "1", lpswire.BootMetadata, boot), caller{base: "202604.01", reports: true, boot: boot}},
		// A boot without reports, a boot that is not a UUID, two boots: none.
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01", lpswire.BootMetadata, boot), caller{base: "202604.01"}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01", lpswire.ReportsMetadata, "1", lpswire.BootMetadata, "../x"), caller{base: "202604.01", reports: true}},
		{metadata.Pairs(lpswire.ReportsMetadata, "1", lpswire.BootMetadata, boot, lpswire.BootMetadata, boot), caller{reports: true}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01"), caller{base: "202604.01"}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01/../x"), caller{}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01.1"), caller{}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01", lpswire.BaseMetadata, "202605.01"), caller{}},
		{metadata.Pairs(lpswire.BaseMetadata, "202604.01", lpswire.ReportsMetadata, "yes"), caller{base: "202604.01"}},
		{metadata.MD{}, caller{}},
	} {
		if got := declared(metadata.NewIncomingContext(t.Context(), tt.md)); got != tt.want {
			t.Errorf("declared(%v) = %+v; want %+v", tt.md, got, tt.want)
		}
	}
}

// TestCanarySeatsSpreadOverSubscriptions: with a scope of 10 or more
// subscriptions, or a scope of all of them when its base was seen in 10 or
// more (rollout.Plan.SpreadOver), one subscription's VMs hold at most a
// tenth of a canary's seats, so 8 attested VMs of one subscription take 1
// of 10 and the other subscriptions' nodes fill the rest; a base seen in
// fewer is not bound (a small fleet's canary could not fill).
func TestCanarySeatsSpreadOverSubscriptions(t *testing.T) {
	t.Parallel()
	subs := make([]string, 12)
	for i := range subs {
		subs[i] = fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
	}
	for _, tt := range []struct {
		name       string
		scope      []string
		spreadOver int
		squatters  int // of 8 VMs in one subscription, seated
	}{
		{"listed", subs, 0, 1},
		{"all, seen in 12", nil, 12, 1},
		{"all, seen in 5", nil, 5, 8},
		{"all, not counted", nil, 0, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New()
			t.Cleanup(func() { st.Close() })
			r := canaryRelease(t, 10)
			r, err := r.SetScope(r.Rollout.Percent, tt.scope, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Rollout.Plan.SpreadOver = tt.spreadOver
			m := NewMetrics(nil)
			svc := NewService(snapshotOf(r), NewSeats(st, m.seatResult), m, "", testLog(t))
			ask := func(vm int, sub string) bool {
				t.Helper()
				ctx := withIdentity(t.Context(), attest.Identity{VMID: vmName(vm), SubscriptionID: sub})
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(lpswire.BaseMetadata, r.Base, lpswire.ReportsMetadata, "1", lpswire.BootMetadata, testBoot))
				_, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
				if err != nil && status.Code(err) != codes.NotFound {
					t.Fatal(err)
				}
				return err == nil
			}
			squatters := 0
			for i := range 8 {
				if ask(i, subs[0]) {
					squatters++
				}
			}
			if squatters != tt.squatters {
				t.Fatalf("8 VMs of one subscription were served %d canary seats, want %d", squatters, tt.squatters)
			}
			for i, sub := range subs[1 : 11-squatters] {
				if !ask(100+i, sub) {
					t.Errorf("a VM of subscription %s was refused a free seat", sub)
				}
			}
			if seats, _ := st.Seats(t.Context(), r.Version); len(seats) != 10 {
				t.Errorf("%d seats held, want all 10", len(seats))
			}
			if ask(200, subs[11]) {
				t.Error("a node was served a full canary")
			}
		})
	}
}

// unreadableStore's Releases cannot decode the record of version hidden:
// it returns the others with an UnreadableError naming it, as the durable
// backends do.
type unreadableStore struct {
	*memstore.Store
	hidden string
}

func (s unreadableStore) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	rels, rev, err := s.Store.Releases(ctx)
	if err != nil {
		return nil, 0, err
	}
	rels = slices.DeleteFunc(rels, func(r rollout.Release) bool { return r.Version == s.hidden })
	return rels, rev, &store.UnreadableError{Kind: "release", Count: 1, First: errors.New("release record encoding version 2, want 1"), Keys: []string{s.hidden, "not-a-version"}}
}

// TestSnapshotServesAnUnreadableReleaseAsRevoked: a release record nobody
// can read (here the revoked one's) never leaves that release served: the
// snapshot loads the others and serves its version as revoked, so nodes
// drop and refuse it; the failure is counted.
func TestSnapshotServesAnUnreadableReleaseAsRevoked(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	other := release("202501.16.1", rollout.Rollout{State: rollout.Complete, Percent: 100}, false)
	publish(t, st, relServed)
	publish(t, st, other)
	var failures []error
	s := NewSnapshotter(unreadableStore{st, relServed.Version}, testLog(t), func(err error) { failures = append(failures, err) })
	if err := s.Load(t.Context()); err != nil {
		t.Fatalf("Load with one unreadable record = %v, want the others loaded", err)
	}
	if len(failures) != 1 {
		t.Errorf("%d store errors counted, want 1", len(failures))
	}
	svc := NewService(s, nil, NewMetrics(nil), "", testLog(t))
	resp, err := svc.GetComponentConfig(withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub}), &lpsv1.GetComponentConfigRequest{ComponentName: Component})
	if err != nil {
		t.Fatal(err)
	}
	p, err := hotfix.ParsePointer([]byte(resp.GetConfig()))
	if err != nil {
		t.Fatal(err)
	}
	if p.Hotfixes[relServed.Base] == relServed.Version || !slices.Contains(p.Revoked, relServed.Version) || p.Hotfixes[other.Base] != other.Version {
		t.Errorf("served %s; want %s revoked and not served, %s served", resp.GetConfig(), relServed.Version, other.Version)
	}
}

// TestServedRecordsBoundedPerVM: a VM inventing boot IDs gets at most
// maxBootsPerVM served records on a replica; the rest are served but not
// recorded, and counted. Each record names the replica that served it.
func TestServedRecordsBoundedPerVM(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	m := NewMetrics(nil)
	svc := NewService(snapshotOf(relServed), nil, m, "", testLog(t))
	svc.served = newServedBatcher(st)
	svc.replica = "lpsd-a-42"
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { svc.served.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := range maxBootsPerVM + 4 {
		boot := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		c := metadata.NewIncomingContext(withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub}),
			metadata.Pairs(lpswire.BaseMetadata, relServed.Base, lpswire.ReportsMetadata, "1", lpswire.BootMetadata, boot))
		if _, err := svc.GetComponentConfig(c, &lpsv1.GetComponentConfigRequest{ComponentName: Component}); err != nil {
			t.Fatalf("boot %d: %v", i, err)
		}
	}
	served, err := st.Served(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(served) != maxBootsPerVM {
		t.Errorf("%d served records for one vmId, want %d", len(served), maxBootsPerVM)
	}
	for _, s := range served {
		if s.Replica != "lpsd-a-42" {
			t.Errorf("served record %+v does not name its replica", s)
		}
	}
	if got := counterValue(t, m.servedRecs.WithLabelValues(servedTooManyBoots)); got != 4 {
		t.Errorf("too-many-boots counted %v, want 4", got)
	}
}
