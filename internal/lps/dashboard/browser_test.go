package dashboard

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// browserEnv, set to "required" (as .ci/run does), turns a missing
// Chromium into a failure instead of a skip.
const browserEnv = "NODEHOTFIX_BROWSER_TESTS"

// newBrowser starts a headless Debian Chromium for t, or skips the test
// when there is none and browserEnv does not require one.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: not in -short")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(browserEnv) == "required" {
			t.Fatalf("%s=required but no chromium: %v", browserEnv, err)
		}
		t.Skipf("no chromium (apt-get install chromium; %s=required makes this a failure)", browserEnv)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
		// The test server's certificate is httptest's own.
		chromedp.Flag("ignore-certificate-errors", true),
		// This machine has no internet: no background requests.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	ctx, cancelT := context.WithTimeout(ctx, 5*time.Minute) // a bound, not a measure: CI shares two cores
	t.Cleanup(cancelT)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshot saves the whole page as name in the test's artifact directory
// (go test -artifacts keeps them), and in $DASHBOARD_SCREENSHOTS if set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	saveShot(t, ctx, name, chromedp.FullScreenshot(100) /* 100: PNG */)
}

// viewShot saves what the window shows of the page, as screenshot does:
// the top of a page too long to read whole.
func viewShot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	saveShot(t, ctx, name, chromedp.CaptureScreenshot())
}

func saveShot(t *testing.T, ctx context.Context, name string, shot chromedp.Action[[]byte]) {
	t.Helper()
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("DASHBOARD_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// replaced reports an error of chromedp acting on a node that a live
// refresh replaced between finding it and acting on it.
func replaced(err error) bool {
	for _, m := range []string{"Could not find node", "No node with given id", "Node is detached", "Cannot find context with specified id"} {
		if strings.Contains(err.Error(), m) {
			return true
		}
	}
	return false
}

// navigated reports an error of chromedp evaluating in a page that a
// navigation (a form's answer) replaced meanwhile.
func navigated(err error) bool {
	return strings.Contains(err.Error(), "Inspected target navigated or closed") || strings.Contains(err.Error(), "Cannot find context with specified id") ||
		strings.Contains(err.Error(), "Execution context was destroyed")
}

// TestBrowser drives the dashboard in a real Chromium: sign in, watch a
// release's counts move while the fleet reports (the page refreshes
// itself), list its nodes (failing first, with their reasons, paged, as
// CSV, each explained), halt it from the page and find the audit entry;
// take a draft through every other action (set percent, plan after its
// dry run, skip, pause, resume, complete, revoke), with a resume typed
// on a page that said paused refused once another operator halted the
// release; and see a forged form and a reader's action refused.
func TestBrowser(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	// Two replicas, the other's clock minutes behind: the releases page
	// shows it marked.
	f := newFixtureReplicas(t, 300*time.Millisecond, rollout.Policy{}, []replicaBeat{{"lpsd-eastus-1", 2 * time.Second}, {"lpsd-eastus-2", 3 * time.Minute}})
	f.publish(t, version)
	f.publish(t, "202605.02.1")
	const draft = "202606.03.1"
	f.publishDraft(t, draft)
	f.report(t, version, 0, 120, false)
	f.report(t, version, 120, 3, true)
	f.reportEach(t, version, 200, 2, func(r *store.Report) { r.Fallback, r.FallbackReason = true, "bootstrap timed out" })
	u := f.srv.URL

	do := func(ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// text reads an element's text, again if a live refresh replaced it
	// as it was read.
	text := func(ctx context.Context, sel string) string {
		t.Helper()
		for attempt := 1; ; attempt++ {
			s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err == nil {
				return s
			}
			if attempt == 3 || !replaced(err) {
				t.Fatalf("text of %s: %v", sel, err)
			}
		}
	}
	eval := func(ctx context.Context, expr string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return n
	}
	// until waits for a JavaScript condition, on whatever page a form's
	// answer navigates to (polling through the navigation); slow machines
	// get a minute.
	until := func(what, cond string) {
		t.Helper()
		for attempt := 1; ; attempt++ {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(time.Minute)))
			if err == nil {
				return
			}
			if attempt == 5 || !navigated(err) {
				t.Fatalf("%s: %v\n%s", what, err, text(ctx, "main"))
			}
		}
	}
	banner := func(kind, want string) string {
		return `Array.from(document.querySelectorAll(".banner.` + kind + `")).some(b => b.innerText.includes(` + strconv.Quote(want) + `))`
	}
	var submitAt func(path, action, reason string, fresh bool, fill ...chromedp.Action[chromedp.Void])
	// submit fills in and sends the form of action on v's release page as
	// an operator does (fill, then the reason, the confirmation unless the
	// form has none, and its button), from a fresh page unless fresh is
	// false (the page in the browser is the one to act on). A live
	// refresh that replaces the form while it is filled in starts it again
	// on a fresh page: nothing was sent then.
	submit := func(v, action, reason string, fresh bool, fill ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		submitAt("/releases/"+v, action, reason, fresh, fill...)
	}
	submitAt = func(path, action, reason string, fresh bool, fill ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		form := "form.action-" + action
		if fresh {
			do(ctx, action+" page", chromedp.Navigate(u+path), chromedp.WaitVisible(chromedp.CSS(form)))
		}
		for attempt := 1; ; attempt++ {
			steps := append(slices.Clone(fill), chromedp.SendKeys(chromedp.ID("reason-"+action), reason))
			if action != "preview-plan" {
				steps = append(steps, chromedp.Click(chromedp.CSS(form+" input[name=confirm]")))
			}
			err := chromedp.Do(ctx, append(steps, chromedp.Click(chromedp.CSS(form+" button")))...)
			if err == nil {
				return
			}
			if attempt == 3 || !replaced(err) {
				t.Fatalf("%s on %s: %v", action, path, err)
			}
			do(ctx, action+" page again", chromedp.Navigate(u+path), chromedp.WaitVisible(chromedp.CSS(form)))
		}
	}

	do(ctx, "sign-in page", chromedp.Navigate(u+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	screenshot(t, ctx, "login.png")
	do(ctx, "sign in",
		chromedp.SendKeys(chromedp.ID("token"), opsToken),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("table.releases")),
	)
	// The first view may predate the reports: the page catches up by itself.
	// The first row is version's; its eighth cell, what it reported.
	const reported = `document.querySelector("table.releases tbody tr").cells[7].innerText`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](reported+` === "125"`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("releases table after sign-in:\n%s", text(ctx, "table.releases tbody"))
	}

	// The fleet reports; the page, never reloaded, shows it.
	eval(ctx, `window.notReloaded = 1`)
	f.report(t, version, 123, 77, false)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](reported+` === "202"`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the counts never moved: %v", err)
	}
	if eval(ctx, `window.notReloaded || 0`) != 1 {
		t.Errorf("the counts moved by a full reload, not a live refresh")
	}
	screenshot(t, ctx, "releases.png")

	// Its nodes: linked from its page, the failing first under their
	// reasons, paged, downloadable, each VM explained.
	do(ctx, "release page", chromedp.Navigate(u+"/releases/"+version), chromedp.WaitVisible(chromedp.ID("reason-halt")))
	screenshot(t, ctx, "release.png")
	for attempt := 1; ; attempt++ {
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.nodes-link a[href$="/nodes"]`)), chromedp.WaitVisible(chromedp.CSS("table.nodes")))
		if err == nil {
			break
		}
		if attempt == 3 || !replaced(err) {
			t.Fatalf("the nodes link: %v", err)
		}
	}
	if got := text(ctx, "table.reasons tbody"); !strings.Contains(got, "3\tfailed\tprovision exited 1") || !strings.Contains(got, "2\tfellBack\tbootstrap timed out") {
		t.Errorf("the reasons:\n%s", got)
	}
	if got := text(ctx, "table.nodes tbody tr:first-child"); !strings.HasPrefix(got, "vm-120\tfailed\tprovision exited 1") {
		t.Errorf("the first node listed: %q, want vm-120, failed", got)
	}
	if got := text(ctx, "#list"); got != "Nodes 1 to 100 of 202" {
		t.Errorf("the list says %q", got)
	}
	viewShot(t, ctx, "nodes.png")
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`fetch(document.querySelector("a.csv").href).then(async r => [r.headers.get("Content-Type"), ...(await r.text()).trim().split("\n")])`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the CSV: %v", err)
	}
	if len(lines) != 204 || lines[0] != "text/csv; charset=utf-8" || lines[1] != strings.Join(csvHeader, ",") || !strings.HasPrefix(lines[2], "vm-120,") {
		t.Errorf("the CSV: %d lines, starting %q", len(lines), lines[:min(3, len(lines))])
	}
	do(ctx, "the next page", chromedp.Click(chromedp.CSS(`a[rel=next]`)), chromedp.WaitVisible(chromedp.CSS("table.nodes")))
	if got := text(ctx, "#list"); got != "Nodes 101 to 200 of 202" {
		t.Errorf("the second page says %q", got)
	}
	if err := f.snaps.Load(t.Context()); err != nil { // what explain reads
		t.Fatal(err)
	}
	do(ctx, "explain from the nodes", chromedp.Navigate(u+"/releases/"+version+"/nodes?outcome=failed"), chromedp.WaitVisible(chromedp.CSS("table.nodes")),
		chromedp.Click(chromedp.CSS(`table.nodes tbody a[href^="/explain"]`)), chromedp.WaitVisible(chromedp.CSS("section.decision")))
	if got, _ := chromedp.Run(ctx, chromedp.Value(chromedp.ID("vm_id"))); got != "vm-120" {
		t.Errorf("explain from the nodes page asks about %q, want vm-120", got)
	}
	screenshot(t, ctx, "explain.png")

	// Halt it from its page, with a reason.
	submit(version, "halt", "failure rate up after the kubelet change", true)
	until("the halt", banner("ok", "halt: done"))
	if got := text(ctx, "h1"); !strings.Contains(got, "halted") {
		t.Errorf("after the halt the page says %q", got)
	}
	do(ctx, "audit page", chromedp.Navigate(u+"/audit?target="+version), chromedp.WaitVisible(chromedp.CSS("table.audit")))
	if got := text(ctx, "table.audit tbody"); !strings.Contains(got, "token:ops") || !strings.Contains(got, "failure rate up after the kubelet change") || !strings.Contains(got, "state complete→halted") {
		t.Errorf("audit after the halt:\n%s", got)
	}
	screenshot(t, ctx, "audit.png")

	// A draft through every other action, each from its page as it is.
	submit(draft, "percent", "start the rollout", true, chromedp.SendKeys(chromedp.ID("percent"), "10"))
	until("set percent", banner("ok", "percent: done"))
	submit(draft, "preview-plan", "a plan for the rest", true, chromedp.SendKeys(chromedp.ID("steps"), "10:1h:5,50:1h:10,100:1h:20"))
	until("the plan's dry run", `document.querySelector("h1").innerText.includes("dry run")`)
	if got := text(ctx, "table.plan tbody"); !strings.Contains(got, "2/3\t50%\t1h") {
		t.Errorf("the dry run's steps:\n%s", got)
	}
	screenshot(t, ctx, "plan-preview.png")
	do(ctx, "apply the plan", chromedp.Click(chromedp.CSS("form.action-plan input[name=confirm]")), chromedp.Click(chromedp.CSS("form.action-plan button")))
	until("the plan", banner("ok", "plan: done"))
	f.reportEach(t, draft, 0, 40, func(r *store.Report) {})
	f.reportEach(t, draft, 40, 2, func(r *store.Report) { r.ExitCode = 1 })
	submit(draft, "skip", "the canary subscription is drained", true)
	until("the skip", banner("ok", "skip: done"))
	until("the skip's step", `document.querySelector(".facts").innerText.includes("2/3 at 50%")`)
	f.look(t) // as the autopilot's next look would: the history shows the skip
	until("the skip in the history", `Array.from(document.querySelectorAll("svg.chart .legend")).some(e => e.textContent === "50% rolling")`)
	until("the draft's reports", `document.querySelector("main").innerText.includes("reported 42")`)
	screenshot(t, ctx, "release-actions.png")
	submit(draft, "pause", "waiting for the weekend", true)
	until("the pause", banner("ok", "pause: done"))

	// The lost update this prevents: a resume typed on a page that says
	// paused (the page stops refreshing while a form is filled in), sent
	// after another operator halted the release.
	do(ctx, "the paused page", chromedp.Navigate(u+"/releases/"+draft), chromedp.WaitVisible(chromedp.ID("reason-resume")))
	submitted := false
	for attempt := 1; !submitted; attempt++ {
		err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("reason-resume"), "weekend over"))
		if err == nil {
			if _, err := f.api.Transition(admin.WithActor(t.Context(), "cert:alice"), &adminv1.TransitionRequest{Version: draft, Action: adminv1.Action_ACTION_HALT, Reason: "canary nodes fail"}); err != nil {
				t.Fatal(err)
			}
			do(ctx, "the stale resume", chromedp.Click(chromedp.CSS("form.action-resume input[name=confirm]")), chromedp.Click(chromedp.CSS("form.action-resume button")))
			submitted = true
			continue
		}
		if attempt == 3 || !replaced(err) {
			t.Fatalf("the resume: %v", err)
		}
		do(ctx, "the paused page again", chromedp.Navigate(u+"/releases/"+draft), chromedp.WaitVisible(chromedp.ID("reason-resume")))
	}
	until("the stale resume's refusal", banner("err", "changed since you loaded this page"))
	if got := text(ctx, ".banner.err"); !strings.Contains(got, "state paused→halted") || !strings.Contains(got, "resume not applied") {
		t.Errorf("the refusal says %q, want what changed", got)
	}
	if got := text(ctx, "h1"); !strings.Contains(got, "halted") {
		t.Errorf("the refusal's page says %q, want the release as it is now", got)
	}
	screenshot(t, ctx, "stale.png")
	// From the page as it is now, the resume is the operator's to make.
	submit(draft, "resume", "fixed: a bad canary subscription", false)
	until("the resume", banner("ok", "resume: done"))
	submit(draft, "complete", "healthy everywhere", true)
	until("the complete", banner("ok", "complete: done"))
	submit(draft, "revoke", "superseded by 202606.03.2", true)
	until("the revoke", banner("ok", "revoke: done"))
	if got := text(ctx, "h1"); !strings.Contains(got, "revoked") {
		t.Errorf("after the revoke the page says %q", got)
	}

	// Freeze every rollout from the releases page, as an operator.
	submitAt("/", "freeze", "CHG 5120: holiday change freeze", true)
	until("the freeze", banner("ok", "freeze: done"))
	if got := text(ctx, ".banner.frozen"); !strings.Contains(got, "Every rollout is frozen") || !strings.Contains(got, "CHG 5120") {
		t.Errorf("frozen banner = %q", got)
	}
	screenshot(t, ctx, "frozen.png")

	// A forged form, from the signed-in browser: refused.
	if code := eval(ctx, `fetch("/releases/202605.02.1/halt", {method: "POST", body: new URLSearchParams({csrf: "forged", revision: "1", reason: "x", confirm: "yes"})}).then(r => r.status)`); code != 403 {
		t.Errorf("forged halt: HTTP %d, want 403", code)
	}

	// A reader: no actions offered, and one sent by hand is refused.
	do(ctx, "sign out", chromedp.Navigate(u+"/"), chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.ID("token")))
	do(ctx, "reader sign-in",
		chromedp.SendKeys(chromedp.ID("token"), readerToken),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("table.releases")),
	)
	screenshot(t, ctx, "releases-reader.png")
	do(ctx, "reader's release page", chromedp.Navigate(u+"/releases/202605.02.1"), chromedp.WaitVisible(chromedp.CSS("h1")))
	if got := text(ctx, "main"); !strings.Contains(got, "has the reader role") {
		t.Errorf("reader's release page:\n%s", got)
	}
	if code := eval(ctx, `fetch("/releases/202605.02.1/halt", {method: "POST", body: new URLSearchParams({csrf: document.querySelector("input[name=csrf]").value, revision: "1", reason: "x", confirm: "yes"})}).then(r => r.status)`); code != 403 {
		t.Errorf("reader's halt: HTTP %d, want 403", code)
	}
	entries, err := f.st.Audit(t.Context(), 0, 100)
	var got []string
	for _, e := range entries {
		got = append(got, e.Actor+" "+e.Action+" "+e.Target)
	}
	want := []string{"token:test publish " + version, "token:test complete " + version, "token:test publish 202605.02.1", "token:test complete 202605.02.1", "token:test publish " + draft,
		"token:ops halt " + version, "token:ops rollout-set " + draft, "token:ops plan " + draft, "token:ops skip " + draft, "token:ops pause " + draft,
		"cert:alice halt " + draft, "token:ops resume " + draft, "token:ops complete " + draft, "token:ops revoke " + draft, "token:ops freeze fleet"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("audit = %q, %v; want %q", got, err, want)
	}

	// Frozen: every page says so, a reader's too, with no form to thaw.
	do(ctx, "frozen releases page", chromedp.Navigate(u+"/"), chromedp.WaitVisible(chromedp.CSS(".banner.frozen")))
	if got := text(ctx, ".banner.frozen"); !strings.Contains(got, "Every rollout is frozen") || !strings.Contains(got, "CHG 5120") {
		t.Errorf("frozen banner (reader) = %q", got)
	}
	if n := eval(ctx, `document.querySelectorAll("form.action-freeze").length`); n != 0 {
		t.Errorf("a reader is offered %d freeze forms", n)
	}
}

// TestBrowserHistory: a release's page, in a real Chromium, draws its
// recorded history after it was revoked and every report it was counted
// from was pruned: the percentage on bands of its states (draft, rolling,
// paused, rolling, halted, revoked), its failure rate against its
// baseline's and its counts, as the looks recorded them.
func TestBrowserHistory(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	f := newFixture(t)
	const v = "202606.03.1"
	f.publishDraft(t, v)
	t0 := time.Now().Add(-80 * time.Minute).Truncate(time.Minute)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	reports := func(m, from, n, failed int, agent string) {
		t.Helper()
		var rs []store.Report
		for i := from; i < from+n; i++ {
			r := store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "b", SubscriptionID: "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f", Base: "202606.03", BakedVersion: "202606.03.0",
				Agent: agent, AgentVersion: v, HotfixVersion: v, Time: at(m)}
			if agent == "baked" {
				r.AgentVersion, r.HotfixVersion = "202606.03.0", ""
			}
			if i < from+failed {
				r.ExitCode = 1
			}
			rs = append(rs, r)
		}
		if _, err := f.st.PutReports(t.Context(), rs); err != nil {
			t.Fatal(err)
		}
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	transition := func(a adminv1.Action, reason string) {
		t.Helper()
		must(f.api.Transition(opsCtx(t), &adminv1.TransitionRequest{Version: v, Action: a, Reason: reason}))
	}
	f.lookAt(t, at(0))
	must(f.api.SetRollout(opsCtx(t), &adminv1.SetRolloutRequest{Version: v, Percent: 5, Reason: "start"}))
	reports(5, 1000, 40, 1, "baked")
	reports(5, 0, 10, 0, "hotfix")
	f.lookAt(t, at(10))
	must(f.api.SetRollout(opsCtx(t), &adminv1.SetRolloutRequest{Version: v, Percent: 20, Reason: "wider"}))
	reports(15, 10, 21, 1, "hotfix")
	f.lookAt(t, at(20))
	transition(adminv1.Action_ACTION_PAUSE, "weekend")
	f.lookAt(t, at(30))
	transition(adminv1.Action_ACTION_RESUME, "weekend over")
	f.lookAt(t, at(40))
	must(f.api.SetRollout(opsCtx(t), &adminv1.SetRolloutRequest{Version: v, Percent: 50, Reason: "wider"}))
	reports(45, 31, 20, 8, "hotfix")
	f.lookAt(t, at(50))
	transition(adminv1.Action_ACTION_HALT, "failure rate up")
	f.lookAt(t, at(60))
	must(f.api.Revoke(opsCtx(t), &adminv1.RevokeRequest{Version: v, Reason: "bad"}))
	f.lookAt(t, at(70))
	if _, err := f.st.PruneReports(t.Context(), store.Prune{Before: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	u := f.srv.URL
	if err := chromedp.Do(ctx,
		chromedp.Navigate(u+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), readerToken), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("table.releases")),
		chromedp.Navigate(u+"/releases/"+v), chromedp.WaitVisible(chromedp.CSS(`svg.chart rect.band`)),
	); err != nil {
		t.Fatalf("the revoked release's page: %v", err)
	}
	marks, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("svg.chart .state-mark")).map(e => e.textContent)`))
	if want := []string{"draft", "rolling", "paused", "rolling", "halted", "halted, revoked"}; err != nil || !slices.Equal(marks, want) {
		t.Errorf("the rollout chart's states = %q, %v; want %q", marks, err, want)
	}
	legends, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("svg.chart .legend")).map(e => e.textContent)`))
	for _, want := range []string{"50% halted, revoked", "release 17.6%", "control 2.5%", "ok 42", "failed 9"} {
		if err != nil || !slices.Contains(legends, want) {
			t.Errorf("the charts' legends = %q, %v; want %q among them", legends, err, want)
		}
	}
	screenshot(t, ctx, "release-history.png")
}
