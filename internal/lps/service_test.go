package lps

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/imds/attest"
	relsign "nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store/memstore"
)

// staticSnapshots serves one fixed snapshot (nil: none yet).
type staticSnapshots struct{ snap *Snapshot }

func (s staticSnapshots) Current() *Snapshot { return s.snap }

func snapshotOf(rels ...rollout.Release) staticSnapshots {
	return staticSnapshots{newSnapshot(rels, 7, nil, time.Now())}
}

func TestGetComponentConfig(t *testing.T) {
	t.Parallel()
	node := attest.Identity{VMID: testVMID, SubscriptionID: testSub}
	tests := []struct {
		name      string
		snaps     staticSnapshots
		region    string
		component string // "": Component
		noID      bool
		want      string
		wantCode  codes.Code
		outcome   string
	}{
		{
			name:  "served",
			snaps: snapshotOf(relServed, relScoped, relRevoked),
			want:  `{"hotfixes":{"202501.15":"202501.15.2"},"releases":[{"release":"202501.15.2"}],"revoked":["202501.15.3"]}`,
		},
		{
			name:  "revoked-only",
			snaps: snapshotOf(relRevoked),
			want:  `{"hotfixes":{"202501.15":"202501.15.0"},"revoked":["202501.15.3"]}`,
		},
		{
			name:   "region-in-scope",
			snaps:  snapshotOf(relRegional),
			region: "WestEurope",
			want:   `{"hotfixes":{"202503.01":"202503.01.1"},"releases":[{"release":"202503.01.1"}]}`,
		},
		{name: "region-out-of-scope", snaps: snapshotOf(relRegional), region: "eastus", wantCode: codes.NotFound, outcome: outcomeNotFound},
		{name: "no-region-label", snaps: snapshotOf(relRegional), wantCode: codes.NotFound, outcome: outcomeNotFound},
		{name: "other-subscription", snaps: snapshotOf(relScoped), wantCode: codes.NotFound, outcome: outcomeNotFound},
		{name: "empty-store", snaps: snapshotOf(), wantCode: codes.NotFound, outcome: outcomeNotFound},
		{name: "no-snapshot", snaps: staticSnapshots{}, wantCode: codes.Unavailable, outcome: outcomeUnavailable},
		{name: "other-component", snaps: snapshotOf(relServed), component: "localDNS", wantCode: codes.NotFound, outcome: outcomeUnknownComponent},
		// A Service registered without the auth interceptor fails closed.
		{name: "no-identity", snaps: snapshotOf(relServed), noID: true, wantCode: codes.Internal, outcome: outcomeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(nil)
			svc := NewService(tt.snaps, nil, m, tt.region, testLog(t))
			ctx := t.Context()
			if !tt.noID {
				ctx = withIdentity(ctx, node)
			}
			component := tt.component
			if component == "" {
				component = Component
			}
			resp, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: component})
			outcome := tt.outcome
			if tt.wantCode == codes.OK {
				outcome = outcomeServed
				if err != nil {
					t.Fatalf("GetComponentConfig: %v", err)
				}
				if resp.GetComponentName() != Component || resp.GetConfig() != tt.want {
					t.Errorf("GetComponentConfig = (%q, %s), want (%q, %s)", resp.GetComponentName(), resp.GetConfig(), Component, tt.want)
				}
			} else if st := status.Convert(err); st.Code() != tt.wantCode || st.Message() != statusText[tt.wantCode] {
				t.Errorf("GetComponentConfig error = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, statusText[tt.wantCode])
			}
			if diff := cmp.Diff(map[string]uint64{outcome: 1}, m.Counts()); diff != "" {
				t.Errorf("Counts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSelectionIsPerNode: a 50% rollout serves some VMs and not others, by
// the identity the interceptor verified.
func TestSelectionIsPerNode(t *testing.T) {
	t.Parallel()
	half := release("202504.01.1", rollout.Rollout{State: rollout.Rolling, Percent: 50}, false)
	svc := NewService(snapshotOf(half), nil, NewMetrics(nil), "", nil)
	vms := []string{
		"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002",
		"00000000-0000-4000-8000-000000000003", "00000000-0000-4000-8000-000000000004",
		"00000000-0000-4000-8000-000000000005", "00000000-0000-4000-8000-000000000006",
		"00000000-0000-4000-8000-000000000007", "00000000-0000-4000-8000-000000000008",
	}
	for _, vm := range vms {
		ctx := withIdentity(t.Context(), attest.Identity{VMID: vm, SubscriptionID: testSub})
		_, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
		included, _ := half.Includes(rollout.Node{Now: time.Now(), VMID: vm, SubscriptionID: testSub})
		if got := err == nil; got != included {
			t.Errorf("vm %s served = %v (err %v), want %v", vm, got, err, included)
		}
	}
}

// labelled gathers reg's series of metric name, keyed by their label
// values joined with ",".
func labelled(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, pm := range mf.GetMetric() {
			var vals []string
			for _, l := range pm.GetLabel() {
				vals = append(vals, l.GetValue())
			}
			out[strings.Join(vals, ",")] = pm.GetGauge().GetValue() + pm.GetCounter().GetValue()
		}
	}
	return out
}

// TestExpiredNotServed: a complete release whose envelope expired is never
// served, even from a record stored without its expiry (read from the
// envelope at load); the node gets the older release instead, and the skip
// and every release's expiry show in the metrics.
func TestExpiredNotServed(t *testing.T) {
	t.Parallel()
	_, priv, err := relsign.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	notAfter := now.Add(-time.Minute).Truncate(time.Second)
	env, err := relsign.Sign(relsign.Release{
		Base: "202501.15", Version: "202501.15.4", NotAfter: notAfter,
		Artifacts: map[string]relsign.Artifact{"linux/amd64": {URL: "https://x.example/a", SHA256: strings.Repeat("ab", 32), Size: 1}},
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	expired := rollout.Release{Version: "202501.15.4", Base: "202501.15", Envelope: env, Rollout: rollout.Rollout{State: rollout.Complete, Percent: 100}}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	publish(t, st, relServed, expired)
	snaps := NewSnapshotter(st, nil, nil)
	if err := snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	m.registerSnapshots(snaps, time.Now)
	svc := NewService(snaps, nil, m, "", testLog(t))

	ctx := withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub})
	resp, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"hotfixes":{"202501.15":"202501.15.2"},"releases":[{"release":"202501.15.2"}]}`; resp.GetConfig() != want {
		t.Errorf("served %s, want the unexpired 202501.15.2 only: %s", resp.GetConfig(), want)
	}
	if diff := cmp.Diff(map[string]float64{"202501.15.4": 1}, labelled(t, reg, "lpsd_release_expired_skipped_total")); diff != "" {
		t.Errorf("lpsd_release_expired_skipped_total (-want +got):\n%s", diff)
	}
	want := map[string]float64{
		"202501.15,202501.15.2": float64(testNotAfter.Unix()),
		"202501.15,202501.15.4": float64(notAfter.Unix()),
	}
	if diff := cmp.Diff(want, labelled(t, reg, "lpsd_release_not_after_timestamp_seconds")); diff != "" {
		t.Errorf("lpsd_release_not_after_timestamp_seconds (-want +got):\n%s", diff)
	}

	// With the unexpired release gone too, nothing applies.
	svc = NewService(snapshotOf(expired.WithNotAfter()), nil, NewMetrics(nil), "", testLog(t))
	_, err = svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: Component})
	if status.Code(err) != codes.NotFound {
		t.Errorf("only an expired release: %v, want NotFound", err)
	}
}
