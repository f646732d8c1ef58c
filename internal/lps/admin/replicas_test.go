package admin

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// replicated is a memstore that several replicas share, as etcdstore
// lists them.
type replicated struct {
	*memstore.Store
	hs []store.Heartbeat
}

func (r replicated) Replicas(context.Context) ([]store.Heartbeat, error) { return r.hs, nil }

func newReplicated(t *testing.T, hs ...store.Heartbeat) replicated {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	return replicated{Store: st, hs: hs}
}

// TestStatusReplicas: status lists the replicas serving from the store
// with their labels, the one answering marked, and itself even before it
// has joined; on a store it holds alone, itself only.
func TestStatusReplicas(t *testing.T) {
	t.Parallel()
	beat := testNow.Add(-3 * time.Second)
	for _, tt := range []struct {
		name  string
		store store.Store
		want  []*adminv1.Replica
	}{
		{name: "alone", want: []*adminv1.Replica{{Id: testReplica, Region: "eastus", Self: true}}},
		{name: "shared", store: newReplicated(t,
			store.Heartbeat{ID: "b", Time: beat, Place: rollout.Place{Region: "westeurope", DeployEnv: "prod"}},
			store.Heartbeat{ID: testReplica, Time: beat, Place: rollout.Place{Region: "eastus"}}),
			want: []*adminv1.Replica{{Id: "b", Region: "westeurope", DeployEnv: "prod"}, {Id: testReplica, Region: "eastus", Self: true}}},
		{name: "not-joined-yet", store: newReplicated(t, store.Heartbeat{ID: "b", Time: beat, Place: rollout.Place{Region: "westeurope"}}),
			want: []*adminv1.Replica{{Id: testReplica, Region: "eastus", Self: true}, {Id: "b", Region: "westeurope"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpts{store: tt.store})
			st, err := h.ops(t).Status(t.Context(), &adminv1.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []*adminv1.Replica
			for _, r := range st.GetReplicas() {
				if r.GetLastHeartbeat() != nil && !r.GetLastHeartbeat().AsTime().Equal(beat) {
					t.Errorf("%s's heartbeat %v, want %v", r.GetId(), r.GetLastHeartbeat().AsTime(), beat)
				}
				got = append(got, &adminv1.Replica{Id: r.GetId(), Region: r.GetRegion(), DeployEnv: r.GetDeployEnv(), Self: r.GetSelf()})
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("replicas (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatusReplicaClocks: status gives each replica's heartbeat age by
// the answering replica's clock, and marks those the assessment reads
// corrected: behind by more than the tolerance (never one ahead).
func TestStatusReplicaClocks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{store: newReplicated(t,
		store.Heartbeat{ID: "in-sync", Time: testNow.Add(-3 * time.Second)},
		store.Heartbeat{ID: "behind", Time: testNow.Add(-3 * time.Minute)},
		store.Heartbeat{ID: "ahead", Time: testNow.Add(time.Minute)},
		store.Heartbeat{ID: "joining"})})
	st, err := h.ops(t).Status(t.Context(), &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type clock struct {
		age       *int64
		corrected bool
	}
	got := map[string]clock{}
	for _, r := range st.GetReplicas() {
		var age *int64
		if r.HeartbeatAgeMs != nil {
			a := r.GetHeartbeatAgeMs()
			age = &a
		}
		got[r.GetId()] = clock{age, r.GetClockCorrected()}
	}
	ms := func(d time.Duration) *int64 { n := d.Milliseconds(); return &n }
	want := map[string]clock{
		"in-sync":   {ms(3 * time.Second), false},
		"behind":    {ms(3 * time.Minute), true},
		"ahead":     {ms(-time.Minute), false}, // read as stamped: it only delays silence
		"joining":   {nil, false},
		testReplica: {nil, false},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(clock{})); diff != "" {
		t.Errorf("replica clocks (-want +got):\n%s", diff)
	}
}
