package dashboard

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/assess"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/history"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/test/harness"
)

const (
	opsToken    = "0123456789abcdef0123456789abcdef"
	readerToken = "fedcba9876543210fedcba9876543210"
	version     = "202604.01.3"
)

// fixture is a dashboard over a real admin API and store, on a real TLS
// socket.
type fixture struct {
	st   *memstore.Store
	api  *admin.Server
	auth *admin.Auth
	// ca signs the client certificates the server verifies.
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	dash  *Dashboard
	srv   *httptest.Server
	snaps *lps.Snapshotter
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureRefresh(t, 50*time.Millisecond)
}

func newFixtureRefresh(t *testing.T, refresh time.Duration) *fixture {
	t.Helper()
	return newFixturePolicy(t, refresh, rollout.Policy{})
}

// newFixturePolicy is a fixture whose admin API enforces policy.
func newFixturePolicy(t *testing.T, refresh time.Duration, policy rollout.Policy) *fixture {
	t.Helper()
	return newFixtureReplicas(t, refresh, policy, nil)
}

// replicated is a memstore several replicas share, as etcdstore lists
// them: each of ids has beaten behind[i] ago, by now's clock.
type replicated struct {
	*memstore.Store
	ids    []string
	behind []time.Duration
}

func (r replicated) Replicas(context.Context) ([]store.Heartbeat, error) {
	now := time.Now()
	out := make([]store.Heartbeat, len(r.ids))
	for i, id := range r.ids {
		out[i] = store.Heartbeat{ID: id, Time: now.Add(-r.behind[i]), Place: rollout.Place{Region: "eastus"}}
	}
	return out, nil
}

// newFixtureReplicas is newFixturePolicy on a store replicas share, the
// first of replicas (ID: how long ago its heartbeat was) the answering one.
func newFixtureReplicas(t *testing.T, refresh time.Duration, policy rollout.Policy, replicas []replicaBeat) *fixture {
	t.Helper()
	f := &fixture{st: memstore.New()}
	t.Cleanup(func() { f.st.Close() })
	tokens, err := admin.ParseTokens([]byte("ops:" + opsToken + "\nviewer:reader:" + readerToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.snaps = lps.NewSnapshotter(f.st, nil, nil)
	var st store.Store = f.st
	self := ""
	if len(replicas) > 0 {
		rs := replicated{Store: f.st}
		for _, r := range replicas {
			rs.ids, rs.behind = append(rs.ids, r.id), append(rs.behind, r.ago)
		}
		st, self = rs, replicas[0].id
	}
	f.api = admin.New(admin.Config{Store: st, Snapshots: f.snaps, Region: "eastus", Policy: policy, ReplicaID: self})
	f.auth = admin.NewAuth(tokens, nil)
	f.dash = New(Config{Admin: f.api, Auth: f.auth, Refresh: refresh})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	// The serving snapshot, as lpsd keeps one: served-now reads it.
	go func() { f.snaps.Run(ctx); done <- struct{}{} }()
	go func() { f.dash.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	f.srv = httptest.NewUnstartedServer(f.dash)
	f.srv.EnableHTTP2 = true
	f.ca, f.caKey = newCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(f.ca)
	// As on the admin listener: a client certificate is optional, and
	// verified when presented.
	f.srv.TLS = &tls.Config{ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// replicaBeat is a replica of newFixtureReplicas.
type replicaBeat struct {
	id  string
	ago time.Duration
}

// opsCtx is an operator's context for calling the admin API directly.
func opsCtx(t *testing.T) context.Context { return admin.WithActor(t.Context(), "token:test") }

// publish publishes version and completes its rollout, so every node is
// served it and its reports count.
func (f *fixture) publish(t *testing.T, version string) {
	t.Helper()
	f.publishDraft(t, version)
	if _, err := f.api.Transition(opsCtx(t), &adminv1.TransitionRequest{Version: version, Action: adminv1.Action_ACTION_COMPLETE}); err != nil {
		t.Fatal(err)
	}
	f.loadSnapshot(t)
}

// loadSnapshot loads the serving snapshot now: Run reloads on the store's
// change signals, and one sent before its watch began is only picked up
// at the next resync.
func (f *fixture) loadSnapshot(t *testing.T) {
	t.Helper()
	if err := f.snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// publishDraft publishes version as a draft.
func (f *fixture) publishDraft(t *testing.T, version string) {
	t.Helper()
	_, priv, err := release.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	v := hotfix.MustParseVersion(version)
	env, err := release.Sign(release.Release{
		Base: v.Base(), Version: version, NotAfter: time.Now().Add(72 * time.Hour),
		Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://blob.example.com/" + version, SHA256: strings.Repeat("ab", 32), Size: 1234}},
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.api.PublishRelease(opsCtx(t), &adminv1.PublishReleaseRequest{EnvelopeJson: string(env)}); err != nil {
		t.Fatal(err)
	}
	f.loadSnapshot(t)
}

// report stores n outcome reports for version (failed ones when failed).
func (f *fixture) report(t *testing.T, version string, from, n int, failed bool) {
	t.Helper()
	f.reportEach(t, version, from, n, func(r *store.Report) {
		if failed {
			r.ExitCode = 1
		}
	})
}

// reportEach stores n reports for version, vm-<from> on, of nodes that
// ran it with success unless edit says otherwise.
func (f *fixture) reportEach(t *testing.T, version string, from, n int, edit func(*store.Report)) {
	t.Helper()
	var rs []store.Report
	for i := from; i < from+n; i++ {
		r := store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "b", SubscriptionID: "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f", Base: version[:9], BakedVersion: version[:9] + ".0",
			Agent: "hotfix", AgentVersion: version, HotfixVersion: version, Time: time.Now()}
		edit(&r)
		rs = append(rs, r)
	}
	if _, err := f.st.PutReports(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	f.look(t)
}

// look assesses the fleet and records its history, as lpsd's autopilot
// does after each look.
func (f *fixture) look(t *testing.T) {
	t.Helper()
	f.lookAt(t, time.Now())
}

// lookAt is look at time at.
func (f *fixture) lookAt(t *testing.T, at time.Time) {
	t.Helper()
	rels, _, err := f.st.Releases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := assess.Assess(t.Context(), f.st, rels, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := history.NewRecorder(f.st, nil).Record(t.Context(), fleet); err != nil {
		t.Fatal(err)
	}
}

// browser is an HTTP client with a cookie jar, as a browser would be.
func (f *fixture) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := *f.srv.Client() // its own jar: srv.Client is shared
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, origin string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) signIn(t *testing.T, token string) *http.Client {
	t.Helper()
	return f.signInAt(t, f.srv.URL, token)
}

// signInAt signs in with token at the dashboard served at base (another
// dashboard on the fixture's admin API and TLS).
func (f *fixture) signInAt(t *testing.T, base, token string) *http.Client {
	t.Helper()
	c := f.browser(t)
	code, _ := post(t, c, base+"/login", url.Values{"token": {token}, "next": {"/"}}, base)
	if code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", code)
	}
	return c
}

var (
	csrfField     = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	revisionField = regexp.MustCompile(`name="revision" value="([0-9]+)"`)
)

// revisionOf is the revision a release page's forms were rendered at.
func revisionOf(t *testing.T, html string) string {
	t.Helper()
	m := revisionField.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no revision in the page's forms:\n%.500s", html)
	}
	return m[1]
}

// act posts action's form of page (a release page of v) as c would,
// with its CSRF token and revision, a reason and the confirmation, and
// fields over them.
func (f *fixture) act(t *testing.T, c *http.Client, page, v, action string, fields url.Values) (int, string) {
	t.Helper()
	form := url.Values{"csrf": {csrfOf(t, page)}, "revision": {revisionOf(t, page)}, "reason": {"because " + action}, "confirm": {"yes"}}
	for k, vs := range fields {
		form[k] = vs
	}
	return post(t, c, f.srv.URL+"/releases/"+v+"/"+action, form, f.srv.URL)
}

func csrfOf(t *testing.T, html string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%.500s", html)
	}
	return m[1]
}

// waitFor polls get(u) until the body contains want.
func waitFor(t *testing.T, c *http.Client, u, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := get(t, c, u)
		if strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %q:\n%s", u, want, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// completeState is a release page's heading once the release is complete:
// the dashboard renders from the Status it last refreshed, so a page
// built between publish and complete would offer its actions at the
// draft's revision, which the server then refuses as stale.
const completeState = `<span class="state state-complete">complete</span>`

func TestSignIn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.browser(t)
	resp, err := c.Get(f.srv.URL + "/releases/" + version)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2Freleases%2F"+version {
		t.Errorf("signed out: %d to %q, want the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	if code, body := post(t, c, f.srv.URL+"/login", url.Values{"token": {"not-a-token-of-this-lpsd"}}, ""); code != http.StatusUnauthorized || !strings.Contains(body, "not an admin token") {
		t.Errorf("wrong token: %d", code)
	}
	for _, next := range []string{"//evil.example/", "https://evil.example/", "/\\evil"} {
		c := f.browser(t)
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/login", strings.NewReader(url.Values{"token": {opsToken}, "next": {next}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); loc != "/" {
			t.Errorf("next %q redirected to %q, want /", next, loc)
		}
		var cookie *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == sessionCookie {
				cookie = ck
			}
		}
		if cookie == nil || !cookie.Secure || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
			t.Errorf("session cookie %+v: want Secure, HttpOnly, SameSite=Strict", cookie)
		}
	}
	ops := f.signIn(t, opsToken)
	if code, body := get(t, ops, f.srv.URL+"/"); code != http.StatusOK || !strings.Contains(body, "token:ops (operator)") {
		t.Errorf("signed in: %d\n%.400s", code, body)
	}
	// Sign out needs the form's token too.
	_, page := get(t, ops, f.srv.URL+"/")
	if code, _ := post(t, ops, f.srv.URL+"/logout", url.Values{"csrf": {csrfOf(t, page)}}, f.srv.URL); code != http.StatusSeeOther {
		t.Errorf("sign out: %d", code)
	}
	if code, _ := get(t, ops, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("after sign out: %d, want the sign-in page", code)
	}
}

func TestReleasesShowTheFleet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	f.report(t, version, 0, 40, false)
	f.report(t, version, 40, 2, true)
	c := f.signIn(t, readerToken)
	// Served now reads the serving snapshot, which may load after the
	// counts: wait for both.
	body := waitFor(t, c, f.srv.URL+"/", `4.8% (2/42)`)
	for _, want := range []string{version, `state-complete`, `<td class="num">42</td><td class="num">40</td><td class="num">2</td>`, "4.8%", "Served document size per base", "202604.01",
		// What the base's nodes get now: the complete release, with its
		// fallbacks and failure rate beside the rate's definition.
		"Served now", `<td class="num">100%</td>`, `role-incumbent`, "4.8% (2/42)", "all subscriptions @ eastus", "* failure rate = "} {
		if !strings.Contains(body, want) {
			t.Errorf("releases page lacks %q", want)
		}
	}
	// The live refresh asks for the main content only.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
	req.Header.Set(partialHeader, "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "<html") || !strings.Contains(string(b), version) {
		t.Errorf("partial page:\n%.300s", b)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	// The chart draws once history has two points with reports.
	f.report(t, version, 42, 10, false)
	body = waitFor(t, c, f.srv.URL+"/releases/"+version, `reported 52`)
	if !strings.Contains(body, `<polyline class="line s-failed"`) || !strings.Contains(body, "<svg") {
		t.Errorf("release page has no chart:\n%s", body)
	}
}

func TestActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ops := f.signIn(t, opsToken)
	page := waitFor(t, ops, f.srv.URL+"/releases/"+version, completeState)
	csrf, rev := csrfOf(t, page), revisionOf(t, page)
	act := f.srv.URL + "/releases/" + version + "/halt"

	// Forged: no token, a wrong one, or another origin. Nothing changes.
	for name, tc := range map[string]struct {
		form   url.Values
		origin string
	}{
		"no-token":     {url.Values{"revision": {rev}, "reason": {"x"}, "confirm": {"yes"}}, f.srv.URL},
		"wrong-token":  {url.Values{"csrf": {csrf + "x"}, "revision": {rev}, "reason": {"x"}, "confirm": {"yes"}}, f.srv.URL},
		"other-origin": {url.Values{"csrf": {csrf}, "revision": {rev}, "reason": {"x"}, "confirm": {"yes"}}, "https://evil.example"},
	} {
		if code, body := post(t, ops, act, tc.form, tc.origin); code != http.StatusForbidden || !strings.Contains(body, "did not come from this dashboard") {
			t.Errorf("%s: %d", name, code)
		}
	}
	for name, form := range map[string]url.Values{
		"no-confirmation": {"csrf": {csrf}, "revision": {rev}, "reason": {"x"}},
		"no-reason":       {"csrf": {csrf}, "revision": {rev}, "confirm": {"yes"}},
		"no-revision":     {"csrf": {csrf}, "reason": {"x"}, "confirm": {"yes"}},
		"bad-revision":    {"csrf": {csrf}, "revision": {"-3"}, "reason": {"x"}, "confirm": {"yes"}},
	} {
		if code, _ := post(t, ops, act, form, f.srv.URL); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	// A reader sees no actions, and is refused one.
	reader := f.signIn(t, readerToken)
	rpage := waitFor(t, reader, f.srv.URL+"/releases/"+version, version)
	if strings.Contains(rpage, `action="/releases/`) || !strings.Contains(rpage, "has the reader role") {
		t.Errorf("a reader is offered actions")
	}
	for _, a := range []string{"halt", "percent", "preview-plan", "skip", "revoke"} {
		if code, body := post(t, reader, f.srv.URL+"/releases/"+version+"/"+a, url.Values{"csrf": {csrfOf(t, rpage)}, "revision": {rev}, "reason": {"x"}, "confirm": {"yes"}, "percent": {"50"}, "steps": {"50:1h:5"}}, f.srv.URL); code != http.StatusForbidden || !strings.Contains(body, "reader role") {
			t.Errorf("reader %s: %d", a, code)
		}
	}
	entries, err := f.st.Audit(t.Context(), 0, 100)
	if err != nil || len(entries) != 2 {
		t.Fatalf("refused actions changed something: %d audit entries, %v", len(entries), err)
	}

	// The operator's halt goes through the admin API, with the reason.
	code, body := post(t, ops, act, url.Values{"csrf": {csrf}, "revision": {rev}, "reason": {"failure rate up in eastus"}, "confirm": {"yes"}}, f.srv.URL)
	if code != http.StatusSeeOther {
		t.Fatalf("halt: %d\n%s", code, body)
	}
	resp, err := f.api.ListAudit(opsCtx(t), &adminv1.ListAuditRequest{Target: version})
	if err != nil {
		t.Fatal(err)
	}
	last := resp.GetEntries()[len(resp.GetEntries())-1]
	if last.GetAction() != "halt" || last.GetActor() != "token:ops" || last.GetReason() != "failure rate up in eastus" {
		t.Errorf("last audit entry %v", last)
	}
	// The answer's page shows the change at once: the action rebuilt the
	// view before it answered.
	_, page = get(t, ops, f.srv.URL+"/releases/"+version+"?done=halt")
	if !strings.Contains(page, "state-halted") || !strings.Contains(page, "halt: done") || !strings.Contains(page, "failure rate up in eastus") {
		t.Errorf("the release page after the halt:\n%s", page)
	}
	audit := waitFor(t, ops, f.srv.URL+"/audit?target="+version+"&actor=token:ops&since=1h", "failure rate up in eastus")
	if !strings.Contains(audit, "state complete→halted") {
		t.Errorf("audit page lacks the change")
	}
	// A refusal by the rollout rules is shown on the release page, not
	// hidden.
	if code, body := f.act(t, ops, page, version, "pause", nil); code != http.StatusConflict || !strings.Contains(body, "cannot go from halted to paused") || !strings.Contains(body, "state-halted") {
		t.Errorf("pause a halted release: %d\n%s", code, body)
	}
	// The flash names only actions: a link cannot put words on the page.
	if _, body := get(t, ops, f.srv.URL+"/releases/"+version+"?done=call+the+helpdesk"); strings.Contains(body, "helpdesk") {
		t.Errorf("the release page shows an arbitrary ?done=")
	}
}

// TestEachAction walks a draft through every action the release page
// offers, each from the page as it is after the last: the forms offered
// are the ones the state machine allows, and each change is the admin
// API's, audited with the operator and the reason.
func TestEachAction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publishDraft(t, version)
	ops := f.signIn(t, opsToken)
	page := waitFor(t, ops, f.srv.URL+"/releases/"+version, "action-percent")
	url0 := f.srv.URL + "/releases/" + version
	offered := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`class="action action-([a-z-]+)"`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	audits := func() []*adminv1.AuditEntry {
		t.Helper()
		resp, err := f.api.ListAudit(opsCtx(t), &adminv1.ListAuditRequest{Target: version})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetEntries()
	}
	state := func() *adminv1.Release {
		t.Helper()
		st, err := f.api.Status(opsCtx(t), &adminv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetReleases()[0]
	}

	// The plan's dry run changes nothing and shows what lpsd would do;
	// its form applies exactly that plan, at the same revision.
	if got, want := offered(page), []string{"percent", "preview-plan", "complete", "halt", "revoke"}; !slices.Equal(got, want) {
		t.Errorf("a draft offers %v, want %v", got, want)
	}
	before := len(audits())
	code, preview := f.act(t, ops, page, version, "preview-plan", url.Values{"steps": {"20n:30m:5,10:1h:10,100:2h:20"}, "confirm": nil, "reason": {"canary first"}})
	if code != http.StatusOK || !strings.Contains(preview, "dry run") || !strings.Contains(preview, "a canary of 20 nodes") || !strings.Contains(preview, "Apply the plan") {
		t.Fatalf("plan preview: %d\n%s", code, preview)
	}
	if n := len(audits()); n != before || state().GetRollout().GetPlan() != nil {
		t.Fatalf("the preview changed something: %d audit entries, was %d", n, before)
	}
	applyForm := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`).FindAllStringSubmatch(preview, -1) {
		applyForm.Set(m[1], html.UnescapeString(m[2]))
	}
	applyForm.Set("reason", "canary first")
	if code, body := post(t, ops, url0+"/plan", applyForm, f.srv.URL); code != http.StatusBadRequest || !strings.Contains(body, "tick the confirmation") {
		t.Errorf("apply without the confirmation: %d", code)
	}
	applyForm.Set("confirm", "yes")
	if code, body := post(t, ops, url0+"/plan", applyForm, f.srv.URL); code != http.StatusSeeOther {
		t.Fatalf("apply the plan: %d\n%s", code, body)
	}
	if p := state().GetRollout().GetPlan(); len(p.GetSteps()) != 3 || p.GetSteps()[0].GetNodes() != 20 || p.GetMargin() != 0.05 || p.GetMaxFailureRate() != 0.2 {
		t.Errorf("the plan applied = %v, want the previewed one with lpsctl's defaults", p)
	}

	for _, step := range []struct {
		action string
		fields url.Values
		offers []string // what the page offers before it
		want   string   // the state after, as the page says
	}{
		{"skip", nil, []string{"percent", "preview-plan", "skip", "complete", "pause", "halt", "revoke"}, "2/3 at 10%"},
		{"percent", url.Values{"percent": {"50"}}, []string{"percent", "preview-plan", "skip", "complete", "pause", "halt", "revoke"}, "50% of nodes"},
		{"pause", nil, []string{"percent", "preview-plan", "skip", "complete", "pause", "halt", "revoke"}, "state-paused"},
		{"resume", nil, []string{"complete", "resume", "halt", "revoke"}, "state-rolling"},
		{"complete", nil, []string{"percent", "preview-plan", "skip", "complete", "pause", "halt", "revoke"}, "state-complete"},
		{"halt", nil, []string{"halt", "revoke"}, "state-halted"},
		{"resume", nil, []string{"resume", "revoke"}, "state-complete"},
		{"revoke", nil, []string{"halt", "revoke"}, "revoked"},
	} {
		_, page = get(t, ops, url0)
		if got := offered(page); !slices.Equal(got, step.offers) {
			t.Errorf("before %s the page offers %v, want %v", step.action, got, step.offers)
		}
		if code, body := f.act(t, ops, page, version, step.action, step.fields); code != http.StatusSeeOther {
			t.Fatalf("%s: %d\n%s", step.action, code, body)
		}
		_, page = get(t, ops, url0+"?done="+step.action)
		if !strings.Contains(page, step.want) || !strings.Contains(page, step.action+": done") {
			t.Errorf("after %s the page lacks %q:\n%s", step.action, step.want, page)
		}
		want := map[string]string{"percent": "rollout-set"}[step.action]
		if want == "" {
			want = step.action
		}
		last := audits()[len(audits())-1]
		if last.GetAction() != want || last.GetActor() != "token:ops" || last.GetReason() != "because "+step.action {
			t.Errorf("%s: audit entry %v", step.action, last)
		}
	}
	if got := offered(page); len(got) != 0 || !strings.Contains(page, "nothing more can change it") {
		t.Errorf("a revoked release offers %v", got)
	}
	// Bad input is refused on the page, naming the field.
	f.publishDraft(t, "202604.01.4")
	page = waitFor(t, ops, f.srv.URL+"/releases/202604.01.4", "action-percent")
	for name, tc := range map[string]struct {
		action string
		fields url.Values
		want   string
	}{
		"percent":   {"percent", url.Values{"percent": {"lots"}}, "want a whole number"},
		"steps":     {"preview-plan", url.Values{"steps": {"10:1h"}}, "want SIZE:BAKE:REPORTS"},
		"margin":    {"preview-plan", url.Values{"steps": {"10:1h:5"}, "margin": {"five"}}, "margin"},
		"from-step": {"preview-plan", url.Values{"steps": {"10:1h:5"}, "from_step": {"3"}}, "from 1 to 1"},
	} {
		if code, body := f.act(t, ops, page, "202604.01.4", tc.action, tc.fields); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want 400 saying %q", name, code, tc.want)
		}
	}
}

// TestStaleFormRefused: two operators on the same page of a paused
// release. One halts it; the other's resume, typed on the page that still
// says paused, is refused, saying what changed, and the page shows the
// release as it is now; from that page, the resume goes through.
func TestStaleFormRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publishDraft(t, version)
	if _, err := f.api.SetRollout(opsCtx(t), &adminv1.SetRolloutRequest{Version: version, Percent: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.api.Transition(opsCtx(t), &adminv1.TransitionRequest{Version: version, Action: adminv1.Action_ACTION_PAUSE}); err != nil {
		t.Fatal(err)
	}
	ops, alice := f.signIn(t, opsToken), f.certBrowser(t, "alice", "ops")
	opsPage := waitFor(t, ops, f.srv.URL+"/releases/"+version, "state-paused")
	alicePage := waitFor(t, alice, f.srv.URL+"/releases/"+version, "state-paused")
	if code, body := f.act(t, alice, alicePage, version, "halt", url.Values{"reason": {"canary nodes fail"}}); code != http.StatusSeeOther {
		t.Fatalf("alice's halt: %d\n%s", code, body)
	}
	code, body := f.act(t, ops, opsPage, version, "resume", url.Values{"reason": {"looks fine"}})
	if code != http.StatusConflict {
		t.Fatalf("the resume from the old page: %d, want 409\n%s", code, body)
	}
	for _, want := range []string{"changed since you loaded this page", "state paused→halted", "it is now halted at 10%", "resume not applied", "state-halted"} {
		if !strings.Contains(html.UnescapeString(body), want) {
			t.Errorf("the refusal lacks %q:\n%s", want, body)
		}
	}
	st, err := f.api.Status(opsCtx(t), &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r := st.GetReleases()[0]
	if r.GetRollout().GetState() != "halted" {
		t.Errorf("after the refused resume the release is %s, want halted", r.GetRollout().GetState())
	}
	if got := revisionOf(t, body); got != strconv.FormatInt(r.GetRevision(), 10) {
		t.Errorf("the refusal's forms are at revision %s, want the fresh %d", got, r.GetRevision())
	}
	if strings.Contains(body, "data-live") {
		t.Errorf("the refusal refreshes itself away")
	}
	// The same resume from the fresh page is the operator's to make.
	if code, body := f.act(t, ops, body, version, "resume", url.Values{"reason": {"fixed: the canary subscription was drained"}}); code != http.StatusSeeOther {
		t.Errorf("the resume from the fresh page: %d\n%s", code, body)
	}
	// A revision no view showed: the refusal says at least where it is.
	if code, body := f.act(t, ops, strings.Replace(body, `name="revision" value="`, `name="revision" value="1`, 1), version, "revoke", nil); code != http.StatusConflict || !strings.Contains(body, "is now rolling at 10%") {
		t.Errorf("a revoke at a revision never shown: %d\n%s", code, body)
	}
	resp, err := f.api.ListAudit(opsCtx(t), &adminv1.ListAuditRequest{Target: version})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range resp.GetEntries() {
		actions = append(actions, e.GetActor()+" "+e.GetAction())
	}
	if want := []string{"token:test publish", "token:test rollout-set", "token:test pause", "cert:alice halt", "token:ops resume"}; !slices.Equal(actions, want) {
		t.Errorf("audit = %v, want %v", actions, want)
	}
}

// incident reports for version the fleet of the nodes tests: vm-0 to
// vm-2 failed, vm-3 and vm-4 fell back (one with a reason a spreadsheet
// would run), and n-5 more nodes are ok.
func (f *fixture) incident(t *testing.T, version string, n int) {
	t.Helper()
	f.report(t, version, 0, 3, true)
	f.reportEach(t, version, 3, 1, func(r *store.Report) { r.Fallback, r.FallbackReason = true, "bootstrap timed out" })
	f.reportEach(t, version, 4, 1, func(r *store.Report) { r.Fallback, r.FallbackReason = true, `=HYPERLINK("https://evil.example")` })
	f.report(t, version, 5, n-5, false)
}

// TestNodesPage: a release's nodes, failing first under their reasons
// summed up, each linked to explain, filtered by outcome and paged.
func TestNodesPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	f.incident(t, version, 155)
	c := f.signIn(t, readerToken)
	release := waitFor(t, c, f.srv.URL+"/releases/"+version, "reported 155")
	if !strings.Contains(release, `href="/releases/`+version+`/nodes"`) || !strings.Contains(release, `href="/releases/`+version+`/nodes.csv"`) {
		t.Errorf("the release page does not link its nodes")
	}
	code, body := get(t, c, f.srv.URL+"/releases/"+version+"/nodes")
	if code != http.StatusOK {
		t.Fatalf("nodes page: %d\n%s", code, body)
	}
	body = html.UnescapeString(body)
	reasons := body[strings.Index(body, `<table class="reasons">`):strings.Index(body, `<table class="nodes">`)]
	for _, want := range []string{`<td class="num">3</td><td><a href="/releases/` + version + `/nodes?outcome=failed"`, "provision exited 1", "bootstrap timed out", "among all 155 nodes"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("the reasons lack %q:\n%s", want, reasons)
		}
	}
	rows := regexp.MustCompile(`<th scope="row"><a href="/explain\?vm_id=(vm-[0-9]+)&subscription=3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f"`).FindAllStringSubmatch(body, -1)
	var vms []string
	for _, m := range rows {
		vms = append(vms, m[1])
	}
	if len(vms) != nodesPerPage || !slices.Equal(vms[:5], []string{"vm-0", "vm-1", "vm-2", "vm-3", "vm-4"}) {
		t.Fatalf("the first page lists %d nodes, starting %v; want %d, the failed then the fallen back", len(vms), vms[:min(5, len(vms))], nodesPerPage)
	}
	if !strings.Contains(body, "Nodes 1 to 100 of 155") {
		t.Errorf("the first page does not say which nodes it shows")
	}
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body)
	if next == nil {
		t.Fatalf("no link to the next page")
	}
	_, body = get(t, c, f.srv.URL+html.UnescapeString(next[1]))
	if !strings.Contains(body, "Nodes 101 to 155 of 155") || strings.Contains(body, `rel="next"`) || !strings.Contains(body, "Back to the first") {
		t.Errorf("the second page:\n%s", body)
	}
	_, body = get(t, c, f.srv.URL+"/releases/"+version+"/nodes?outcome=fellBack")
	if n := strings.Count(body, `<span class="outcome o-fellBack">`); n != 2 || strings.Contains(body, `o-failed">failed</span>`) {
		t.Errorf("outcome=fellBack lists %d fallen-back nodes:\n%s", n, body)
	}
	if code, body := get(t, c, f.srv.URL+"/releases/"+version+"/nodes?outcome=broken"); code != http.StatusBadRequest || !strings.Contains(body, "want one of failed, fellBack") {
		t.Errorf("outcome=broken: %d", code)
	}
	if code, _ := get(t, c, f.srv.URL+"/releases/202604.01.9/nodes"); code != http.StatusNotFound {
		t.Errorf("nodes of an unknown release: %d", code)
	}
}

// hideNodes is an admin API without the optional Nodes.
type hideNodes struct{ adminv1.AdminServiceServer }

// TestNodesCSV: the incident list is every node ListNodes lists, filtered
// by outcome, as CSV a spreadsheet opens safely; paging through ListNodes
// (an admin API without Nodes) gives the same.
func TestNodesCSV(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	f.incident(t, version, 1205)
	c := f.signIn(t, readerToken)
	waitFor(t, c, f.srv.URL+"/releases/"+version, "reported 1205")
	download := func(t *testing.T, d *Dashboard, query string) [][]string {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/releases/"+version+"/nodes.csv"+query, nil)
		w := httptest.NewRecorder()
		d.nodesCSV(w, req.WithContext(t.Context()), &session{Actor: "token:viewer", Role: admin.RoleReader})
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/csv; charset=utf-8" {
			t.Fatalf("nodes.csv%s: %d %q\n%.300s", query, w.Code, w.Header().Get("Content-Type"), w.Body)
		}
		rows, err := csv.NewReader(w.Body).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	resp, err := f.api.ListNodes(opsCtx(t), &adminv1.ListNodesRequest{Release: version, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rows := download(t, f.dash, "")
	if !slices.Equal(rows[0], csvHeader) || int64(len(rows)-1) != resp.GetTotal() || resp.GetTotal() != 1205 {
		t.Fatalf("nodes.csv: %d rows under %v, want the %d nodes", len(rows)-1, rows[0], resp.GetTotal())
	}
	for i, n := range resp.GetNodes() {
		if r := rows[i+1]; r[0] != n.GetVmId() || r[4] != n.GetOutcome() || r[3] != version || r[9] != n.GetTime().AsTime().UTC().Format(time.RFC3339) {
			t.Fatalf("row %d = %v, want node %v", i+1, r, n)
		}
	}
	if got := rows[1][4:8]; !slices.Equal(got, []string{"failed", "provision exited 1", "hotfix " + version, "1"}) {
		t.Errorf("the first row's outcome, reason, ran, exit = %v", got)
	}
	if got := rows[5][5]; got != `'=HYPERLINK("https://evil.example")` {
		t.Errorf("a node's formula for a reason is %q in the CSV, want it quoted", got)
	}
	failed := download(t, f.dash, "?outcome=failed")
	if len(failed) != 4 || failed[3][0] != "vm-2" {
		t.Errorf("nodes.csv?outcome=failed: %v", failed)
	}
	// The incident's list: every VM it failed or that fell back, none
	// that is ok.
	if hurt := download(t, f.dash, "?outcome="+url.QueryEscape(IncidentOutcomes)); len(hurt) != 6 || hurt[4][4] != "fellBack" || hurt[5][4] != "fellBack" {
		t.Errorf("nodes.csv?outcome=%s: %v, want the 3 failed and 2 fallen back", IncidentOutcomes, hurt)
	}
	paged := New(Config{Admin: hideNodes{f.api}, Auth: f.auth})
	if got := download(t, paged, ""); !cmp.Equal(got, rows) {
		t.Errorf("paged through ListNodes, the CSV differs: %d rows, want %d", len(got), len(rows))
	}
	// Through the server: a download, named for what it holds.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/releases/"+version+"/nodes.csv?outcome=fellBack", nil)
	hr, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if cd := hr.Header.Get("Content-Disposition"); hr.StatusCode != http.StatusOK || cd != `attachment; filename="nodes-`+version+`-fellBack.csv"` {
		t.Errorf("nodes.csv: %d, Content-Disposition %q", hr.StatusCode, cd)
	}
	for _, bad := range []string{"broken", "failed,broken", "failed,"} {
		if code, _ := get(t, c, f.srv.URL+"/releases/"+version+"/nodes.csv?outcome="+bad); code != http.StatusBadRequest {
			t.Errorf("nodes.csv?outcome=%s: %d", bad, code)
		}
	}
}

func TestExplainAndAuditFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	if err := f.snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := f.signIn(t, readerToken)
	_, body := get(t, c, f.srv.URL+"/explain?vm_id=vm-1&subscription=3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f")
	for _, want := range []string{"SERVED", "not-revoked", "not-expired", "The pointer document"} {
		if !strings.Contains(body, want) {
			t.Errorf("explain lacks %q:\n%s", want, body)
		}
	}
	if code, body := get(t, c, f.srv.URL+"/explain?vm_id=vm-1&subscription=nope"); code != http.StatusBadRequest || !strings.Contains(body, "nope") {
		t.Errorf("explain with a bad subscription: %d", code)
	}
	if code, _ := get(t, c, f.srv.URL+"/audit?since=yesterday"); code != http.StatusBadRequest {
		t.Errorf("audit since=yesterday: %d", code)
	}
	if _, body := get(t, c, f.srv.URL+"/audit?actor=cert:nobody"); !strings.Contains(body, "No audit entries") {
		t.Errorf("audit of nobody")
	}
}

// TestEscapes: strings from the store are HTML-escaped.
func TestEscapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ops := f.signIn(t, opsToken)
	page := waitFor(t, ops, f.srv.URL+"/releases/"+version, completeState)
	if code, _ := f.act(t, ops, page, version, "halt", url.Values{"reason": {`<script>alert(1)</script>`}}); code != http.StatusSeeOther {
		t.Fatalf("halt: %d", code)
	}
	_, body := get(t, ops, f.srv.URL+"/audit")
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("a reason was not escaped")
	}
}

// BenchmarkReleasesPage renders the releases page for 200 releases whose
// counts add up to a million reported nodes (the target: 100 ms).
func BenchmarkReleasesPage(b *testing.B) {
	tokens, err := admin.ParseTokens([]byte("bench:" + opsToken))
	if err != nil {
		b.Fatal(err)
	}
	d := New(Config{Admin: nil, Auth: admin.NewAuth(tokens, nil)})
	st := &adminv1.StatusResponse{Region: "eastus"}
	for i := range 200 {
		base := fmt.Sprintf("2026%02d.%02d", i/28+1, i%28+1)
		st.Releases = append(st.Releases, &adminv1.Release{
			Version: base + ".1", Base: base, Rollout: &adminv1.Rollout{State: "rolling", Percent: 25, Subscriptions: []string{"3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f"}},
			Counts: &adminv1.Counts{Reported: 5000, Ok: 4900, Failed: 60, Fallback: 40}, Served: 7000,
		})
		st.Control = append(st.Control, &adminv1.ControlCohort{Base: base, Counts: &adminv1.Counts{Reported: 5000, Ok: 4950, Failed: 50}})
	}
	now := time.Now()
	d.view.Store(buildView(st, now))
	se := d.sessions.start("token:bench", admin.RoleOperator, sha256.Sum256([]byte(opsToken)), now)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.TLS = &tls.ConnectionState{}
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: se.ID})
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

// BenchmarkRefreshMillionReports is what Run pays per rebuild on a big
// fleet: the admin API's Status over a million reports (spread over 200
// releases) and the view built from it. Pages never wait for it; Run
// spaces rebuilds by ten times its cost.
func BenchmarkRefreshMillionReports(b *testing.B) {
	st := memstore.New()
	defer st.Close()
	api := admin.New(admin.Config{Store: st, Snapshots: lps.NewSnapshotter(st, nil, nil), Region: "eastus"})
	ctx := admin.WithActor(context.Background(), "token:bench")
	_, priv, err := release.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	var versions []string
	for i := range 200 {
		base := fmt.Sprintf("2026%02d.%02d", i/28+1, i%28+1)
		v := base + ".1"
		env, err := release.Sign(release.Release{Base: base, Version: v, NotAfter: time.Now().Add(72 * time.Hour),
			Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://blob.example.com/" + v, SHA256: strings.Repeat("ab", 32), Size: 1234}}}, priv)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := api.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: string(env)}); err != nil {
			b.Fatal(err)
		}
		if _, err := api.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE}); err != nil {
			b.Fatal(err)
		}
		versions = append(versions, v)
	}
	const reports = 1_000_000
	batch := make([]store.Report, 0, 10000)
	for i := range reports {
		v := versions[i%len(versions)]
		batch = append(batch, store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "b", SubscriptionID: "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f", Base: v[:9], BakedVersion: v[:9] + ".0",
			Agent: "hotfix", AgentVersion: v, HotfixVersion: v, ExitCode: i % 50 / 49, Time: time.Now()})
		if len(batch) == cap(batch) {
			if _, err := st.PutReports(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	d := New(Config{Admin: api, Auth: admin.NewAuth(nil, nil)})
	b.ResetTimer()
	for b.Loop() {
		d.refresh(context.Background())
	}
	if v := d.view.Load(); v == nil || v.Err != "" || len(v.Releases) != 200 || v.Releases[0].R.GetCounts().GetReported() != reports/200 {
		b.Fatalf("view %+v", v)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	c, key, err := harness.NewCA("admin client CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// certBrowser is a browser presenting a client certificate for cn (with
// organizational unit ou, "reader" for the reader role).
func (f *fixture) certBrowser(t *testing.T, cn, ou string) *http.Client {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, OrganizationalUnit: []string{ou}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, key.Public(), f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	c := f.browser(t)
	tr := c.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	c.Transport = tr
	return c
}

// TestCertificateCallers: a client certificate signs in by itself, with the
// role it has now, for as long as it is presented; a token cannot replace
// it, and nothing it does survives it.
func TestCertificateCallers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	alice := f.certBrowser(t, "alice", "ops")
	page := waitFor(t, alice, f.srv.URL+"/releases/"+version, "halt "+version)
	if !strings.Contains(page, "cert:alice (operator, by client certificate)") || strings.Contains(page, `action="/logout"`) {
		t.Errorf("certificate session:\n%.600s", page)
	}
	// Signing in with junk beside a certificate makes no session.
	code, _ := post(t, alice, f.srv.URL+"/login", url.Values{"token": {"junk"}, "next": {"/"}}, f.srv.URL)
	u, _ := url.Parse(f.srv.URL)
	if code != http.StatusSeeOther || len(alice.Jar.Cookies(u)) != 0 {
		t.Errorf("sign-in beside a certificate: %d, cookies %v", code, alice.Jar.Cookies(u))
	}
	// The same name as a reader is a reader.
	reader := f.certBrowser(t, "alice", "reader")
	if page := waitFor(t, reader, f.srv.URL+"/releases/"+version, version); !strings.Contains(page, "cert:alice (reader, by client certificate)") || strings.Contains(page, `action="/releases/`) {
		t.Errorf("reader certificate: %.600s", page)
	}
	// The certificate's CSRF token works only for it.
	if code, _ := post(t, reader, f.srv.URL+"/releases/"+version+"/halt", url.Values{"csrf": {csrfOf(t, page)}, "revision": {revisionOf(t, page)}, "reason": {"x"}, "confirm": {"yes"}}, f.srv.URL); code != http.StatusForbidden {
		t.Errorf("another certificate's token: %d", code)
	}
	if code, body := f.act(t, alice, page, version, "halt", url.Values{"reason": {"by certificate"}}); code != http.StatusSeeOther {
		t.Errorf("certificate halt: %d %s", code, body)
	}
}

// TestTokenSessionsFollowTheTokenFile: a token removed or demoted by a
// reload ends or demotes its sessions at once.
func TestTokenSessionsFollowTheTokenFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ops := f.signIn(t, opsToken)
	waitFor(t, ops, f.srv.URL+"/", version)
	demoted, err := admin.ParseTokens([]byte("ops:reader:" + opsToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.auth.SetTokens(demoted)
	if _, body := get(t, ops, f.srv.URL+"/"); !strings.Contains(body, "token:ops (reader)") {
		t.Errorf("demoted token still an operator:\n%.400s", body)
	}
	others, _ := admin.ParseTokens([]byte("viewer:reader:" + readerToken + "\n"))
	f.auth.SetTokens(others)
	if code, _ := get(t, ops, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("removed token still signed in: %d", code)
	}
}

// TestExpiredTokens: the sign-in and every session request check a token
// with the admin API's one lookup: one past its expiry cannot sign in (the
// page names the token and its expiry, never the token), and a session it
// started ends once it is.
func TestExpiredTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ops := f.signIn(t, opsToken)
	waitFor(t, ops, f.srv.URL+"/", version)
	expired, err := admin.ParseTokens([]byte("ops:operator:" + opsToken + ":2020-01-01\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.auth.SetTokens(expired)
	if code, _ := get(t, ops, f.srv.URL+"/"); code != http.StatusSeeOther {
		t.Errorf("a session of an expired token: %d, want a redirect to sign in", code)
	}
	code, body := post(t, f.browser(t), f.srv.URL+"/login", url.Values{"token": {opsToken}, "next": {"/"}}, f.srv.URL)
	if code != http.StatusUnauthorized || !strings.Contains(body, "expired at 2020-01-01T00:00:00Z") || !strings.Contains(body, "&#34;ops&#34;") || strings.Contains(body, opsToken) {
		t.Errorf("sign-in with an expired token: %d\n%.600s", code, body)
	}
}

func TestLoginRefusesOtherSites(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.browser(t)
	if code, _ := post(t, c, f.srv.URL+"/login", url.Values{"token": {opsToken}}, "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("login from another origin: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/login", strings.NewReader(url.Values{"token": {opsToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site login: %d", resp.StatusCode)
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/releases/202604.01.3": "/releases/202604.01.3", "/audit?target=x": "/audit?target=x", "": "/",
		"//evil.example/": "/", "https://evil.example/": "/", "/\\evil": "/", "/\t/evil.example": "/", "/\x7f": "/",
		"/%09/evil": "/%09/evil", "relative": "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSessionLimits: one actor's sign-ins evict only its own sessions.
func TestSessionLimits(t *testing.T) {
	t.Parallel()
	var s sessions
	s.m = map[string]*session{}
	now := time.Now()
	other := s.start("token:ops", admin.RoleOperator, [32]byte{1}, now)
	for i := range 3 * maxSessionsPerActor {
		s.start("token:script", admin.RoleReader, [32]byte{2}, now.Add(time.Duration(i)*time.Millisecond))
	}
	if len(s.m) != maxSessionsPerActor+1 || s.get(other.ID, now) == nil {
		t.Errorf("%d sessions; the other actor's kept: %v", len(s.m), s.get(other.ID, now) != nil)
	}
}

// TestFrozenBanner: while every rollout is frozen every page says so, who
// froze it and why, and how to thaw it; after the thaw the banner is
// gone.
func TestFrozenBanner(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ctx := t.Context()
	rev, err := f.st.PutFreeze(ctx, store.Freeze{Frozen: true, Reason: "CHG 5120: holiday freeze", Actor: "token:ops", Since: time.Now()}, 0, store.AuditEntry{Actor: "token:ops", Action: admin.ActionFreeze, Target: admin.FreezeTarget})
	if err != nil {
		t.Fatal(err)
	}
	c := f.signIn(t, readerToken)
	for _, path := range []string{"/", "/releases/" + version} {
		body := waitFor(t, c, f.srv.URL+path, "Every rollout is frozen")
		for _, want := range []string{"CHG 5120: holiday freeze", "token:ops", "lpsctl unfreeze"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s while frozen lacks %q", path, want)
			}
		}
	}
	if _, err := f.st.PutFreeze(ctx, store.Freeze{Frozen: false, Reason: "over", Actor: "token:ops", Since: time.Now()}, rev, store.AuditEntry{Actor: "token:ops", Action: admin.ActionUnfreeze, Target: admin.FreezeTarget}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Get(f.srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "Every rollout is frozen") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the banner stayed after the thaw")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFreezeForm: an operator freezes and thaws every rollout from the
// releases page, with a reason and the confirmation, at the freeze's
// revision the page showed: a form from before a change is refused with
// the freeze as it is now. A reader gets no form, and its post is refused.
func TestFreezeForm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.publish(t, version)
	ops := f.signIn(t, opsToken)
	page := waitFor(t, ops, f.srv.URL+"/", "Freeze every rollout")
	form := url.Values{"csrf": {csrfOf(t, page)}, "revision": {revisionOf(t, page)}, "frozen": {"true"}, "reason": {"CHG 7: quarter close"}}
	if code, body := post(t, ops, f.srv.URL+"/freeze", form, f.srv.URL); code != http.StatusBadRequest || !strings.Contains(body, "tick the confirmation") {
		t.Errorf("freeze without the confirmation: %d, want 400 asking for it", code)
	}
	form.Set("confirm", "yes")
	if code, _ := post(t, ops, f.srv.URL+"/freeze", form, f.srv.URL); code != http.StatusSeeOther {
		t.Fatalf("freeze: %d, want 303 to the releases page", code)
	}
	_, body := get(t, ops, f.srv.URL+"/?done=freeze")
	if !strings.Contains(body, "freeze: done") || !strings.Contains(body, "Every rollout is frozen") || !strings.Contains(body, "Unfreeze") {
		t.Fatalf("after the freeze, the releases page is not frozen with an Unfreeze form:\n%.2000s", body)
	}
	fz, _, err := f.st.Freeze(t.Context())
	if err != nil || !fz.Frozen || fz.Actor != "token:ops" || fz.Reason != "CHG 7: quarter close" {
		t.Errorf("stored freeze = %+v, %v", fz, err)
	}
	// Another operator thaws and freezes again meanwhile: the page's
	// unfreeze form is stale.
	for _, frozen := range []bool{false, true} {
		if _, err := f.api.SetFreeze(opsCtx(t), &adminv1.SetFreezeRequest{Frozen: frozen, Reason: "CHG 8: the other operator"}); err != nil {
			t.Fatal(err)
		}
	}
	staleForm := url.Values{"csrf": {csrfOf(t, body)}, "revision": {revisionOf(t, body)}, "frozen": {"false"}, "reason": {"thaw"}, "confirm": {"yes"}}
	code, stale := post(t, ops, f.srv.URL+"/freeze", staleForm, f.srv.URL)
	if code != http.StatusConflict || !strings.Contains(stale, "changed since you loaded this page") || !strings.Contains(stale, "frozen since") {
		t.Errorf("a stale freeze form: %d, want 409 naming the freeze as it is:\n%.2000s", code, stale)
	}
	reader := f.signIn(t, readerToken)
	if _, body := get(t, reader, f.srv.URL+"/"); strings.Contains(body, `action="/freeze"`) {
		t.Error("a reader is offered the freeze form")
	}
	_, rpage := get(t, reader, f.srv.URL+"/")
	if code, _ := post(t, reader, f.srv.URL+"/freeze", url.Values{"csrf": {csrfOf(t, rpage)}, "revision": {"1"}, "frozen": {"false"}, "reason": {"r"}, "confirm": {"yes"}}, f.srv.URL); code != http.StatusForbidden {
		t.Errorf("a reader's unfreeze: %d, want 403", code)
	}
	thaw := url.Values{"csrf": {csrfOf(t, stale)}, "revision": {revisionOf(t, stale)}, "frozen": {"false"}, "reason": {"CHG 7: done"}, "confirm": {"yes"}}
	if code, _ := post(t, ops, f.srv.URL+"/freeze", thaw, f.srv.URL); code != http.StatusSeeOther {
		t.Fatalf("unfreeze: %d, want 303", code)
	}
	if _, body := get(t, ops, f.srv.URL+"/?done=unfreeze"); !strings.Contains(body, "unfreeze: done") || strings.Contains(body, "Every rollout is frozen") {
		t.Errorf("after the thaw:\n%.2000s", body)
	}
}

// TestApprovalShown: a change waiting for a second operator is shown on
// its release page, with who asked, why and until when; the policy too.
func TestApprovalShown(t *testing.T) {
	t.Parallel()
	f := newFixturePolicy(t, 50*time.Millisecond, rollout.Policy{MinCanaryNodes: 3, TwoPerson: true})
	f.publishDraft(t, version)
	ctx := opsCtx(t)
	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{{Nodes: 3, BakeSeconds: 3600, MinReports: 3}, {Percent: 100, MinReports: 3}}, Margin: 0.05, MaxFailureRate: 0.2}
	if _, err := f.api.SetPlan(ctx, &adminv1.SetPlanRequest{Version: version, Plan: plan, Reason: "canary"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.api.SkipStep(ctx, &adminv1.SkipStepRequest{Version: version, Reason: "INC 9: looks fine"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("skip by one operator = %v, want it to wait for a second", err)
	}
	body := waitFor(t, f.signIn(t, opsToken), f.srv.URL+"/releases/"+version, "Waiting for a second operator")
	for _, want := range []string{"skip of " + version, "token:test", "INC 9: looks fine", "a canary of at least 3 nodes heard from first"} {
		if !strings.Contains(body, want) {
			t.Errorf("release page lacks %q", want)
		}
	}
}

// TestReleasesPageShowsReplicaClocks: the releases page lists the
// replicas with their heartbeats' ages, marking one whose clock is far
// enough behind that the looks read its times corrected, and says what to
// do.
func TestReleasesPageShowsReplicaClocks(t *testing.T) {
	t.Parallel()
	f := newFixtureReplicas(t, 50*time.Millisecond, rollout.Policy{}, []replicaBeat{{"lpsd-a-1", 2 * time.Second}, {"lpsd-b-2", 3 * time.Minute}})
	c := f.signIn(t, readerToken)
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, body = get(t, c, f.srv.URL+"/"); strings.Contains(body, "lpsd-b-2") {
			break
		}
	}
	for _, want := range []string{
		"lpsd-a-1 (this one)", "beat 2s ago",
		`<tr class="clock-off">`, `<strong class="bad">beat 3m0s ago *</strong>`,
		"fix its time sync",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the releases page has no %q", want)
		}
	}
}
