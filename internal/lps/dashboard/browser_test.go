package dashboard

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute) // a bound, not a measure: CI shares two cores
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
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100) /* 100: PNG */)
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

// TestBrowser drives the dashboard in a real Chromium: sign in, watch a
// release's counts move while the fleet reports (the page refreshes
// itself), halt it from the page and find the audit entry, and see a forged
// form and a reader's action refused.
func TestBrowser(t *testing.T) {
	t.Parallel()
	ctx := newBrowser(t)
	f := newFixtureRefresh(t, 300*time.Millisecond)
	f.publish(t, version)
	f.publish(t, "202605.02.1")
	f.report(t, version, 0, 120, false)
	f.report(t, version, 120, 3, true)
	u := f.srv.URL

	do := func(ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(ctx context.Context, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	eval := func(ctx context.Context, expr string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return n
	}

	do(ctx, "sign-in page", chromedp.Navigate(u+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	screenshot(t, ctx, "login.png")
	do(ctx, "sign in",
		chromedp.SendKeys(chromedp.ID("token"), opsToken),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("table.releases")),
	)
	// The first view may predate the reports: the page catches up by itself.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("table.releases tbody").innerText.includes("123")`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("releases table after sign-in:\n%s", text(ctx, "table.releases tbody"))
	}

	// The fleet reports; the page, never reloaded, shows it.
	eval(ctx, `window.notReloaded = 1`)
	f.report(t, version, 123, 77, false)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("table.releases tbody").innerText.includes("200")`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the counts never moved: %v", err)
	}
	if eval(ctx, `window.notReloaded || 0`) != 1 {
		t.Errorf("the counts moved by a full reload, not a live refresh")
	}
	screenshot(t, ctx, "releases.png")

	// Halt it from its page, with a reason.
	do(ctx, "release page", chromedp.Navigate(u+"/releases/"+version), chromedp.WaitVisible(chromedp.ID("reason-halt")))
	screenshot(t, ctx, "release.png")
	// The page refreshes every 300 ms here; a refresh that lands between
	// finding a node and acting on it replaces the node ("Could not find
	// node with given id"): start the halt again from a fresh page then.
	// Halting twice is a no-op, so a retry after a submit that landed is
	// harmless.
	for attempt := 1; ; attempt++ {
		err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("reason-halt"), "failure rate up after the kubelet change"),
			chromedp.Click(chromedp.CSS("form.action-halt input[name=confirm]")),
			chromedp.Click(chromedp.CSS("form.action-halt button")),
			chromedp.WaitVisible(chromedp.CSS(".banner.ok")),
		)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Could not find node") {
			t.Fatalf("halt: %v", err)
		}
		do(ctx, "release page again", chromedp.Navigate(u+"/releases/"+version), chromedp.WaitVisible(chromedp.ID("reason-halt")))
	}
	if got := text(ctx, "h1"); !strings.Contains(got, "halted") {
		t.Errorf("after the halt the page says %q", got)
	}
	do(ctx, "audit page", chromedp.Navigate(u+"/audit?target="+version), chromedp.WaitVisible(chromedp.CSS("table.audit")))
	if got := text(ctx, "table.audit tbody"); !strings.Contains(got, "token:ops") || !strings.Contains(got, "failure rate up after the kubelet change") || !strings.Contains(got, "state complete→halted") {
		t.Errorf("audit after the halt:\n%s", got)
	}
	screenshot(t, ctx, "audit.png")
	if err := f.snaps.Load(t.Context()); err != nil { // what explain reads
		t.Fatal(err)
	}
	do(ctx, "explain",
		chromedp.Navigate(u+"/explain"),
		chromedp.SendKeys(chromedp.ID("vm_id"), "vm-7"),
		chromedp.SendKeys(chromedp.ID("subscription"), "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f"),
		chromedp.Submit(chromedp.ID("vm_id")),
		chromedp.WaitVisible(chromedp.CSS("section.decision")),
	)
	screenshot(t, ctx, "explain.png")

	// A forged form, from the signed-in browser: refused.
	if code := eval(ctx, `fetch("/releases/202605.02.1/halt", {method: "POST", body: new URLSearchParams({csrf: "forged", reason: "x", confirm: "yes"})}).then(r => r.status)`); code != 403 {
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
	if code := eval(ctx, `fetch("/releases/202605.02.1/halt", {method: "POST", body: new URLSearchParams({csrf: document.querySelector("input[name=csrf]").value, reason: "x", confirm: "yes"})}).then(r => r.status)`); code != 403 {
		t.Errorf("reader's halt: HTTP %d, want 403", code)
	}
	if entries, err := f.st.Audit(t.Context(), 0, 100); err != nil || len(entries) != 5 {
		t.Errorf("audit entries: %d, %v; want 5 (2 publishes, 2 completes, 1 halt)", len(entries), err)
	}
}
