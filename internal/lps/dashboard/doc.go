// Package dashboard serves lpsd's operator dashboard: per base, what each
// part of its nodes is served now and why (the admin API's served-now
// table, as lpsctl status prints it); the releases with
// their rollout state, plan step and next step's time; per release the
// nodes' outcome reports against the base's control cohort, as numbers and
// as charts over time, and the nodes themselves (worst first, with their
// reasons, and as CSV); the health verdict and an automatic halt's
// evidence; the audit log with filters; "explain a VM"; the served document
// size per base; and the releases about to expire. Operators can steer a
// release from it: set its percentage, plan it, skip a plan step,
// complete, pause, resume, halt and revoke it.
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
// A published release's page offers an operator the changes the rollout
// rules allow from its state, asked of those rules (internal/rollout), so
// a paused release offers resume and not pause, and a revoked one nothing:
// set percent (it only grows; a draft starts rolling), plan (its steps as
// lpsctl rollout plan --steps reads them, the health rule's numbers with
// lpsctl's defaults), skip step (audited as "skip", as lpsctl rollout
// skip), complete, resume, pause, halt and revoke. A plan is first sent as
// a dry run: the page shows the admin API's preview (each step's soonest
// window, the baseline, the deadlines, an envelope that expires first),
// and only its own form applies exactly that plan. Each change needs a
// reason and a ticked confirmation, and goes through the admin API's own
// method (the same code as lpsctl's calls), with the signed-in actor, so
// each is an audit entry like any other. They are called in-process, so
// the admin listener's gRPC metrics (lpsd_admin_grpc_*) do not count them;
// the audit log does. The releases page offers an operator the fleet-wide
// freeze (or unfreeze), with a reason and the confirmation, at the freeze's
// revision the page showed. lpsd's rollout policy (lpsd --policy-*) holds
// these changes as it holds lpsctl's, and is shown on the releases and
// release pages; a change that waits for a second operator is shown on its
// release page (who asked, why, until when), and another operator approves
// it by submitting the same action.
//
// Every form carries the revision of the release its page was rendered
// at, sent as the change's if_revision: a form filled in on a page the
// release has moved on from (the page stops refreshing while a form is in
// use, so another operator's halt does not show) is refused, 409,
// "changed since you loaded this page", saying what changed between the
// record at that revision (kept from this instance's recent views, 16
// revisions per release) and the fresh one, in the audit log's words, or
// at least where the release is now; nothing is done, and the answer is
// the release's page as it is now, with forms at its new revision.
//
// # Replicas
//
// The releases page lists the replicas serving from the store (Status's),
// with the labels rollout scopes match, each heartbeat's time and how old
// it was by the answering replica's clock (admin.ReplicaClock, as lpsctl
// status prints it); a replica whose clock is far enough behind that the
// looks read its times corrected is marked, with what to do.
//
// # Nodes
//
// A release's nodes page lists the nodes counted for it from the admin
// API's ListNodes (as lpsctl nodes does), 100 a page, worst outcome first,
// under the commonest outcomes and reasons among all of them, each VM
// linked to "explain a VM", filterable by outcome. Its CSV download (the
// incident list: every VM the release reached, with what happened) holds
// every node the filter matches, from one assessment of the fleet
// (admin.Server.Nodes) rather than one per page; a cell a spreadsheet
// would read as a formula (starting with =, +, -, @, a tab or CR: nodes
// wrote those words) gets a quote before it. Each page and download
// assesses the fleet as a view's rebuild does, so neither refreshes itself.
//
// # Data and refresh
//
// Pages render from a view of the admin API's Status that Run rebuilds
// every Config.Refresh (and an action before it answers, so the page after
// it shows the change), so a page costs its
// rendering, not a reading of every report; each page says how old its data
// is. A release page's three charts (its failure rate against the
// baseline each look judged it against, its percentage as steps on bands
// of its state then, its nodes by outcome) are drawn from the history the
// deciding replica's looks recorded in the store (the admin API's
// GetHistory, read once per view; internal/history), spanning it from its
// first point to the view's time, so every replica draws the same history
// and it outlasts restarts, revocation, expiry and the reports' pruning.
// A release with no point yet says so (nothing is recorded under lpsd
// --autopilot-interval=0), as does a store that keeps no history and a
// read that failed. With JavaScript on, the releases and release pages
// reload their main content every Config.Refresh, except while the
// operator is using a form (or has filled anything in, or has the keyboard
// focus in the page) and on an action's refusal; without
// it, every page reads the same, and a link reloads it. A release page
// shows the newest of that release's audit entries among the first 50,000
// of the log (read once per view), and links to all of them.
package dashboard
