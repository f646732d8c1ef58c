// Package dashboard serves lpsd's operator dashboard: the releases with
// their rollout state, plan step and next step's time; per release the
// nodes' outcome reports against the base's control cohort, as numbers and
// as a chart over time; the health verdict and an automatic halt's
// evidence; the audit log with filters; "explain a VM"; the served document
// size per base; and the releases about to expire. Operators can pause,
// resume, halt and revoke from it.
//
// # Where and who
//
// It is served on the admin listener, beside the gRPC admin API (lpsd
// routes by content type), so it has the admin listener's TLS and its
// callers: a verified admin client certificate signs its holder in at once;
// anyone else signs in with an admin token in a form, which starts a
// session. Roles are the admin API's (admin.Allowed): a reader sees every
// page, and only an operator is offered, and may use, the actions.
//
// # Sessions and forms
//
// A client certificate is checked on every request, with the role it has
// then, and needs no session: it cannot sign out, and a token cannot
// replace it. A token's session is a random 256-bit identifier in a cookie
// that is Secure, HttpOnly and SameSite=Strict, held in this lpsd
// instance's memory for at most 8 hours (sign in again after a restart, or
// on another replica; one token keeps at most 32 sessions); its token is
// looked up again on every request, so a token removed or demoted by a
// reload (SIGHUP) takes effect at once. Every form carries a CSRF token,
// checked in constant time (a certificate holder's is an HMAC of its name
// under a per-process key), and a change or a sign-in is refused when the
// browser says it came from another site (Sec-Fetch-Site, Origin or
// Referer). Pages are sent with a Content-Security-Policy that allows only
// the dashboard's own script and style, and no framing; rendered pages are
// not cached.
//
// # Actions
//
// Pause, resume, halt and revoke each need a confirmation and a reason, and
// go through the admin API's own methods (the same code as lpsctl's calls),
// with the signed-in actor, so each is an audit entry like any other. They
// are called in-process, so the admin listener's gRPC metrics
// (lpsd_admin_grpc_*) do not count them; the audit log does.
//
// # Data and refresh
//
// Pages render from a view of the admin API's Status that Run rebuilds
// every Config.Refresh (and at once after an action), so a page costs its
// rendering, not a reading of every report; each page says how old its data
// is. Run also keeps each servable release's counts over time, in memory,
// for the charts (an hour at the default refresh): the history starts when
// this instance does. With JavaScript on, the releases and release pages
// reload their main content every Config.Refresh, except while the
// operator is using a form or has the keyboard focus in the page; without
// it, every page reads the same, and a link reloads it. A release page
// shows the newest of that release's audit entries among the first 50,000
// of the log (read once per view), and links to all of them.
package dashboard
