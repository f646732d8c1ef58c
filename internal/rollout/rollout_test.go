package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func rel(version string, st State, pct int) Release {
	return Release{
		Version:  version,
		Base:     version[:9],
		Envelope: json.RawMessage(`{"v":"` + version + `"}`),
		Rollout:  Rollout{State: st, Percent: pct},
	}
}

func TestBucketSpread(t *testing.T) {
	t.Parallel()
	const n = 100000
	for _, pct := range []int{1, 10, 50, 90} {
		in := 0
		limit := pct * Buckets / 100
		for i := 0; i < n; i++ {
			if Bucket(fmt.Sprintf("vm-%08d", i), "202604.01.1") < limit {
				in++
			}
		}
		got := float64(in) / n * 100
		if math.Abs(got-float64(pct)) > 1.0 {
			t.Errorf("%d%% rollout included %.2f%% of %d nodes, want within 1 point", pct, got, n)
		}
	}
}

func TestBucketIndependentAcrossReleases(t *testing.T) {
	t.Parallel()
	// The same 10% of nodes must not be the canaries of every release.
	both := 0
	for i := 0; i < 100000; i++ {
		id := fmt.Sprintf("vm-%d", i)
		if Bucket(id, "202604.01.1") < 1000 && Bucket(id, "202604.01.2") < 1000 {
			both++
		}
	}
	if both > 1500 { // independent: about 1% of nodes
		t.Errorf("%d nodes are in the first 10%% of both releases, want about 1000", both)
	}
}

func TestBucketCaseInsensitiveVMID(t *testing.T) {
	t.Parallel()
	if Bucket("ABCDEF-0123", "202604.01.1") != Bucket("abcdef-0123", "202604.01.1") {
		t.Error("bucket depends on vmId case")
	}
}

// TestPercentageIsMonotone checks the rollout promise: raising the
// percentage only ever adds nodes.
func TestPercentageIsMonotone(t *testing.T) {
	t.Parallel()
	r := rel("202604.01.1", Rolling, 0)
	included := map[string]bool{}
	for pct := 0; pct <= 100; pct += 5 {
		var err error
		if r, err = r.SetScope(pct, nil, nil); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2000; i++ {
			id := fmt.Sprintf("vm-%d", i)
			ok, _ := r.Includes(Node{VMID: id})
			if included[id] && !ok {
				t.Fatalf("%s was included below %d%% and dropped at %d%%", id, pct, pct)
			}
			included[id] = ok
		}
	}
	for id, ok := range included {
		if !ok {
			t.Fatalf("%s not included at 100%%", id)
		}
	}
}

func TestSetScope(t *testing.T) {
	t.Parallel()
	r := rel("202604.01.1", Draft, 0)
	r, err := r.SetScope(10, []string{" SUB-B ", "sub-a", "sub-a"}, []string{"EastUS"})
	if err != nil {
		t.Fatal(err)
	}
	want := Rollout{State: Rolling, Percent: 10, Subscriptions: []string{"sub-a", "sub-b"}, Regions: []string{"eastus"}}
	if diff := cmp.Diff(want, r.Rollout); diff != "" {
		t.Errorf("SetScope mismatch (-want +got):\n%s", diff)
	}
	if _, err := r.SetScope(5, nil, nil); !errors.Is(err, ErrPercentDecrease) {
		t.Errorf("lowering the percentage: %v, want ErrPercentDecrease", err)
	}
	if _, err := r.SetScope(101, nil, nil); err == nil {
		t.Error("SetScope(101) succeeded")
	}
	paused, _ := r.Transition(Paused)
	if _, err := paused.SetScope(20, nil, nil); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("SetScope on a paused rollout: %v", err)
	}
	revoked := r
	revoked.Revoked = true
	if _, err := revoked.SetScope(20, nil, nil); !errors.Is(err, ErrRevoked) {
		t.Errorf("SetScope on a revoked release: %v", err)
	}
}

func TestTransition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to State
		ok       bool
	}{
		{Draft, Rolling, true}, {Rolling, Paused, true}, {Paused, Rolling, true}, {Rolling, Halted, true},
		{Halted, Rolling, true}, {Rolling, Complete, true}, {Complete, Halted, true},
		{Draft, Paused, false}, {Halted, Paused, false}, {Complete, Rolling, false}, {Paused, Draft, false},
	}
	for _, tt := range tests {
		got, err := rel("202604.01.1", tt.from, 10).Transition(tt.to)
		if tt.ok != (err == nil) {
			t.Errorf("%s -> %s: err = %v, want ok=%v", tt.from, tt.to, err, tt.ok)
			continue
		}
		if err == nil && got.Rollout.State != tt.to {
			t.Errorf("%s -> %s: state = %s", tt.from, tt.to, got.Rollout.State)
		}
		if err != nil && !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("%s -> %s: %v is not ErrInvalidTransition", tt.from, tt.to, err)
		}
	}
	if got, _ := rel("202604.01.1", Rolling, 10).Transition(Complete); got.Rollout.Percent != 100 {
		t.Errorf("complete left percent at %d", got.Rollout.Percent)
	}
}

func TestIncludesScope(t *testing.T) {
	t.Parallel()
	r := rel("202604.01.1", Complete, 100)
	r.Rollout.Subscriptions = []string{"sub-a"}
	r.Rollout.Regions = []string{"eastus"}
	tests := []struct {
		name string
		n    Node
		want bool
		rule string // first failing rule
	}{
		{"in scope", Node{VMID: "x", SubscriptionID: "SUB-A", Region: "eastus"}, true, ""},
		{"other subscription", Node{VMID: "x", SubscriptionID: "sub-b", Region: "eastus"}, false, "subscription-in-scope"},
		{"other region", Node{VMID: "x", SubscriptionID: "sub-a", Region: "westus"}, false, "region-in-scope"},
	}
	for _, tt := range tests {
		got, rules := r.Includes(tt.n)
		if got != tt.want {
			t.Errorf("%s: Includes = %v, want %v (%+v)", tt.name, got, tt.want, rules)
		}
		if !tt.want && (rules[len(rules)-1].Rule != tt.rule || rules[len(rules)-1].Passed) {
			t.Errorf("%s: last rule = %+v, want failing %s", tt.name, rules[len(rules)-1], tt.rule)
		}
	}
	for _, st := range []State{Draft, Halted} {
		if ok, _ := rel("202604.01.1", st, 100).Includes(Node{VMID: "x"}); ok {
			t.Errorf("a %s release is served", st)
		}
	}
}

func TestSelect(t *testing.T) {
	t.Parallel()
	revoked := rel("202604.01.3", Complete, 100)
	revoked.Revoked = true
	releases := []Release{
		rel("202604.01.1", Complete, 100),
		rel("202604.01.2", Complete, 100),
		revoked,
		rel("202604.01.4", Halted, 100),
		rel("202604.01.5", Rolling, 0),
		rel("202605.30.1", Complete, 100),
		{Version: "garbage"},
	}
	got := Select(releases, Node{VMID: "vm-1"})
	want := Selection{
		Hotfixes: map[string]string{"202604.01": "202604.01.2", "202605.30": "202605.30.1"},
		Releases: []json.RawMessage{json.RawMessage(`{"v":"202604.01.2"}`), json.RawMessage(`{"v":"202605.30.1"}`)},
		Revoked:  []string{"202604.01.3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Select mismatch (-want +got):\n%s", diff)
	}
	if s := Select(nil, Node{VMID: "x"}); !s.Empty() {
		t.Errorf("Select(nil) = %+v, want empty", s)
	}
	decisions, _ := Explain(releases[:2], Node{VMID: "vm-1"})
	if len(decisions) != 2 || decisions[0].Chosen || !decisions[1].Chosen {
		t.Errorf("Explain = %+v", decisions)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := rel("202604.01.1", Draft, 0).Validate(); err != nil {
		t.Errorf("valid release: %v", err)
	}
	bad := []Release{
		{Version: "dev"},
		{Version: "202604.01.1", Base: "202604.02", Envelope: json.RawMessage(`{}`), Rollout: Rollout{State: Draft}},
		{Version: "202604.01.1", Base: "202604.01", Rollout: Rollout{State: Draft}},
		{Version: "202604.01.1", Base: "202604.01", Envelope: json.RawMessage(`{}`), Rollout: Rollout{State: "weird"}},
		{Version: "202604.01.1", Base: "202604.01", Envelope: json.RawMessage(`{}`), Rollout: Rollout{State: Draft, Percent: 101}},
	}
	for i, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("bad[%d]: Validate succeeded", i)
		}
	}
}

func TestPointerSizes(t *testing.T) {
	t.Parallel()
	a, b := rel("202604.01.1", Complete, 100), rel("202604.02.1", Complete, 100)
	b.Envelope = json.RawMessage(`{"v":"` + strings.Repeat("y", 5000) + `"}`)
	revoked := rel("202604.01.7", Complete, 100)
	revoked.Revoked = true
	rels := []Release{a, b, revoked}
	declared, trimmed, err := PointerSizes(rels, "202604.01")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Select(rels, Node{VMID: "x", Base: "202604.01"}).Pointer().MarshalJSON()
	if declared != len(want) {
		t.Errorf("declared size %d, want %d, what a node of the base is served", declared, len(want))
	}
	if trimmed >= 5000 || trimmed < len(`{"hotfixes":{"202604.01":"202604.01.1","202604.02":"202604.02.1"},"revoked":["202604.01.7"]}`) {
		t.Errorf("trimmed size %d: want every base's hotfix and the revocation, without the 5000-byte envelope", trimmed)
	}
	if d, _, _ := PointerSizes(rels, "202604.02"); d < 5000 {
		t.Errorf("declared size for 202604.02 = %d, want its 5000-byte envelope counted", d)
	}
}
