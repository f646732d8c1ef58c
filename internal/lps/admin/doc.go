// Package admin serves the live-patching service's operator API
// (nodehotfix.admin.v1.AdminService) to authenticated callers.
//
// # Threat model
//
// The admin API decides which signed releases the fleet is offered, at what
// pace, and which are revoked; whoever can call it can halt a fix or roll a
// signed one out everywhere at once. It cannot make a node run bytes no
// release key signed (nodes verify every envelope themselves), and when the
// service holds release public keys (Config.ReleaseKeys) it refuses to even
// store an envelope they do not verify.
//
// It is therefore served on its own listener, always over TLS (TLSConfig),
// and every call passes the Auth interceptor before any handler runs. A
// caller proves its identity in one of two ways:
//
//   - a client certificate that the TLS handshake verified against the
//     admin client CA (mTLS); the actor is "cert:<subject CN>";
//   - a bearer token in the "authorization" metadata ("Bearer <token>"),
//     compared in constant time against the tokens of the token file; the
//     actor is "token:<name>", or "token:sha256:<8 hex digits>" for an
//     unnamed token. Tokens are refused on a connection without TLS.
//
// Each caller has a role: an operator may call everything; a reader only
// Status, Explain, ListAudit and ListNodes, and any other call is PermissionDenied
// saying so. A token is an operator's unless its line names the role
// reader; a certificate is an operator's unless its subject's
// organizational unit (OU) is "reader".
//
// A verified certificate wins over a token sent alongside it. Every other
// call fails with Unauthenticated before reaching a handler, and the
// handlers themselves refuse a context without an actor, so a server wired
// without the interceptor fails closed.
//
// # Token file
//
// UTF-8 text of at most 64 KiB, one token per line:
//
//	# comment
//	alice:3q2+7w…                          a named token; the actor is token:alice
//	grafana:reader:9c1…                    a named token with the reader role
//	ci:operator:4d7…:2026-12-31T18:00:00Z  a named token refused from that time on
//	temp:reader:8e2…:2026-12-31            refused from 2026-12-31T00:00:00Z (UTC)
//	Zm9vYmFyYmF6…                          an unnamed token; the actor is token:sha256:<prefix>
//
// Blank lines and lines starting with '#' are ignored; surrounding spaces
// are trimmed. A name is 1 to 64 characters of [A-Za-z0-9._@-]; a token is
// 16 to 4096 characters of [A-Za-z0-9._~+/=-] (base64, base64url or hex),
// so the first ':' always ends the name, a second one the role (operator,
// the default, or reader) and a third the token, after which comes its
// expiry: RFC 3339, or a date, meaning that day's start in UTC. An expiry
// needs the name and the role before it. Duplicate tokens or names, an
// expiry that does not parse, and a file with no token, are errors; errors
// name the line, never its content.
//
// A token is checked on every call and every dashboard request
// (Auth.LookupToken, the one lookup): from its expiry on it is
// Unauthenticated with a message naming it and when it expired (never the
// token), whatever session it started.
// A client's token file uses the same syntax with exactly one token line
// (ClientToken), so an operator's file can be one line cut from the
// server's. Generate a token with "openssl rand -base64 32".
//
// # Audit
//
// Every change (publish, rollout-set, plan, skip, pause, resume, halt,
// complete, revoke) is written with an audit entry, in the same store transaction,
// holding the actor, the action, the release version, the whole record
// (JSON) before and after, and the caller's reason when one was given (at
// most MaxReasonBytes of UTF-8 without control or format characters, since
// every reader prints it; anything else is InvalidArgument). The autopilot's
// entries (actor "lpsd": auto-advance, auto-halt, auto-pause, and expire
// when a served release's envelope expired) carry their evidence and a
// one-line reason.
// Changes are compare-and-swap on the record's revision: a write that lost
// a race fails with Aborted and changes nothing. A request that would change
// nothing (a transition to the current state, a second revoke, the same
// envelope published again) writes nothing and says unchanged.
//
// A resume of a halted release records, in its after record, the
// evidence window it opened (rollout.evidence_since): reports accepted
// before it no longer count. A skip needs a reason. A dry-run plan
// (SetPlanRequest.dry_run) is checked by the same rules and writes
// nothing, not even an audit entry.
//
// ListNodes lists the nodes behind Status's counts, worst first, and sums
// up every matching failing node by outcome and reason (top_reasons);
// Nodes gives an in-process caller (the dashboard's CSV) every page at
// once, from one assessment of the fleet instead of one per page.
//
// ListAudit filters by target, actor and time on the server. One call
// examines at most 10000 entries, so a filter that matches little returns
// a short page with more set and next_after_seq to continue from, never an
// unbounded read of the log.
//
// # Scope and expiry
//
// Rollout scopes hold subscription IDs (GUIDs) and region labels only
// (rollout.CheckScope); any other value is InvalidArgument, quoted, so a
// typographic quote pasted for "all" is refused rather than scoping a
// rollout to nobody. Every Release returned carries its envelope's
// not_after; from then on the release is served to no node (explain's rule
// not-expired). Deploy-environment scopes take labels of the region form
// (rollout.CheckDeployEnvs).
//
// A well-formed scope may still match no node: SetRollout refuses a
// subscription it sets that no report or served record of the last
// SeenWindow has, and a region no live replica serves from (the replicas'
// labels, from the store when several share it), and SetPlan the same of
// the release's scope, with FailedPrecondition naming each value and the
// nearest seen spelling (ErrorInfo ReasonUnseenScope), unless the request
// sets allow_unseen. The check reads no more than an autopilot look.
//
// Status lists the replicas with their labels and, per base, what each
// part of the nodes gets now and why (rollout.ServedNow over the serving
// snapshot, at the replicas' places), with each release's fallbacks and
// failure rate (FailureRateDefinition).
//
// # Component configurations
//
// PublishComponentConfig stores a signed configuration of a component other
// than aksNodeController (release.SignComponent; verified with
// Config.ReleaseKeys as releases are) as a draft, named
// "<component>@<version>". SetRollout, SetPlan, Transition and Revoke take
// that name where they take a release version and answer with the record
// in component_config; their rules are the releases' (rollout.Config), but
// a plan must be timed: nothing reports on a component, so nothing judges
// it, and internal/schedule steps it. Explain with a component explains its
// configurations; Status lists them; every change is audited as a
// release's, with the name as target.
package admin
