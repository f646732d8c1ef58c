package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
)

// DefaultRefresh is how often the view is rebuilt by default.
const DefaultRefresh = 5 * time.Second

const (
	sessionCookie = "lpsd_session"
	sessionTTL    = 8 * time.Hour
	// maxSessions bounds the session table; the oldest goes first.
	maxSessions = 10000
	// dashboardActor is who reads the admin API for the view.
	dashboardActor = "lpsd:dashboard"
)

// Config is what a Dashboard needs.
type Config struct {
	// Admin is the admin API, whose methods every page and action calls.
	Admin adminv1.AdminServiceServer
	// Auth identifies callers (certificates, tokens) and their roles.
	Auth *admin.Auth
	// Refresh is how often the view is rebuilt (0: DefaultRefresh).
	Refresh time.Duration
	// Log records sign-ins, refused requests and failed refreshes; nil
	// discards.
	Log *slog.Logger
}

// Dashboard is the operator dashboard's http.Handler. Run keeps its view
// fresh.
type Dashboard struct {
	cfg      Config
	mux      *http.ServeMux
	sessions sessions
	view     atomic.Pointer[view]
	// histories caches each release page's chart data for one view.
	histories historyCache
	// records keeps the release records recent views showed, so a form
	// refused as stale can say what changed since its page.
	records records
	// refreshing serialises rebuilds: Run's and those after an action.
	refreshing sync.Mutex
	// csrfKey keys certificate holders' CSRF tokens.
	csrfKey [32]byte
	// audits caches each release page's audit rows for one view.
	audits auditCache
}

// New returns a dashboard over cfg's admin API.
func New(cfg Config) *Dashboard {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{cfg: cfg}
	rand.Read(d.csrfKey[:]) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	d.sessions.m = make(map[string]*session)
	d.routes()
	return d
}

// Run rebuilds the view every Config.Refresh until ctx is done (an action
// rebuilds it too, before it answers). A rebuild reads every report (the
// admin API's Status), so Run waits at least ten times as long as the last
// one took: on a big fleet the dashboard costs at most a tenth of a core,
// and its data is that much older (each page says how old).
func (d *Dashboard) Run(ctx context.Context) error {
	for {
		start := time.Now()
		d.refresh(ctx)
		t := time.NewTimer(max(d.cfg.Refresh, 10*time.Since(start)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// refresh rebuilds the view from the admin API; a failure keeps the last
// view and says so on every page. Rebuilds run one at a time, so a slow
// one never replaces a newer view.
func (d *Dashboard) refresh(ctx context.Context) {
	d.refreshing.Lock()
	defer d.refreshing.Unlock()
	defer func() {
		// A bad record must not take lpsd down with the dashboard.
		if p := recover(); p != nil {
			d.cfg.Log.Error("dashboard refresh panicked", "panic", p)
			d.keepView(fmt.Sprintf("internal error: %v", p))
		}
	}()
	ctx, cancel := context.WithTimeout(admin.WithActor(ctx, dashboardActor), 30*time.Second)
	defer cancel()
	st, err := d.cfg.Admin.Status(ctx, &adminv1.StatusRequest{})
	now := time.Now()
	if err != nil {
		d.cfg.Log.Warn("dashboard refresh failed", "err", err)
		d.keepView(err.Error())
		return
	}
	d.records.add(st)
	d.view.Store(buildView(st, now))
}

// keepView keeps the last view, marked with why it was not rebuilt.
func (d *Dashboard) keepView(why string) {
	v := &view{Err: why, Built: time.Now()}
	if prev := d.view.Load(); prev != nil {
		cp := *prev
		cp.Err = why
		v = &cp
	}
	d.view.Store(v)
}

// ServeHTTP serves the dashboard's pages, forms and assets.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	d.mux.ServeHTTP(w, r)
}

// session is one signed-in caller: a token's, kept in memory behind a
// cookie, or a client certificate's, made afresh for each request (it
// lasts exactly as long as the certificate is presented, with the role the
// certificate has now).
type session struct {
	ID, CSRF string
	Actor    string
	Role     admin.Role
	// Cert marks a certificate's session, which has no cookie and cannot
	// sign out.
	Cert    bool
	Expires time.Time
	// token is the sha256 of the token that started it, looked up again on
	// every request.
	token [sha256.Size]byte
}

// maxSessionsPerActor bounds one token's sessions: a script signing in in a
// loop evicts only its own.
const maxSessionsPerActor = 32

type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func (s *sessions) get(id string, now time.Time) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.m[id]
	if se == nil || now.After(se.Expires) {
		delete(s.m, id)
		return nil
	}
	return se
}

// start records a token session, making room by dropping expired
// sessions, then the actor's oldest, then the oldest of all.
func (s *sessions) start(actor string, role admin.Role, token [sha256.Size]byte, now time.Time) *session {
	se := &session{ID: randomToken(), CSRF: randomToken(), Actor: actor, Role: role, Expires: now.Add(sessionTTL), token: token}
	s.mu.Lock()
	defer s.mu.Unlock()
	var mine []*session
	for id, o := range s.m {
		if now.After(o.Expires) {
			delete(s.m, id)
		} else if o.Actor == actor {
			mine = append(mine, o)
		}
	}
	oldest := func(ss []*session) *session {
		var out *session
		for _, o := range ss {
			if out == nil || o.Expires.Before(out.Expires) {
				out = o
			}
		}
		return out
	}
	if len(mine) >= maxSessionsPerActor {
		delete(s.m, oldest(mine).ID)
	} else if len(s.m) >= maxSessions {
		delete(s.m, oldest(slices.Collect(maps.Values(s.m))).ID)
	}
	s.m[se.ID] = se
	return se
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// caller returns r's caller, or nil when r is not signed in. A verified
// client certificate wins over any cookie; a token session is checked
// against the tokens accepted now.
func (d *Dashboard) caller(r *http.Request) *session {
	now := time.Now()
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if actor, role, err := d.cfg.Auth.Identify(r.TLS, nil); err == nil {
			return &session{Actor: actor, Role: role, Cert: true, CSRF: d.certCSRF(actor), Expires: now.Add(sessionTTL)}
		}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	se := d.sessions.get(c.Value, now)
	if se == nil {
		return nil
	}
	actor, role, ok := d.cfg.Auth.LookupToken(se.token)
	if !ok {
		// The token was removed (a reload): so is its session.
		d.sessions.end(se.ID)
		return nil
	}
	if actor != se.Actor || role != se.Role {
		cp := *se
		cp.Actor, cp.Role = actor, role
		return &cp
	}
	return se
}

// certCSRF is a certificate holder's CSRF token: keyed by this process's
// secret, so a page of another origin cannot know it.
func (d *Dashboard) certCSRF(actor string) string {
	m := hmac.New(sha256.New, d.csrfKey[:])
	m.Write([]byte(actor))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func setSessionCookie(w http.ResponseWriter, se *session) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: se.ID, Path: "/", Expires: se.Expires,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
}

// errForbidden is a form that failed the CSRF or origin check.
var errForbidden = errors.New("this form did not come from this dashboard (stale page or forged request): reload the page and try again")

// checkForm verifies a POST's CSRF token against se and that it came from
// this dashboard's origin.
func checkForm(r *http.Request, se *session) error {
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(se.CSRF)) != 1 {
		return errForbidden
	}
	return checkOrigin(r)
}

// checkOrigin refuses a POST that its browser says came from another site
// (Sec-Fetch-Site, Origin or Referer); a client that sends none of them is
// left to the CSRF token and the SameSite cookie.
func checkOrigin(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return errForbidden
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		origin = r.Header.Get("Referer")
	}
	if origin == "" {
		return nil // a browser that sends neither; the token and SameSite hold
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host != r.Host {
		return errForbidden
	}
	return nil
}
