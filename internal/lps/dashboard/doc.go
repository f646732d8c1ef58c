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
// A session is a random 256-bit identifier in a cookie that is Secure,
// HttpOnly and SameSite=Strict, held in this lpsd instance's memory for at
// most 8 hours (sign in again after a restart, or on another replica). Every
// form carries the session's CSRF token, checked in constant time, and a
// change must also come from the dashboard's own origin (Origin or Referer).
// Pages are sent with a Content-Security-Policy that allows only the
// dashboard's own script and style, no framing, and no caching.
//
// # Actions
//
// Pause, resume, halt and revoke each need a confirmation and a reason, and
// go through the admin API's own methods (the same code as lpsctl's calls),
// with the signed-in actor, so each is an audit entry like any other.
//
// # Data and refresh
//
// Pages render from a view of the admin API's Status that Run rebuilds
// every Config.Refresh (and at once after an action), so a page costs its
// rendering, not a reading of every report; each page says how old its data
// is. Run also keeps each release's counts over time, in memory, for the
// charts: the history starts when this instance does. With JavaScript on, a
// page reloads its main content every Config.Refresh; without it, every
// page reads the same, and a link reloads it.
package dashboard
