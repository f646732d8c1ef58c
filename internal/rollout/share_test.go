package rollout

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// shareOf is a Share's gist: who, how much, as what, and who instead.
type shareOf struct {
	Version  string
	Fraction float64
	Role     string
	Instead  string
}

func gist(shs []Share) []shareOf {
	var out []shareOf
	for _, s := range shs {
		out = append(out, shareOf{s.Version, math.Round(s.Fraction*10000) / 10000, s.Role, s.Instead})
	}
	return out
}

// TestServedNow: what each part of a base's nodes gets, and as what: the
// newest release a node's rules include wins, a halted, expired or
// revoked one gives its nodes to what is below it, a complete one
// supersedes the complete ones before it, and the rest run the baked
// agent; percentages of different releases are independent.
func TestServedNow(t *testing.T) {
	t.Parallel()
	expired := rel("202604.01.6", Rolling, 50)
	expired.NotAfter = testNow.Add(-time.Hour)
	halted := rel("202604.01.5", Halted, 30)
	halted.Rollout.Reason = "regression"
	revoked := rel("202604.01.7", Complete, 100)
	revoked.Revoked = true
	canary := rel("202605.01.2", Rolling, 0)
	canary.Rollout.Plan = &Plan{Steps: []PlanStep{{Nodes: 5, MinReports: 5}, {Percent: 100, MinReports: 10}}}
	scoped := rel("202606.01.2", Rolling, 50)
	scoped.Rollout.Subscriptions = []string{subA}
	west := rel("202607.01.1", Complete, 100)
	west.Rollout.Regions = []string{"westeurope"}
	releases := []Release{
		rel("202604.01.1", Complete, 100), rel("202604.01.2", Complete, 100), rel("202604.01.3", Rolling, 10),
		rel("202604.01.4", Draft, 0), halted, expired, revoked,
		rel("202605.01.1", Rolling, 20), canary,
		rel("202606.01.1", Complete, 100), scoped,
		west,
		rel("202608.01.1", Rolling, 10), rel("202608.01.2", Rolling, 20),
	}
	here := []Place{{Region: "eastus"}}
	tests := []struct {
		name   string
		base   string
		places []Place
		want   map[string][]shareOf // by the cohort's subscriptions and places, as "subs@places"
	}{
		{name: "candidate-incumbent-superseded-and-stopped", base: "202604.01", places: here, want: map[string][]shareOf{
			"others@eastus": {
				{"202604.01.7", 0, RoleRevoked, "202604.01.2"},
				{"202604.01.6", 0, RoleExpired, "202604.01.2"},
				{"202604.01.5", 0, "halted", "202604.01.2"},
				{"202604.01.4", 0, "draft", "202604.01.2"},
				{"202604.01.3", 0.1, RoleCandidate, ""},
				{"202604.01.2", 0.9, RoleIncumbent, ""},
				{"202604.01.1", 0, RoleSuperseded, "202604.01.2"},
				{"", 0, RoleBaked, ""},
			}}},
		{name: "canary-serves-its-seats-only", base: "202605.01", places: here, want: map[string][]shareOf{
			"others@eastus": {
				{"202605.01.2", 0, RoleCanary, ""},
				{"202605.01.1", 0.2, RoleCandidate, ""},
				{"", 0.8, RoleBaked, ""},
			}}},
		{name: "subscription-scope-splits-the-nodes", base: "202606.01", places: here, want: map[string][]shareOf{
			subA + "@eastus": {
				{"202606.01.2", 0.5, RoleCandidate, ""},
				{"202606.01.1", 0.5, RoleIncumbent, ""},
				{"", 0, RoleBaked, ""},
			},
			"others@eastus": {
				{"202606.01.2", 0, RoleOutOfScope, "202606.01.1"},
				{"202606.01.1", 1, RoleIncumbent, ""},
				{"", 0, RoleBaked, ""},
			}}},
		{name: "region-scope-by-place", base: "202607.01", places: []Place{{Region: "eastus"}, {Region: "westeurope"}, {Region: "westus"}}, want: map[string][]shareOf{
			"others@westeurope":    {{"202607.01.1", 1, RoleIncumbent, ""}, {"", 0, RoleBaked, ""}},
			"others@eastus,westus": {{"202607.01.1", 0, RoleOutOfScope, ""}, {"", 1, RoleBaked, ""}},
		}},
		{name: "independent-percentages", base: "202608.01", places: here, want: map[string][]shareOf{
			"others@eastus": {{"202608.01.2", 0.2, RoleCandidate, ""}, {"202608.01.1", 0.08, RoleCandidate, ""}, {"", 0.72, RoleBaked, ""}},
		}},
		{name: "no-place-known", base: "202608.01", want: map[string][]shareOf{
			"others@": {{"202608.01.2", 0.2, RoleCandidate, ""}, {"202608.01.1", 0.08, RoleCandidate, ""}, {"", 0.72, RoleBaked, ""}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cohorts, omitted := ServedNow(releases, tt.base, tt.places, testNow)
			got := map[string][]shareOf{}
			for _, c := range cohorts {
				subs := "others"
				if c.Subscriptions != nil {
					subs = fmt.Sprint(c.Subscriptions[0])
				}
				var places string
				for i, p := range c.Places {
					if i > 0 {
						places += ","
					}
					places += p.Region
				}
				got[subs+"@"+places] = gist(c.Shares)
				sum := 0.0
				for _, s := range c.Shares {
					sum += s.Fraction
				}
				if math.Abs(sum-1) > 1e-9 {
					t.Errorf("cohort %s@%s: fractions sum to %v", subs, places, sum)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || omitted != 0 {
				t.Errorf("ServedNow(%s) (-want +got, omitted %d):\n%s", tt.base, omitted, diff)
			}
		})
	}
}

// TestServedNowAgreesWithSelect: the shares are what Select gives nodes,
// one by one: over many vmIds, each version's part of the answers is its
// fraction (the buckets are a fixed hash, so this is exact to sampling).
func TestServedNowAgreesWithSelect(t *testing.T) {
	t.Parallel()
	releases := []Release{rel("202604.01.1", Complete, 100), rel("202604.01.2", Rolling, 30), rel("202604.01.3", Paused, 15), rel("202604.01.4", Halted, 50)}
	cohorts, _ := ServedNow(releases, "202604.01", []Place{{Region: "eastus"}}, testNow)
	if len(cohorts) != 1 {
		t.Fatalf("%d cohorts, want 1", len(cohorts))
	}
	const n = 20000
	got := map[string]int{}
	for i := range n {
		sel := Select(releases, Node{VMID: fmt.Sprintf("vm-%06d", i), Region: "eastus", Base: "202604.01", Now: testNow})
		got[sel.Hotfixes["202604.01"]]++
	}
	for _, s := range cohorts[0].Shares {
		if part := float64(got[s.Version]) / n; math.Abs(part-s.Fraction) > 0.01 {
			t.Errorf("%q: Select gave %.4f of the nodes, ServedNow says %.4f", s.Version, part, s.Fraction)
		}
	}
}

// TestServedNowBounded: however many subscription sets the scopes name, a
// base has at most maxCohorts cohorts, the rest counted.
func TestServedNowBounded(t *testing.T) {
	t.Parallel()
	var releases []Release
	for i := range maxCohorts + 10 {
		r := rel(fmt.Sprintf("202604.01.%d", i+1), Rolling, 10)
		r.Rollout.Subscriptions = []string{fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i)}
		releases = append(releases, r)
	}
	cohorts, omitted := ServedNow(releases, "202604.01", nil, testNow)
	if len(cohorts) != maxCohorts || omitted != 11 {
		t.Errorf("%d cohorts, %d omitted; want %d and 11 (every set and the others)", len(cohorts), omitted, maxCohorts)
	}
}
