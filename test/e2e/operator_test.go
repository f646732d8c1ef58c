package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/test/harness"
)

// TestIntegrationOperatorFlow is issue "Operator v2"'s done-when, on real
// processes: from the dashboard alone (its HTML forms, submitted as a
// browser submits them: the fields the page carries, CSRF token and
// revision included), an operator plans a canary of a published draft of
// a crashing hotfix on one replica, watches the autopilot halt it on
// another, sees there which VMs fell back and why, resumes it on fresh
// evidence, completes it, and, after both replicas restart, finds all of
// it in the release's history charts and the audit log on each.
// lpsctl only publishes the signed draft (setup, not an operator action
// under test).
func TestIntegrationOperatorFlow(t *testing.T) {
	integration(t)
	t.Parallel()
	began := time.Now()
	endpoints := etcdtest.Start(t)
	spec := "etcd:" + strings.Join(endpoints, ",")
	flags := []string{"--autopilot-interval=100ms", "--dashboard-refresh=200ms"}
	s := newStack(t, stackOpts{store: spec, lpsdFlags: flags})
	replica := func(name string) *harness.LPSD {
		t.Helper()
		l, err := harness.StartLPSD(t.Context(), env.bins, s.dir, harness.LPSDOptions{
			Name: name, IMDSRoots: s.imds.RootsFile, Store: spec, TLS: s.lpsd.TLS, Region: "eastus", Extra: flags,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Stop(10 * time.Second) })
		return l
	}
	a, b := s.lpsd, replica("lpsd-b")
	const v = crashingHotfix
	rel := "/releases/" + v
	s.publishDraft(v, "")
	s.waitSynced(b)

	// 1. Replica a: sign in, preview the plan, apply it.
	da := signInDashboard(t, a)
	page := da.waitPage(rel, "the draft", func(p string) bool { return hasState(p, "draft") })
	form := da.form(page, rel+"/preview-plan", map[string]string{
		"steps": "3n:1h:3,100:1h:10", "max_failure": "0.2", "reason": "e2e: canary of the crashing hotfix",
	})
	code, preview, at := da.submit(rel+"/preview-plan", form)
	if code != http.StatusOK || !strings.Contains(preview, "Plan for "+v+": lpsd's dry run") || !strings.Contains(preview, "Nothing has changed yet") ||
		!strings.Contains(preview, "a canary of 3 nodes") || !strings.Contains(preview, "would be rolling at 0%, at step 1/2") {
		t.Fatalf("plan preview (%d at %s):\n%s", code, at, mainOf(preview))
	}
	// The dry run changed nothing: the release is still a draft.
	if p := da.get(rel); !hasState(p, "draft") {
		t.Fatalf("the preview changed the release:\n%s", mainOf(p))
	}
	apply := da.form(preview, rel+"/plan", map[string]string{"confirm": "yes"})
	if apply.Get("reason") != "e2e: canary of the crashing hotfix" || apply.Get("steps") != "3n:1h:3,100:1h:10" || apply.Get("max_failure") != "0.2" {
		t.Errorf("the preview's apply form does not carry the plan as filled in: %v", apply)
	}
	code, page, at = da.submit(rel+"/plan", apply)
	if code != http.StatusOK || at != rel+"?done=plan" || !strings.Contains(page, "plan: done") || !hasState(page, "rolling") || !strings.Contains(page, "1/2 canary 0/3 nodes") {
		t.Fatalf("after applying the plan (%d at %s):\n%s", code, at, mainOf(page))
	}

	// 2. Replica b shows the canary waiting for its nodes.
	db := signInDashboard(t, b)
	db.waitPage(rel, "the canary on replica b", func(p string) bool { return hasState(p, "rolling") && strings.Contains(p, "1/2 canary 0/3 nodes") })

	// 3. Three VMs take the canary's seats on replica a and fall back; the
	// autopilot halts the release, and replica b shows it.
	vms := map[string]bool{}
	for range 3 {
		id := vmIn(t, v, 100)
		vms[id] = true
		n := s.node(nodeOpts{})
		expect(t, n, s.launch(n, s.imds.URL+"/vm/"+id, ""), bakedVersion, "lpsRead", "staged")
	}
	page = db.waitPage(rel, "the automatic halt on replica b", func(p string) bool {
		return hasState(p, "halted") && strings.Contains(p, "auto-halt")
	})
	if h1 := between(page, "<h1>", "</h1>"); !strings.Contains(h1, `<span class="reason-code">regression</span>`) {
		t.Errorf("replica b's release page does not give the halt's reason code beside its state: %s", h1)
	}
	facts := between(page, `<dl class="facts">`, `</dl>`)
	if !strings.Contains(facts, "Last automatic change</dt><dd>regressing: failure rate") {
		t.Errorf("replica b's release page does not say why it halted:\n%s", facts)
	}
	if !strings.Contains(facts, "Plan step</dt><dd>1/2 canary 3/3 nodes</dd>") {
		t.Errorf("replica b's release page does not show the canary's 3 seats taken:\n%s", facts)
	}
	if got := thisRelease(page); !strings.Contains(got, `<td class="num">3</td><td class="num">0</td><td class="num">0</td><td class="num">3</td><td class="num">0</td><td class="num">100.0%</td>`) {
		t.Errorf("replica b's release page does not count 3 of 3 nodes fallen back: %s", got)
	}
	if !auditRow(page, "lpsd", "auto-halt", "regressing (ceiling): failure rate 100.0% (3/3)") {
		t.Errorf("replica b's release page lists no automatic halt by lpsd with its verdict:\n%s", between(page, "Audit log of this release", "</table>"))
	}
	if !strings.Contains(page, "Serve it again, on fresh evidence: the reports before now no longer count.") {
		t.Errorf("the halted release's resume form does not say it starts on fresh evidence:\n%s", between(page, `<div class="actions">`, "</div>"))
	}
	// Which VMs failed, and why: the nodes page, failing first.
	nodes := db.waitPage(rel+"/nodes", "the canary's nodes on replica b", func(p string) bool {
		return strings.Count(p, `<span class="outcome o-fellBack">fellBack</span>`) == 3
	})
	reasons := between(nodes, `<table class="reasons">`, "</table>")
	if !strings.Contains(reasons, `<td class="num">3</td><td><a href="/releases/`+v+`/nodes?outcome=fellBack" class="outcome o-fellBack">fellBack</a></td><td>`) ||
		!strings.Contains(reasons, "exited with code 2") {
		t.Errorf("nodes page's reasons do not sum up 3 fallbacks with their reason:\n%s", reasons)
	}
	for id := range vms {
		row := rowOf(nodes, id)
		if !strings.Contains(row, `o-fellBack`) || !strings.Contains(row, "exited with code 2") {
			t.Errorf("VM %s on the nodes page: %q, want fellBack with the agent's exit", id, row)
		}
	}

	// The halt is in the release's history as soon as a look recorded it;
	// the resume and the complete that follow, in the same minute or not,
	// leave it there (a minute's point keeps the looks inside it after
	// which the rollout moved).
	db.waitPage(rel, "the halt in the release's history", func(p string) bool {
		return strings.Contains(between(p, `aria-label="Rollout: percentage and state over time"`, "</svg>"), `<rect class="band state-halted"`)
	})

	// 4. Replica b: resume on fresh evidence, then complete.
	page = db.get(rel)
	code, page, at = db.submit(rel+"/resume", db.form(page, rel+"/resume", map[string]string{"reason": "e2e: fixed the node image; retry", "confirm": "yes"}))
	if code != http.StatusOK || at != rel+"?done=resume" || !strings.Contains(page, "resume: done") || !hasState(page, "rolling") {
		t.Fatalf("after resume (%d at %s):\n%s", code, at, mainOf(page))
	}
	if !auditRow(page, "token:harness", "resume", "fresh evidence from") {
		t.Errorf("the resume's audit entry does not say its evidence window is fresh:\n%s", between(page, "Audit log of this release", "</table>"))
	}
	// The canary's fallbacks are before the window: they no longer count.
	if got := thisRelease(page); !strings.Contains(got, `<td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">-</td>`) {
		t.Errorf("after the resume the fallbacks before it still count: %s", got)
	}
	code, page, at = db.submit(rel+"/complete", db.form(page, rel+"/complete", map[string]string{"reason": "e2e: healthy on retry", "confirm": "yes"}))
	if code != http.StatusOK || at != rel+"?done=complete" || !strings.Contains(page, "complete: done") || !hasState(page, "complete") || !strings.Contains(page, "100% of nodes") {
		t.Fatalf("after complete (%d at %s):\n%s", code, at, mainOf(page))
	}
	// The complete state reaches the history before the restart.
	db.waitPage(rel, "complete in the release's history", func(p string) bool {
		return strings.Contains(between(p, `aria-label="Rollout: percentage and state over time"`, "</svg>"), `100% complete</text>`)
	})

	// 5. Both replicas restart on the same etcd; sessions were in memory,
	// so the operator signs in again on each, and finds the whole story.
	a.Stop(10 * time.Second)
	b.Stop(10 * time.Second)
	a, b = replica("lpsd-a-restarted"), replica("lpsd-b-restarted")
	for name, l := range map[string]*harness.LPSD{"a": a, "b": b} {
		d := signInDashboard(t, l)
		page := d.waitPage(rel, "the release after the restart on replica "+name, func(p string) bool { return hasState(p, "complete") })
		rollout := between(page, `aria-label="Rollout: percentage and state over time"`, "</svg>")
		for _, want := range []string{`<rect class="band state-halted"`, `<text class="state-mark"`, ">halted</text>", `<rect class="band state-complete"`, `<polyline class="line s-percent"`, "100% complete</text>"} {
			if !strings.Contains(rollout, want) {
				t.Errorf("replica %s: the rollout chart lacks %q:\n%s", name, want, rollout)
			}
		}
		counts := between(page, `aria-label="Outcome reports over time"`, "</svg>")
		if !strings.Contains(counts, `<polyline class="line s-fallback"`) || !strings.Contains(counts, `<polyline class="line s-reported"`) {
			t.Errorf("replica %s: the counts chart draws no history:\n%s", name, counts)
		}
		rates := between(page, `aria-label="Failure rate: release against its baseline"`, "</svg>")
		if !strings.Contains(rates, `<polyline class="line s-failed"`) {
			t.Errorf("replica %s: the failure-rate chart draws no history:\n%s", name, rates)
		}
		audit := d.get("/audit?target=" + v)
		last := -1
		for _, e := range []struct{ actor, action, text string }{
			{"token:harness", "plan", "e2e: canary of the crashing hotfix"},
			{"lpsd", "auto-halt", "failure rate"},
			{"token:harness", "resume", "fresh evidence from"},
			{"token:harness", "complete", "e2e: healthy on retry"},
		} {
			i := auditIndex(audit, e.actor, e.action, e.text)
			if i < 0 {
				t.Errorf("replica %s: the audit page lists no %s by %s with %q:\n%s", name, e.action, e.actor, e.text, between(audit, `<table class="audit">`, "</table>"))
				continue
			}
			if i < last {
				t.Errorf("replica %s: the audit page lists %s out of order", name, e.action)
			}
			last = i
		}
	}
	t.Logf("the operator's flow took %s", time.Since(began).Round(time.Second))
}

// dashboard is a browser signed in to one lpsd's dashboard: its own cookie
// jar (cookies do not tell ports apart, and each replica has its sessions).
type dashboard struct {
	t    *testing.T
	base string
	c    *http.Client
}

// signInDashboard signs in to l's dashboard with the admin token, as the
// sign-in page's form does.
func signInDashboard(t *testing.T, l *harness.LPSD) *dashboard {
	t.Helper()
	pem, err := os.ReadFile(l.TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	jar, _ := cookiejar.New(nil)
	d := &dashboard{t: t, base: "https://" + l.AdminAddr, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	tok, err := os.ReadFile(l.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	_, token, _ := strings.Cut(strings.TrimSpace(string(tok)), ":")
	code, body, _ := d.submit("/login", url.Values{"token": {token}, "next": {"/"}})
	if code != http.StatusOK && code != http.StatusServiceUnavailable || strings.Contains(body, "not an admin token") {
		t.Fatalf("sign-in to %s: %d\n%s", d.base, code, mainOf(body))
	}
	if !strings.Contains(body, "token:harness (operator)") {
		t.Fatalf("sign-in to %s does not show the operator signed in:\n%.800s", d.base, body)
	}
	return d
}

// get returns the page at path, failing on anything but 200.
func (d *dashboard) get(path string) string {
	d.t.Helper()
	code, body, err := d.fetch(path)
	if err != nil || code != http.StatusOK {
		d.t.Fatalf("GET %s%s: %d %v\n%s", d.base, path, code, err, mainOf(body))
	}
	return body
}

func (d *dashboard) fetch(path string) (int, string, error) {
	resp, err := d.c.Get(d.base + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitPage polls path, bounded, until ok holds of it (the dashboard
// rebuilds its view every --dashboard-refresh), and returns it.
func (d *dashboard) waitPage(path, what string, ok func(string) bool) string {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := d.fetch(path)
		if err == nil && code == http.StatusOK && ok(body) {
			return body
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: %s%s never showed %s (last: %d %v)\n%s", d.t.Name(), d.base, path, what, code, err, mainOf(body))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// submit posts form to path as a browser does (its Origin, following the
// redirect), and returns the status, the page and the path it ended at.
func (d *dashboard) submit(path string, form url.Values) (int, string, string) {
	d.t.Helper()
	req, err := http.NewRequestWithContext(d.t.Context(), http.MethodPost, d.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", d.base)
	resp, err := d.c.Do(req)
	if err != nil {
		d.t.Fatalf("POST %s%s: %v", d.base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Request.URL.RequestURI()
}

var (
	formTag  = regexp.MustCompile(`(?s)<form method="post" action="([^"]*)"[^>]*>(.*?)</form>`)
	inputTag = regexp.MustCompile(`<input\b[^>]*>`)
	attr     = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
)

// form returns what a browser submits of page's form posting to action:
// each input's value (the CSRF token, the revision and the rest as the
// page filled them in), with fill typed into the named text inputs and
// the named checkboxes ticked (with their value). A field the form lacks
// fails the test, as it would leave a browser's user stuck.
func (d *dashboard) form(page, action string, fill map[string]string) url.Values {
	d.t.Helper()
	for _, m := range formTag.FindAllStringSubmatch(page, -1) {
		if html.UnescapeString(m[1]) != action {
			continue
		}
		out := url.Values{}
		seen := map[string]bool{}
		for _, in := range inputTag.FindAllString(m[2], -1) {
			a := map[string]string{}
			for _, kv := range attr.FindAllStringSubmatch(in, -1) {
				a[kv[1]] = html.UnescapeString(kv[2])
			}
			name := a["name"]
			if name == "" {
				continue
			}
			seen[name] = true
			val, typed := fill[name]
			switch {
			case a["type"] == "checkbox" && typed:
				if val != a["value"] {
					d.t.Fatalf("form %s: checkbox %s has value %q, not %q", action, name, a["value"], val)
				}
				out.Set(name, val)
			case a["type"] == "checkbox":
			case typed:
				if a["type"] == "hidden" {
					d.t.Fatalf("form %s: %s is hidden, not for the operator to fill in", action, name)
				}
				out.Set(name, val)
			default:
				out.Set(name, a["value"])
			}
		}
		for name := range fill {
			if !seen[name] {
				d.t.Fatalf("form %s has no field %s:\n%s", action, name, m[2])
			}
		}
		if out.Get("csrf") == "" || (action != "/login" && out.Get("revision") == "") {
			d.t.Fatalf("form %s carries no CSRF token or revision:\n%s", action, m[2])
		}
		return out
	}
	d.t.Fatalf("%s: the page has no form posting to %s:\n%s", d.base, action, mainOf(page))
	return nil
}

// hasState reports whether a release or nodes page heads its release with
// state.
func hasState(page, state string) bool {
	return strings.Contains(between(page, "<h1>", "</h1>"), `<span class="state state-`+state+`">`+state+`</span>`)
}

// thisRelease is the release page's row of the release's own outcome
// reports.
func thisRelease(page string) string {
	return between(page, `<tr><th scope="row">This release`, "</tr>")
}

// mainOf is a page's main content, for failure messages.
func mainOf(page string) string {
	if m := between(page, `<main id="main"`, "</main>"); m != "" {
		return m
	}
	return page
}

// between returns the part of s from the first from to the next to after
// it ("" without from).
func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i:]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j+len(to)]
	}
	return s
}

// rowOf returns the table row of page that names vm.
func rowOf(page, vm string) string {
	for _, row := range strings.Split(page, "<tr>") {
		if strings.Contains(row, ">"+vm+"<") {
			return row
		}
	}
	return ""
}

// auditRow reports whether page's audit table has a row by actor of
// action mentioning text.
func auditRow(page, actor, action, text string) bool {
	return auditIndex(page, actor, action, text) >= 0
}

// auditIndex returns the index, from the top, of the first row of page's
// audit table by actor of action mentioning text, or -1.
func auditIndex(page, actor, action, text string) int {
	table := between(page, `<table class="audit">`, "</table>")
	for i, row := range strings.Split(table, "<tr>") {
		if strings.Contains(row, "<td>"+actor+"</td><td>"+action+"</td>") && strings.Contains(row, html.EscapeString(text)) {
			return i
		}
	}
	return -1
}
