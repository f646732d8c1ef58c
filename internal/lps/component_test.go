package lps

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/imds/attest"
	relsign "nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

func signedConfig(t *testing.T, version int64, config string, ro rollout.Rollout) rollout.Config {
	t.Helper()
	_, priv, err := relsign.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	env, err := relsign.SignComponent(relsign.ComponentConfig{Component: "localDNS", Version: version, Config: config, NotAfter: testNotAfter}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return rollout.Config{Component: "localDNS", Version: version, Envelope: env, Rollout: ro}
}

func TestGetComponentConfigForComponents(t *testing.T) {
	t.Parallel()
	all := rollout.Rollout{State: rollout.Complete, Percent: 100}
	v1 := signedConfig(t, 1, `{"corefile":"v1"}`, all)
	v2 := signedConfig(t, 2, `{"corefile":"v2"}`, rollout.Rollout{State: rollout.Complete, Percent: 100, DeployEnvs: []string{"staging"}})
	halted := signedConfig(t, 3, `{"corefile":"v3"}`, rollout.Rollout{State: rollout.Halted, Percent: 100})
	snap := newSnapshot(nil, 9, nil, time.Now()).withConfigs([]rollout.Config{v1, v2, halted}, 9)
	tests := []struct {
		name, component, env string
		want                 int64 // the version served; 0: none
		code                 codes.Code
		outcome              string
	}{
		{"served", "localDNS", "prod", 1, codes.OK, outcomeServed},
		{"deploy-env-in-scope", "localDNS", "staging", 2, codes.OK, outcomeServed},
		{"nothing-published", "otherComponent", "prod", 0, codes.NotFound, outcomeUnknownComponent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics(nil)
			svc := NewService(staticSnapshots{snap}, nil, m, "", testLog(t))
			svc.SetDeployEnv(tc.env)
			ctx := withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub})
			resp, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: tc.component})
			if st := status.Convert(err); st.Code() != tc.code {
				t.Fatalf("GetComponentConfig() = %v, want %v", err, tc.code)
			}
			if tc.want != 0 {
				env, ok, err := relsign.SplitServed([]byte(resp.GetConfig()))
				if err != nil || !ok {
					t.Fatalf("served %s: no envelope: %v", resp.GetConfig(), err)
				}
				c, err := relsign.InspectComponent(env)
				if err != nil || c.Version != tc.want || resp.GetComponentName() != tc.component {
					t.Errorf("served %s version %d (%v), want %d", resp.GetComponentName(), c.Version, err, tc.want)
				}
			}
			if diff := cmp.Diff(map[string]uint64{tc.outcome: 1}, m.Counts()); diff != "" {
				t.Errorf("Counts mismatch (-want +got):\n%s", diff)
			}
		})
	}
	// Out of every rollout: NotFound, as for nothing published.
	none := newSnapshot(nil, 9, nil, time.Now()).withConfigs([]rollout.Config{halted}, 9)
	svc := NewService(staticSnapshots{none}, nil, NewMetrics(nil), "", testLog(t))
	ctx := withIdentity(t.Context(), attest.Identity{VMID: testVMID, SubscriptionID: testSub})
	if _, err := svc.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: "localDNS"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetComponentConfig(halted only) = %v, want NotFound", err)
	}
}

// releasesApart is a store whose release revision does not move with
// component configuration writes, as etcdstore's does not.
type releasesApart struct{ *memstore.Store }

func (s releasesApart) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	rels, _, err := s.Store.Releases(ctx)
	return rels, 1, err
}

// TestSnapshotterLoadsConfigChanges: a write of a component configuration
// alone reaches the snapshot, whichever revision the backend moves.
func TestSnapshotterLoadsConfigChanges(t *testing.T) {
	t.Parallel()
	st := releasesApart{memstore.New()}
	t.Cleanup(func() { st.Close() })
	snaps := NewSnapshotter(st, testLog(t), nil)
	if err := snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := signedConfig(t, 1, `{"corefile":"v1"}`, rollout.Rollout{State: rollout.Complete, Percent: 100})
	if _, err := st.PutConfig(t.Context(), c, 0, store.AuditEntry{Action: "publish", Target: c.ID()}); err != nil {
		t.Fatal(err)
	}
	if err := snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	snap := snaps.Current()
	if !snap.HasComponent("localDNS") || snap.served["localDNS@1"] == nil {
		t.Errorf("snapshot after a config write: configs %v, revision %d", snap.Configs, snap.Revision)
	}
}
