package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
)

// The freeze form's compare-and-swap is on the page's revision, but the
// first freeze ever is at revision 0, which SetFreeze reads as "any": a
// form from before another operator's freeze is not refused as stale. It
// is answered "freeze: done", though the freeze standing is the other
// operator's, with their reason, and this one's reason is in no record.
func TestFirstFreezeFormStale(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ops := f.signIn(t, opsToken)
	page := waitFor(t, ops, f.srv.URL+"/", "Freeze every rollout")
	rev := revisionOf(t, page)
	if _, err := f.api.SetFreeze(opsCtx(t), &adminv1.SetFreezeRequest{Frozen: true, Reason: "CHG 8: the other operator"}); err != nil {
		t.Fatal(err)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "revision": {rev}, "frozen": {"true"}, "reason": {"CHG 7: mine"}, "confirm": {"yes"}}
	code, body := post(t, ops, f.srv.URL+"/freeze", form, f.srv.URL)
	fz, _, _ := f.st.Freeze(t.Context())
	if code != http.StatusConflict {
		t.Errorf("a freeze form from revision %s, after another operator's freeze: %d (stored reason %q), want 409 stale; body has 'done': %v",
			rev, code, fz.Reason, strings.Contains(body, "done"))
	}
}

// A second operator's form from before the first one's request is
// refused as stale (right), but the refusal says the record changed "not
// its rollout: the autopilot's reason, say" — the change was a request for
// a second operator, which it does not name.
func TestStaleFormNamesTheRequest(t *testing.T) {
	t.Parallel()
	f := newFixturePolicy(t, 50*time.Millisecond, rollout.Policy{TwoPerson: true})
	f.publishDraft(t, version)
	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{{Nodes: 3, BakeSeconds: 3600, MinReports: 2}, {Percent: 100, MinReports: 2}}, Margin: 0.05, MaxFailureRate: 0.2}
	if _, err := f.api.SetPlan(opsCtx(t), &adminv1.SetPlanRequest{Version: version, Plan: plan, Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	ops := f.signIn(t, opsToken)
	page := waitFor(t, ops, f.srv.URL+"/releases/"+version, "a canary of 3 nodes")
	if _, err := f.api.SkipStep(opsCtx(t), &adminv1.SkipStepRequest{Version: version, Reason: "INC 9: looks fine"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("skip by token:test = %v", err)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "revision": {revisionOf(t, page)}, "reason": {"second pair of eyes"}, "confirm": {"yes"}}
	code, body := post(t, ops, f.srv.URL+"/releases/"+version+"/skip", form, f.srv.URL)
	if code == http.StatusConflict && strings.Contains(body, "the autopilot&#39;s reason, say") {
		t.Errorf("stale after a request: the refusal blames the autopilot's reason, not the request for a second operator")
	}
}
