package admin

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/store"
)

// TestStatusServedNow: status says, per base, what each part of its nodes
// gets now and why, from the serving snapshot: the candidate at its
// percentage, the incumbent for the rest, a halted release's nodes back on
// the incumbent, a superseded one as such; each release's fallbacks and
// failure rate beside it, with the rate's definition.
func TestStatusServedNow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4", "202605.01.1"} {
		publish(t, c, signed(t, priv, v))
	}
	for _, v := range []string{"202604.01.1", "202604.01.2"} {
		if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE}); err != nil {
			t.Fatal(err)
		}
	}
	for v, pct := range map[string]int32{"202604.01.3": 10, "202604.01.4": 30} {
		if err := setPct(ctx, c, v, pct, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.4", Action: adminv1.Action_ACTION_HALT}); err != nil {
		t.Fatal(err)
	}
	// 202604.01.3: one node fell back, one failed, two are fine.
	var reports []store.Report
	for i, r := range []store.Report{{Fallback: true, ExitCode: 0}, {ExitCode: 1}, {}, {}} {
		r.VMID, r.Boot, r.Base, r.Agent, r.HotfixVersion, r.RequestedVersion, r.Time = "vm-"+string(rune('a'+i)), "b", "202604.01", "hotfix", "202604.01.3", "202604.01.3", testNow
		if r.Fallback {
			r.FallbackReason = "exit 3 before the bootstrap"
		}
		reports = append(reports, r)
	}
	if _, err := h.store.PutReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	h.reload(t)

	st, err := c.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.GetFailureRateDefinition(), "(failed + fell back + refused as signed) / judged") {
		t.Errorf("failure rate definition %q", st.GetFailureRateDefinition())
	}
	type row struct {
		Version, Role string
		Percent       float64
		Instead       string
	}
	got := map[string][]row{}
	var candidate *adminv1.ServedShare
	for _, b := range st.GetServedNow() {
		if len(b.GetCohorts()) != 1 || !b.GetCohorts()[0].GetOtherSubscriptions() || b.GetCohorts()[0].GetPlaces()[0].GetRegion() != "eastus" {
			t.Errorf("base %s: cohorts %v, want one: every subscription, served from eastus", b.GetBase(), b.GetCohorts())
			continue
		}
		for _, s := range b.GetCohorts()[0].GetShares() {
			got[b.GetBase()] = append(got[b.GetBase()], row{s.GetVersion(), s.GetRole(), math.Round(s.GetFraction() * 100), s.GetInstead()})
			if s.GetVersion() == "202604.01.3" {
				candidate = s
			}
			if s.GetWhy() == "" {
				t.Errorf("%s %q: no why", b.GetBase(), s.GetVersion())
			}
		}
	}
	want := map[string][]row{
		"202604.01": {
			{"202604.01.4", "halted", 0, "202604.01.2"},
			{"202604.01.3", "candidate", 10, ""},
			{"202604.01.2", "incumbent", 90, ""},
			{"202604.01.1", "superseded", 0, "202604.01.2"},
			{"", "baked", 0, ""},
		},
		"202605.01": {{"202605.01.1", "draft", 0, ""}, {"", "baked", 100, ""}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("served now (-want +got):\n%s", diff)
	}
	if candidate.GetFellBack() != 1 || candidate.GetFailures() != 2 || candidate.GetJudged() != 4 || !strings.Contains(candidate.GetWhy(), "rolling at 10%") {
		t.Errorf("candidate %v: want 1 fell back, 2 failures of 4 judged, rolling at 10%%", candidate)
	}
	for _, b := range st.GetServedNow() {
		for _, s := range b.GetCohorts()[0].GetShares() {
			switch s.GetRole() {
			case "halted":
				if !strings.Contains(s.GetWhy(), "its nodes get 202604.01.2") {
					t.Errorf("halted: %q", s.GetWhy())
				}
			case "superseded":
				if !strings.Contains(s.GetWhy(), "202604.01.2 serves every node it would") {
					t.Errorf("superseded: %q", s.GetWhy())
				}
			}
		}
	}
}
