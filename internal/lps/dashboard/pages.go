package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/autopilot"
	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/regression"
	"nodehotfix/internal/rollout"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// partialHeader asks for a page's main content only (live refresh).
const partialHeader = "X-Dashboard-Partial"

// auditPage is how many audit entries a page shows.
const auditPage = 100

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"time": fmtTime,
	// replicaClock is status's CLOCK column (admin.ReplicaClock).
	"replicaClock":     admin.ReplicaClock,
	"replicaClockNote": func() string { return admin.ReplicaClockNote },
	"ts": func(t *timestamppb.Timestamp) string {
		if t == nil {
			return "-"
		}
		return fmtTime(t.AsTime())
	},
	"ago":    ago,
	"scope":  rollout.ScopeText,
	"pct":    fmtPct,
	"change": rollout.DescribeChange,
	"chart":  chartSVG,
	"canAct": func(role admin.Role) bool { return admin.Allowed(role, adminv1.AdminService_Transition_FullMethodName) },
	"bytes": func(n int) string {
		if n < 1024 {
			return fmt.Sprintf("%d B", n)
		}
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	},
	// share is a fraction of a cohort, as a percentage.
	"share": func(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%" },
	// ratio is a rate with its counts: 4.2% (2/48).
	"ratio": func(n, d uint64) string {
		return fmt.Sprintf("%.1f%% (%d/%d)", 100*float64(n)/float64(d), n, d)
	},
	"evidence":   evidenceText,
	"actions":    func(r *adminv1.Release) []offer { return actionsFor(r, time.Now()) },
	"stepSize":   stepSize,
	"planInputs": func() any { return planInputs },
	// inc counts from 1 what the API counts from 0 (a step, a row).
	"inc": func(i any) int64 {
		switch i := i.(type) {
		case int:
			return int64(i) + 1
		case int32:
			return int64(i) + 1
		}
		return 0
	},
	"add":        func(a, b int) int { return a + b },
	"dur":        func(sec int64) string { return duration.Format(time.Duration(sec) * time.Second) },
	"ms":         func(d time.Duration) int64 { return d.Milliseconds() },
	"stateClass": stateClass,
	"reasonText": regression.ReasonText,
	"int":        func(i int32) int { return int(i) },
	// isConfig reports an audit target that is a component configuration,
	// which has no release page.
	"isConfig": func(target string) bool { _, _, ok := rollout.ParseConfigID(target); return ok },
}).ParseFS(templateFS, "templates/*.html"))

// stateClass is the CSS class of a rollout state: one of the states the
// stylesheet knows, whatever string the API sent.
func stateClass(s string) string {
	switch rollout.State(s) {
	case rollout.Draft, rollout.Rolling, rollout.Paused, rollout.Halted, rollout.Complete:
		return "state-" + s
	}
	return "state-other"
}

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /login", d.loginPage)
	m.HandleFunc("POST /login", d.login)
	m.HandleFunc("POST /logout", d.signedIn(d.logout))
	m.HandleFunc("GET /{$}", d.signedIn(d.releasesPage))
	m.HandleFunc("GET /releases/{version}", d.signedIn(d.releasePage))
	m.HandleFunc("POST /releases/{version}/{action}", d.signedIn(d.act))
	m.HandleFunc("GET /releases/{version}/nodes", d.signedIn(d.nodesPage))
	m.HandleFunc("GET /releases/{version}/nodes.csv", d.signedIn(d.nodesCSV))
	m.HandleFunc("POST /freeze", d.signedIn(d.setFreeze))
	m.HandleFunc("GET /audit", d.signedIn(d.auditPage))
	m.HandleFunc("GET /explain", d.signedIn(d.explainPage))
	d.mux = m
}

// page is what every template gets.
type page struct {
	Title   string
	Active  string
	S       *session
	V       *view
	Refresh time.Duration // between live refreshes
	// Path is the page's own address, for its Reload link ("": the
	// address asked for, which for a form's answer is the form's).
	Path  string
	Flash string
	Error string
	Data  any
}

// signedIn runs h for a signed-in caller, and sends anyone else to the
// sign-in page.
func (d *Dashboard) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := d.caller(r)
		if se == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			d.fail(w, r, nil, http.StatusUnauthorized, "sign in first")
			return
		}
		h(w, r, se)
	}
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if p.V == nil {
		p.V = d.view.Load()
		if p.V == nil {
			p.V = &view{Pending: true}
		}
	}
	p.Refresh = d.cfg.Refresh
	tmpl := name
	if r.Header.Get(partialHeader) != "" {
		tmpl = name + "-main"
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, tmpl, p); err != nil {
		d.cfg.Log.Error("dashboard template", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) //nolint:errcheck // the client went away
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, se *session, code int, msg string) {
	d.render(w, r, code, "error", page{Title: http.StatusText(code), S: se, Error: msg})
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	if se := d.caller(r); se != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: r.URL.Query().Get("next")})
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	// Another site must not sign a browser in as someone else (login CSRF).
	if err := checkOrigin(r); err != nil {
		d.fail(w, r, nil, http.StatusForbidden, err.Error())
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if se := d.caller(r); se != nil && se.Cert {
		// A client certificate signs in by itself; a token cannot
		// override it.
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	actor, role, err := d.cfg.Auth.IdentifyToken(token)
	if err != nil || token == "" {
		d.cfg.Log.Warn("dashboard sign-in refused", "peer", r.RemoteAddr)
		msg := "that token is not an admin token of this lpsd"
		if admin.TokenExpired(err) {
			msg = status.Convert(err).Message() // its name and expiry, never the token
		}
		d.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Error: msg, Data: next})
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		d.sessions.end(c.Value) // whoever was signed in here is not any more
	}
	se := d.sessions.start(actor, role, sha256.Sum256([]byte(token)), time.Now())
	setSessionCookie(w, se)
	d.cfg.Log.Info("dashboard sign-in", "actor", actor, "role", role)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect on this dashboard: a path with no
// scheme, host or control character, re-serialised.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.IndexFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) >= 0 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return u.RequestURI()
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, se *session) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := checkForm(r, se); err != nil {
		d.fail(w, r, se, http.StatusForbidden, err.Error())
		return
	}
	d.sessions.end(se.ID)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (d *Dashboard) releasesPage(w http.ResponseWriter, r *http.Request, se *session) {
	flash := ""
	if done := r.URL.Query().Get("done"); done == admin.ActionFreeze || done == admin.ActionUnfreeze {
		flash = done + ": done"
	}
	d.renderReleases(w, r, se, http.StatusOK, flash, "")
}

// renderReleases renders the releases page with a flash or an error (a
// refused freeze's) at its top.
func (d *Dashboard) renderReleases(w http.ResponseWriter, r *http.Request, se *session, code int, flash, errMsg string) {
	d.render(w, r, code, "releases", page{Title: "Releases", Active: "releases", S: se, Path: "/", Flash: flash, Error: errMsg})
}

// releaseData is the release page's.
type releaseData struct {
	R        releaseView
	Chart    chartData
	Audit    []auditRow // the newest, oldest first
	Evidence string     // the last automatic change's
	AuditErr string
}

// releaseAuditScans bounds the ListAudit calls behind one release page:
// each examines at most 10,000 entries of the log.
const releaseAuditScans = 5

// auditCache holds each release page's audit rows for one view, so a live
// page polling every few seconds reads the log once per view.
type auditCache struct {
	mu    sync.Mutex
	built time.Time
	m     map[string]auditEntry
}

type auditEntry struct {
	rows     []auditRow
	evidence string
}

// releaseAudit returns version's newest audit rows (up to auditPage, from
// the first releaseAuditScans pages of the log) and its last automatic
// change's evidence.
func (d *Dashboard) releaseAudit(ctx context.Context, se *session, version string, built time.Time) ([]auditRow, string, string) {
	c := &d.audits
	c.mu.Lock()
	if !c.built.Equal(built) {
		c.built, c.m = built, map[string]auditEntry{}
	}
	e, ok := c.m[version]
	c.mu.Unlock()
	if ok {
		return e.rows, e.evidence, ""
	}
	var entries []*adminv1.AuditEntry
	var after int64
	for range releaseAuditScans {
		resp, err := d.cfg.Admin.ListAudit(admin.WithActor(ctx, se.Actor), &adminv1.ListAuditRequest{Target: version, AfterSeq: after, Limit: auditPage})
		if err != nil {
			return nil, "", status.Convert(err).Message()
		}
		entries = append(entries, resp.GetEntries()...)
		if len(entries) > auditPage {
			entries = entries[len(entries)-auditPage:]
		}
		if !resp.GetMore() {
			break
		}
		after = resp.GetNextAfterSeq()
	}
	for i := len(entries) - 1; i >= 0 && e.evidence == ""; i-- {
		e.evidence = evidenceText(entries[i])
	}
	e.rows = auditRows(entries)
	c.mu.Lock()
	if c.built.Equal(built) {
		c.m[version] = e
	}
	c.mu.Unlock()
	return e.rows, e.evidence, ""
}

// releaseHistory returns rv's chart data for the view built at built:
// its recorded history (the admin API's GetHistory: the assessments the
// deciding replica's autopilot recorded, the same on every replica and
// kept after revocation, expiry and pruning), the baseline each point was
// judged against beside it, both held to built. An error leaves the chart
// empty: the page says so rather than failing.
func (d *Dashboard) releaseHistory(ctx context.Context, se *session, rv releaseView, built time.Time) chartData {
	version := rv.R.GetVersion()
	c := &d.histories
	c.mu.Lock()
	if !c.built.Equal(built) {
		c.built, c.m = built, map[string]chartData{}
	}
	h, ok := c.m[version]
	c.mu.Unlock()
	if ok {
		return h
	}
	ctx, cancel := context.WithTimeout(admin.WithActor(ctx, se.Actor), 10*time.Second)
	defer cancel()
	resp, err := d.cfg.Admin.GetHistory(ctx, &adminv1.GetHistoryRequest{Version: version})
	switch {
	case err != nil:
		d.cfg.Log.Warn("dashboard: a release's history for its chart", "version", version, "err", err)
		return chartData{Empty: emptyUnreadable}
	case !resp.GetKept():
		h = chartData{Empty: emptyNotKept}
	default:
		h = pointsChart(resp.GetPoints(), built)
	}
	c.mu.Lock()
	if c.built.Equal(built) {
		c.m[version] = h
	}
	c.mu.Unlock()
	return h
}

func (d *Dashboard) releasePage(w http.ResponseWriter, r *http.Request, se *session) {
	flash := ""
	if done := r.URL.Query().Get("done"); actionMethods[done] != "" {
		flash = done + ": done"
	}
	d.renderRelease(w, r, se, http.StatusOK, r.PathValue("version"), flash, "")
}

// renderRelease renders version's page from the current view, with a
// flash or an error (a refused action's) at its top.
func (d *Dashboard) renderRelease(w http.ResponseWriter, r *http.Request, se *session, code int, version, flash, errMsg string) {
	v := d.view.Load()
	if v == nil {
		d.fail(w, r, se, http.StatusServiceUnavailable, "no data yet: the dashboard's first refresh has not finished; reload in a moment")
		return
	}
	rv, ok := v.release(version)
	if !ok {
		d.fail(w, r, se, http.StatusNotFound, "no release "+version+" (as of the last refresh)")
		return
	}
	data := releaseData{R: rv, Chart: d.releaseHistory(r.Context(), se, rv, v.Built)}
	data.Audit, data.Evidence, data.AuditErr = d.releaseAudit(r.Context(), se, version, v.Built)
	d.render(w, r, code, "release", page{Title: version, Active: "releases", S: se, Flash: flash, Error: errMsg, Path: "/releases/" + url.PathEscape(version), Data: data})
}

func httpStatus(c codes.Code) int {
	switch c {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return http.StatusInternalServerError
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusBadGateway
}

// auditRow is one audit entry for a table.
type auditRow struct {
	E      *adminv1.AuditEntry
	Change string
	Why    string
}

func auditRows(entries []*adminv1.AuditEntry) []auditRow {
	out := make([]auditRow, 0, len(entries))
	for _, e := range entries { // oldest first, as the log pages

		row := auditRow{E: e, Change: rollout.DescribeChange(e.GetBeforeJson(), e.GetAfterJson())}
		if e.GetReason() == "" { // an automatic change's reason is its evidence in words
			row.Why = evidenceText(e)
		}
		out = append(out, row)
	}
	return out
}

// evidenceText is an automatic change's verdict in one line.
func evidenceText(e *adminv1.AuditEntry) string {
	ev, ok := autopilot.ParseEvidence(e.GetEvidenceJson())
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s: %s", ev.Verdict.Health, ev.Verdict.Detail)
}

// auditData is the audit page's.
type auditData struct {
	Target, Actor, Since string
	Rows                 []auditRow
	More                 bool
	Next                 int64
}

func (d *Dashboard) auditPage(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	data := auditData{Target: q.Get("target"), Actor: q.Get("actor"), Since: q.Get("since")}
	req := &adminv1.ListAuditRequest{Target: data.Target, Actor: data.Actor, Limit: auditPage}
	if data.Since != "" {
		t, err := parseSince(data.Since, time.Now())
		if err != nil {
			d.render(w, r, http.StatusBadRequest, "audit", page{Title: "Audit", Active: "audit", S: se, Error: err.Error(), Data: data})
			return
		}
		req.Since = timestamppb.New(t)
	}
	if after, err := strconv.ParseInt(q.Get("after"), 10, 64); err == nil && after > 0 {
		req.AfterSeq = after
	}
	resp, err := d.cfg.Admin.ListAudit(admin.WithActor(r.Context(), se.Actor), req)
	if err != nil {
		st := status.Convert(err)
		d.render(w, r, httpStatus(st.Code()), "audit", page{Title: "Audit", Active: "audit", S: se, Error: st.Message(), Data: data})
		return
	}
	data.Rows, data.More, data.Next = auditRows(resp.GetEntries()), resp.GetMore(), resp.GetNextAfterSeq()
	d.render(w, r, http.StatusOK, "audit", page{Title: "Audit", Active: "audit", S: se, Data: data})
}

// parseSince reads an RFC 3339 time or a duration ago (2h, 7d, 1d12h),
// as lpsctl audit --since does.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := duration.Parse(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time (2026-12-01T00:00:00Z) or a duration ago (2h, 7d)", s)
}

// explainData is the explain page's.
type explainData struct {
	VMID, Subscription, Region string
	Asked                      bool
	Decisions                  []*adminv1.Decision
	Pointer                    string
}

func (d *Dashboard) explainPage(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	data := explainData{VMID: strings.TrimSpace(q.Get("vm_id")), Subscription: strings.TrimSpace(q.Get("subscription")), Region: strings.TrimSpace(q.Get("region"))}
	p := page{Title: "Explain a VM", Active: "explain", S: se, Data: &data}
	if data.VMID == "" && data.Subscription == "" {
		d.render(w, r, http.StatusOK, "explain", p)
		return
	}
	data.Asked = true
	resp, err := d.cfg.Admin.Explain(admin.WithActor(r.Context(), se.Actor), &adminv1.ExplainRequest{VmId: data.VMID, SubscriptionId: data.Subscription, Region: data.Region})
	if err != nil {
		st := status.Convert(err)
		p.Error = st.Message()
		d.render(w, r, httpStatus(st.Code()), "explain", p)
		return
	}
	data.Decisions = resp.GetDecisions()
	if pj := resp.GetPointerJson(); pj != "" {
		var out bytes.Buffer
		if json.Indent(&out, []byte(pj), "", "  ") == nil {
			data.Pointer = out.String()
		}
	}
	d.render(w, r, http.StatusOK, "explain", p)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ago says how long before now t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

func fmtPct(p float64) string {
	if p < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", p)
}
