package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
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
	history  *history
	kick     chan struct{}
}

// New returns a dashboard over cfg's admin API.
func New(cfg Config) *Dashboard {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{cfg: cfg, history: newHistory(), kick: make(chan struct{}, 1)}
	d.sessions.m = make(map[string]*session)
	d.routes()
	return d
}

// Run rebuilds the view every Config.Refresh, and at once after an
// action, until ctx is done. A rebuild reads every report (the admin API's
// Status), so Run waits at least ten times as long as the last one took:
// on a big fleet the dashboard costs at most a tenth of a core, and its
// data is that much older (each page says how old).
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
		case <-d.kick:
			t.Stop()
		}
	}
}

// refresh rebuilds the view from the admin API; a failure keeps the last
// view and says so on every page.
func (d *Dashboard) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(admin.WithActor(ctx, dashboardActor), 30*time.Second)
	defer cancel()
	st, err := d.cfg.Admin.Status(ctx, &adminv1.StatusRequest{})
	now := time.Now()
	if err != nil {
		d.cfg.Log.Warn("dashboard refresh failed", "err", err)
		prev := d.view.Load()
		v := &view{Err: err.Error(), Built: now}
		if prev != nil {
			cp := *prev
			cp.Err = err.Error()
			v = &cp
		}
		d.view.Store(v)
		return
	}
	d.history.add(now, st)
	d.view.Store(buildView(st, now))
}

// refreshSoon asks Run for a rebuild (after an action).
func (d *Dashboard) refreshSoon() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
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

// session is one signed-in caller.
type session struct {
	ID, CSRF string
	Actor    string
	Role     admin.Role
	// Cert marks a session a client certificate opened: it lasts only
	// while that certificate is presented.
	Cert    bool
	Expires time.Time
}

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

func (s *sessions) start(actor string, role admin.Role, cert bool, now time.Time) *session {
	se := &session{ID: randomToken(), CSRF: randomToken(), Actor: actor, Role: role, Cert: cert, Expires: now.Add(sessionTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		var oldest *session
		for _, o := range s.m {
			if oldest == nil || o.Expires.Before(oldest.Expires) {
				oldest = o
			}
		}
		delete(s.m, oldest.ID)
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

// caller returns r's session: its cookie's, or, for a verified client
// certificate, a session it opens (setting the cookie); nil when r is not
// signed in.
func (d *Dashboard) caller(w http.ResponseWriter, r *http.Request) *session {
	now := time.Now()
	var certActor string
	var certRole admin.Role
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if a, role, err := d.cfg.Auth.Identify(r.TLS, nil); err == nil {
			certActor, certRole = a, role
		}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if se := d.sessions.get(c.Value, now); se != nil {
			// A certificate's session is its holder's only while the
			// holder presents it.
			if !se.Cert || se.Actor == certActor {
				return se
			}
		}
	}
	if certActor == "" {
		return nil
	}
	se := d.sessions.start(certActor, certRole, true, now)
	setSessionCookie(w, se)
	return se
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
