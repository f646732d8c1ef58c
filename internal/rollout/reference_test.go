package rollout

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"nodehotfix/internal/hotfix"
)

// referenceInstalls models a reference-baked node (Azure AgentBaker's agent)
// as reference-system.md describes it: check-hotfix stages only a non-empty
// served `hotfixes` map, replacing the staged map and keeping the staged
// legacy `version` (§3.6, §3.9); download-hotfix resolves the map entry for
// its base when the map is non-empty, else the legacy version (§4.4), and
// installs it when it has the same YYYYMM.DD and a strictly higher patch
// (§4.3, lenient parsing). It returns what the node would install.
func referenceInstalls(t *testing.T, customData, served, baked string) string {
	t.Helper()
	type pointer struct {
		Version  string            `json:"version"`
		Hotfixes map[string]string `json:"hotfixes"`
	}
	var staged, got pointer
	if err := json.Unmarshal([]byte(customData), &staged); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(served), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Hotfixes) > 0 {
		staged.Hotfixes = got.Hotfixes
	}
	parts := strings.SplitN(strings.TrimSpace(baked), ".", 3)
	base := parts[0] + "." + parts[1]
	want := staged.Version
	if len(staged.Hotfixes) > 0 {
		want = staged.Hotfixes[base]
	}
	want = strings.TrimSpace(want)
	if want == "" {
		return ""
	}
	cur, okCur := referenceSemver(baked)
	hf, okHF := referenceSemver(want)
	if !okCur || !okHF || cur[0] != hf[0] || cur[1] != hf[1] || hf[2] <= cur[2] {
		return ""
	}
	return want
}

// referenceSemver parses as the reference's lenient semver does for these
// inputs: leading zeros allowed, prerelease and build metadata ignored.
func referenceSemver(s string) ([3]int, bool) {
	s, _, _ = strings.Cut(s, "+")
	s, _, _ = strings.Cut(s, "-")
	parts := strings.Split(s, ".")
	var v [3]int
	if len(parts) < 2 || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// TestRevocationReachesReferenceNodes: once a release is revoked, a
// reference-baked node whose custom data names it must not install it,
// whatever shape its custom data has; a release still rolling for the node
// is still installed. Our own nodes read the same document as "not newer"
// and remove a staged copy.
func TestRevocationReachesReferenceNodes(t *testing.T) {
	t.Parallel()
	const baked = "202604.01.0"
	node := Node{Now: testNow, VMID: "6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", SubscriptionID: "s", Region: "eastus"}
	revoked := Release{Base: "202604.01", Version: "202604.01.1", Revoked: true, Envelope: json.RawMessage(`{"r":1}`), NotAfter: testExpiry, Rollout: Rollout{State: Complete, Percent: 100}}
	newer := Release{Base: "202604.01", Version: "202604.01.2", Envelope: json.RawMessage(`{"r":2}`), NotAfter: testExpiry, Rollout: Rollout{State: Complete, Percent: 100}}
	tests := []struct {
		name       string
		releases   []Release
		customData string
		want       string
	}{
		{"map-custom-data", []Release{revoked}, `{"hotfixes":{"202604.01":"202604.01.1"}}`, ""},
		{"legacy-custom-data", []Release{revoked}, `{"version":"202604.01.1"}`, ""},
		{"no-custom-data", []Release{revoked}, `{}`, ""},
		{"newer-release-rolling", []Release{revoked, newer}, `{"hotfixes":{"202604.01":"202604.01.1"}}`, "202604.01.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sel := Select(tt.releases, node)
			served, err := sel.Pointer().MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if got := referenceInstalls(t, tt.customData, string(served), baked); got != tt.want {
				t.Errorf("a reference node served %s installs %q, want %q", served, got, tt.want)
			}

			// Ours: the served pointer merged over custom data, then the
			// one decision, with the revoked version staged.
			staged, err := hotfix.ParsePointer([]byte(tt.customData))
			if err != nil {
				t.Fatal(err)
			}
			p, err := hotfix.ParsePointer(served)
			if err != nil {
				t.Fatal(err)
			}
			d := hotfix.Select(hotfix.Input{Baked: baked, Pointer: staged.WithServed(p), Staged: hotfix.Staged{Present: true, Reported: "202604.01.1"}})
			if d.Agent == hotfix.AgentHotfix || !d.Remove {
				t.Errorf("our node runs %s (%s), remove=%v; want the revoked copy refused and removed", d.Agent, d.Reason, d.Remove)
			}
		})
	}

	// Without the tombstone (the document lpsd served before), the model
	// installs the revoked version, as the reference was observed to do.
	if got := referenceInstalls(t, `{"hotfixes":{"202604.01":"202604.01.1"}}`, `{"hotfixes":{},"revoked":["202604.01.1"]}`, baked); got != "202604.01.1" {
		t.Errorf("the reference model without a tombstone installs %q; it should reproduce the observed gap", got)
	}
}
