package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/release"
)

// testNow is the request time of every test node, testExpiry the test
// releases' expiry.
var (
	testNow    = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	testExpiry = testNow.Add(30 * 24 * time.Hour)
)

// Test subscription IDs.
const (
	subA = "0a1b2c3d-0000-4000-8000-00000000000a"
	subB = "0a1b2c3d-0000-4000-8000-00000000000b"
)

func rel(version string, st State, pct int) Release {
	return Release{
		Version:  version,
		Base:     version[:9],
		Envelope: json.RawMessage(`{"v":"` + version + `"}`),
		Rollout:  Rollout{State: st, Percent: pct},
		NotAfter: testExpiry,
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
			ok, _ := r.Includes(Node{Now: testNow, VMID: id})
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
	r, err := r.SetScope(10, []string{" " + strings.ToUpper(subB) + " ", subA, subA}, []string{"EastUS"})
	if err != nil {
		t.Fatal(err)
	}
	want := Rollout{State: Rolling, Percent: 10, Subscriptions: []string{subA, subB}, Regions: []string{"eastus"}}
	if diff := cmp.Diff(want, r.Rollout); diff != "" {
		t.Errorf("SetScope mismatch (-want +got):\n%s", diff)
	}
	if _, err := r.SetScope(5, nil, nil); !errors.Is(err, ErrPercentDecrease) {
		t.Errorf("lowering the percentage: %v, want ErrPercentDecrease", err)
	}
	if _, err := r.SetScope(101, nil, nil); err == nil {
		t.Error("SetScope(101) succeeded")
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
	r.Rollout.Subscriptions = []string{subA}
	r.Rollout.Regions = []string{"eastus"}
	tests := []struct {
		name string
		n    Node
		want bool
		rule string // first failing rule
	}{
		{"in scope", Node{Now: testNow, VMID: "x", SubscriptionID: strings.ToUpper(subA), Region: "eastus"}, true, ""},
		{"other subscription", Node{Now: testNow, VMID: "x", SubscriptionID: subB, Region: "eastus"}, false, "subscription-in-scope"},
		{"other region", Node{Now: testNow, VMID: "x", SubscriptionID: subA, Region: "westus"}, false, "region-in-scope"},
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
		if ok, _ := rel("202604.01.1", st, 100).Includes(Node{Now: testNow, VMID: "x"}); ok {
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
	got := Select(releases, Node{Now: testNow, VMID: "vm-1"})
	want := Selection{
		Hotfixes: map[string]string{"202604.01": "202604.01.2", "202605.30": "202605.30.1"},
		Releases: []json.RawMessage{json.RawMessage(`{"v":"202604.01.2"}`), json.RawMessage(`{"v":"202605.30.1"}`)},
		Revoked:  []string{"202604.01.3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Select mismatch (-want +got):\n%s", diff)
	}
	if s := Select(nil, Node{Now: testNow, VMID: "x"}); !s.Empty() {
		t.Errorf("Select(nil) = %+v, want empty", s)
	}
	decisions, _ := Explain(releases[:2], Node{Now: testNow, VMID: "vm-1"})
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
	declared, trimmed, err := PointerSizes(rels, "202604.01", testNow)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Select(rels, Node{Now: testNow, VMID: "x", Base: "202604.01"}).Pointer().MarshalJSON()
	if declared != len(want) {
		t.Errorf("declared size %d, want %d, what a node of the base is served", declared, len(want))
	}
	if trimmed >= 5000 || trimmed < len(`{"hotfixes":{"202604.01":"202604.01.1","202604.02":"202604.02.1"},"revoked":["202604.01.7"]}`) {
		t.Errorf("trimmed size %d: want every base's hotfix and the revocation, without the 5000-byte envelope", trimmed)
	}
	if d, _, _ := PointerSizes(rels, "202604.02", testNow); d < 5000 {
		t.Errorf("declared size for 202604.02 = %d, want its 5000-byte envelope counted", d)
	}
}

// suggested returns the lpsctl rollout commands a refusal suggests, as the
// states they move to, and fails on a command it does not know.
func suggested(t *testing.T, msg, version string) []State {
	t.Helper()
	verbs := map[string]State{"resume": Rolling, "pause": Paused, "halt": Halted, "complete": Complete}
	var out []State
	for _, m := range regexp.MustCompile("`lpsctl (rollout [a-z]+|[a-z]+) ([^`]+)`").FindAllStringSubmatch(msg, -1) {
		if m[2] != version {
			t.Errorf("%q suggests %q for version %q, want %s", msg, m[0], m[2], version)
		}
		verb, ok := strings.CutPrefix(m[1], "rollout ")
		to, known := verbs[verb]
		if !ok || !known {
			t.Errorf("%q suggests %q, which is not a state change", msg, m[0])
			continue
		}
		out = append(out, to)
	}
	return out
}

// TestRefusalsSuggestOnlyWorkingCommands: a refused transition or scope
// change names only commands the state machine accepts from the state the
// release is in, and a complete release is never told to resume.
func TestRefusalsSuggestOnlyWorkingCommands(t *testing.T) {
	t.Parallel()
	const v = "202604.01.1"
	all := []State{Draft, Rolling, Paused, Halted, Complete}
	for _, from := range all {
		r := rel(v, from, 10)
		if from == Complete {
			r.Rollout.Percent = 100
		}
		var msgs []string
		for _, to := range all {
			if _, err := r.Transition(to); err != nil {
				if !errors.Is(err, ErrInvalidTransition) {
					t.Errorf("%s -> %s: %v, want ErrInvalidTransition", from, to, err)
				}
				msgs = append(msgs, err.Error())
			}
		}
		for _, pct := range []int{5, r.Rollout.Percent, 50} {
			if _, err := r.SetScope(pct, []string{subA}, nil); err != nil {
				msgs = append(msgs, err.Error())
			}
		}
		if _, err := r.SetPlan(canaryPlan(), testNow); err != nil {
			msgs = append(msgs, err.Error())
		}
		for _, msg := range msgs {
			for _, to := range suggested(t, msg, v) {
				if !slices.Contains(transitions[from], to) {
					t.Errorf("%s release: %q suggests moving to %s, which %s cannot", from, msg, to, from)
				}
			}
		}
	}
}

func TestSetScopeByState(t *testing.T) {
	t.Parallel()
	const v = "202604.01.1"
	tests := []struct {
		name    string
		state   State
		from    int
		percent int
		wantErr error // nil: the scope changes
		want    string
	}{
		{"draft", Draft, 0, 10, nil, ""},
		{"rolling-grow", Rolling, 10, 20, nil, ""},
		{"rolling-decrease", Rolling, 10, 5, ErrPercentDecrease, "lpsctl rollout halt " + v},
		{"paused-scope", Paused, 10, 10, nil, ""},
		{"paused-grow", Paused, 10, 20, ErrInvalidTransition, "lpsctl rollout resume " + v},
		{"paused-decrease", Paused, 10, 5, ErrPercentDecrease, ""},
		{"halted-scope", Halted, 10, 10, nil, ""},
		{"halted-grow", Halted, 10, 20, ErrInvalidTransition, "lpsctl rollout resume " + v},
		{"complete-scope", Complete, 100, 100, nil, ""},
		{"complete-lower", Complete, 100, 50, ErrPercentDecrease, ""},
	}
	for _, tt := range tests {
		r := rel(v, tt.state, tt.from)
		got, err := r.SetScope(tt.percent, []string{subB}, []string{"WestEurope2"})
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: SetScope = %v, want %v saying %q", tt.name, err, tt.wantErr, tt.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: SetScope = %v, want the scope changed", tt.name, err)
			continue
		}
		wantState := tt.state
		if wantState == Draft {
			wantState = Rolling
		}
		want := Rollout{State: wantState, Percent: tt.percent, Subscriptions: []string{subB}, Regions: []string{"westeurope2"}}
		if diff := cmp.Diff(want, got.Rollout); diff != "" {
			t.Errorf("%s: rollout (-want +got):\n%s", tt.name, diff)
		}
	}
	revoked := rel(v, Complete, 100)
	revoked.Revoked = true
	if _, err := revoked.SetScope(100, []string{subA}, nil); !errors.Is(err, ErrRevoked) || strings.Contains(err.Error(), "lpsctl rollout") {
		t.Errorf("SetScope on a revoked release = %v, want ErrRevoked suggesting no rollout command", err)
	}
}

func TestCheckScope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		subs, regions []string
		bad           string // "" for valid; else the quoted value the error names
	}{
		{"empty", []string{}, []string{}, ""},
		{"blank-entries", []string{"", "  "}, []string{""}, ""},
		{"guid-any-case", []string{strings.ToUpper(subA), " " + subB + " "}, nil, ""},
		{"regions", nil, []string{"eastus", "WestEurope2", strings.Repeat("a", 64)}, ""},
		{"curly-quote", []string{"\u201d"}, nil, "\"\u201d\""},
		{"two-curly-quotes", []string{"\u201c\u201d"}, nil, "\"\u201c\u201d\""},
		{"not-guid", []string{"sub-a"}, nil, `"sub-a"`},
		{"guid-braces", []string{"{" + subA + "}"}, nil, `"{` + subA + `}"`},
		{"control", []string{"a\x1b[2Jb"}, nil, `"a\x1b[2Jb"`},
		{"region-hyphen", nil, []string{"east-us"}, `"east-us"`},
		{"region-digit-first", nil, []string{"2east"}, `"2east"`},
		{"region-long", nil, []string{strings.Repeat("a", 65)}, `"` + strings.Repeat("a", 65) + `"`},
		{"region-unicode", nil, []string{"eastüs"}, `"eastüs"`},
	}
	for _, tt := range tests {
		err := CheckScope(tt.subs, tt.regions)
		switch {
		case tt.bad == "" && err != nil:
			t.Errorf("%s: CheckScope = %v, want nil", tt.name, err)
		case tt.bad != "" && (!errors.Is(err, ErrInvalidScope) || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("%s: CheckScope = %v, want ErrInvalidScope naming %s", tt.name, err, tt.bad)
		}
	}
	if err := CheckScope([]string{"\u201d"}, nil); !strings.Contains(err.Error(), "empty list") {
		t.Errorf("a curly quote: %v, want the hint for an empty list", err)
	}
	if _, err := rel("202604.01.1", Rolling, 0).SetScope(10, []string{"\u201d"}, nil); !errors.Is(err, ErrInvalidScope) {
		t.Errorf("SetScope with a curly quote = %v, want ErrInvalidScope", err)
	}
}

func TestNotExpired(t *testing.T) {
	t.Parallel()
	const base = "202604.01"
	old := rel(base+".1", Complete, 100)
	expired := rel(base+".2", Complete, 100)
	expired.NotAfter = testNow
	n := Node{Now: testNow, VMID: "vm-1"}

	ok, rules := expired.Includes(n)
	if ok || len(rules) != 2 || rules[0].Rule != "not-revoked" || rules[1].Rule != RuleNotExpired || rules[1].Passed {
		t.Errorf("expired: Includes = %v, %+v; want refused by %s right after not-revoked", ok, rules, RuleNotExpired)
	}
	if ok, rules := old.Includes(n); !ok || rules[1].Rule != RuleNotExpired || !rules[1].Passed {
		t.Errorf("unexpired: Includes = %v, %+v; want %s passed", ok, rules, RuleNotExpired)
	}

	// The older release is served instead, and the expired one counted.
	sel := Select([]Release{old, expired}, n)
	if sel.Hotfixes[base] != old.Version || !cmp.Equal(sel.Expired, []string{expired.Version}) || len(sel.Releases) != 1 || string(sel.Releases[0]) != string(old.Envelope) {
		t.Errorf("Select = %+v, want %s served and %s counted expired", sel, old.Version, expired.Version)
	}
	// With a revocation of the base, the expired release leaves its
	// tombstone, never its hotfix or envelope.
	revoked := rel(base+".3", Complete, 100)
	revoked.Revoked = true
	sel = Select([]Release{expired, revoked}, n)
	body, _ := sel.Pointer().MarshalJSON()
	if sel.Hotfixes != nil || !cmp.Equal(sel.Tombstones, []string{base}) || strings.Contains(string(body), expired.Version) {
		t.Errorf("Select with a revocation = %+v (%s), want only the tombstone and the revocation", sel, body)
	}
	// Out of scope, or halted: not counted as skipped for expiry.
	halted := expired
	halted.Rollout.State = Halted
	if sel := Select([]Release{halted}, n); len(sel.Expired) != 0 {
		t.Errorf("a halted expired release counted as skipped: %+v", sel)
	}

	for name, tt := range map[string]struct {
		r Release
		n Node
	}{
		"zero-now":       {old, Node{VMID: "vm-1"}},
		"unknown-expiry": {func() Release { r := old; r.NotAfter = time.Time{}; return r }(), n},
	} {
		if sel := Select([]Release{tt.r}, tt.n); !sel.Empty() {
			t.Errorf("%s: Select = %+v, want nothing served", name, sel)
		}
	}

	// An expired release drops out of the size budget; a revoked one stays.
	big := rel("202604.02.1", Complete, 100)
	big.Envelope = json.RawMessage(`{"v":"` + strings.Repeat("y", 5000) + `"}`)
	if d, _, _ := PointerSizes([]Release{big}, "202604.02", testNow); d < 5000 {
		t.Errorf("unexpired: declared %d, want the envelope counted", d)
	}
	if d, tr, _ := PointerSizes([]Release{big}, "202604.02", testExpiry); d > 100 || tr > 100 {
		t.Errorf("expired: declared %d, trimmed %d, want the release left out", d, tr)
	}
}

func TestWithNotAfter(t *testing.T) {
	t.Parallel()
	_, priv, err := release.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := release.Sign(release.Release{
		Base: "202604.01", Version: "202604.01.1", NotAfter: testExpiry,
		Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://x.example/a", SHA256: strings.Repeat("ab", 32), Size: 1}},
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	stored := Release{Version: "202604.01.1", Base: "202604.01", Envelope: env}
	if got := stored.WithNotAfter().NotAfter; !got.Equal(testExpiry) {
		t.Errorf("WithNotAfter from the envelope = %v, want %v", got, testExpiry)
	}
	set := stored
	set.NotAfter = testNow
	if got := set.WithNotAfter().NotAfter; !got.Equal(testNow) {
		t.Errorf("WithNotAfter kept %v, want the record's %v", got, testNow)
	}
	if got := (Release{Envelope: json.RawMessage(`{"x":1}`)}).WithNotAfter().NotAfter; !got.IsZero() {
		t.Errorf("WithNotAfter of a bad envelope = %v, want zero (unknown)", got)
	}
	b, _ := json.Marshal(Release{Version: "202604.01.1"})
	if strings.Contains(string(b), "not_after") {
		t.Errorf("a record without expiry encodes %s, want no not_after", b)
	}
}
