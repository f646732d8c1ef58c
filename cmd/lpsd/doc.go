/*
Command lpsd is the live-patching service. Nodes call
akslivepatching.v1.LivePatchingService/GetComponentConfig over TLS with their
attested instance-identity document; lpsd verifies the document and answers
with the hotfix pointer for that node, from an in-memory snapshot of its
store. Operators change the state through the admin API (lpsctl).

After provisioning, a node with the hotfix flag on reports how it went
(nodehotfix.node.v1.ReportService/ReportOutcome, on the same listener,
authenticated the same way). lpsd keeps the vmId from the document, refuses
a hotfix report unless the node was offered that release, at most 16 boots
per vmId per replica within 24 h, and stores each (vmId, boot) once: reports are
written in batches (a write starts 10 ms after the replica's last one
began, or at once when 128 wait, and takes every report waiting, at most
128), and a node's call returns once its report is stored. lpsctl status shows
every node served each release by one outcome (ok, failed, fell back,
refused as signed, refused for delivery, not applicable, silent, pending),
and, per base, the control cohort (nodes that ran the baked agent with no
release requested). lpsd records each reporting boot it serves a hotfix (a
served record), so a node that never reports counts as silent
(docs/closed-loop.md).
Just before it runs a hotfix, a node sends ReportService/ReportStarted:
stored under the same (vmId, boot) only where that boot has no report yet,
replaced by its outcome, counted pending and then silent, never as a
success (result "started"). Every serving replica marks each minute it is
up in the store (every 20 s, kept 72 h), and a served boot's silence is
counted only over those minutes, so an outage does not make the nodes it
kept from reporting silent (at most 24 h past their silent-after). Metrics: lpsd_reports_total{result},
lpsd_served_records_total{result}, lpsd_release_nodes{version,outcome},
lpsd_control_nodes{base,outcome}, lpsd_store_unreadable_records{kind},
lpsd_release_silent_ceiling{version} (a planned release's silent-rate
ceiling, which the alert LpsdReleaseSilentRateHigh compares with; 20 %
for a release without a plan).

A release with a plan (lpsctl rollout plan) is stepped by lpsd itself
every --autopilot-interval (default 10s; 0 turns it off): a step ends when
its bake time has passed and the release has the step's reports, unless the
health rule (internal/regression: ceilings on the failure, refused-as-signed,
silent and refused-for-delivery rates, and a comparison with the base's
incumbent) finds a regression, which halts the release at once; a step
still short of evidence at its deadline pauses it (inconclusive, or stalled when the release reached no node:
a scope or canary nobody falls in). Every
automatic change is an audit entry with actor lpsd, its evidence and
reason code. lpsd_releases_stopped{state,reason} counts the paused and
halted releases by that code, or operator (every pair exported, 0 when
none), and lpsctl status shows each release's REASON. On etcd only the elected replica's autopilot decides
(lpsd_autopilot_leader), and it steps down unless its clock is within
30 s of a majority of the replicas' heartbeats, itself among them
(lpsd_clock_skew_seconds: the median of its peers'; run three replicas, so
one whose clock is off keeps only itself from leading); every
change is a compare-and-swap besides, and an operator's pause, halt or
revoke wins. Nodes' requests for a canary seat are counted in
lpsd_canary_seat_requests_total{result} (taken, full, error, late,
subscription); lpsd_canary_seats_held{version} is the seats held, as the
serving snapshot last read them from the store.

Every replica exports each release's rollout from its snapshot, the same
on every replica: lpsd_rollout_state{version,base,state,reason} (1 for the
state it is in, revoked as a state of its own, reason an automatic pause
or halt's code), lpsd_rollout_percent, lpsd_rollout_step and
lpsd_rollout_steps (planned releases; the step 1-based, as lpsctl shows
it), for every rolling, paused or halted release and the 20
highest-versioned drafts and as many complete or revoked ones. Alerting rules for these and for credentials,
the store and the log ship in deploy/lpsd/prometheus/lpsd-alerts.yaml,
tested with promtool (lpsd-alerts.test.yaml).

Every look (the autopilot's, status, explain, the dashboard's) reads every
stored report and served record, so lpsd bounds them (internal/retention):
the replica whose autopilot runs (the elected one on etcd, the only one on
bbolt or memory; none with --autopilot-interval 0) prunes at its start,
before its first look, and every --retention-interval after, deleting the
records older than --retention-age and then, of each kind, the oldest
beyond --retention-records. It never deletes a record of the last 48 h
(a baseline's 24 h window; a plan's longest silent-after, 24 h, plus the
24 h an outage may stretch silence), so a canary's evidence and silence
detection stay whole; when those alone are more than --retention-records
they are kept, lpsd_retention_over_limit{kind} is 1 and one warning is
logged (one line again when it clears). Served records go up to the
reports' cutoff, so a node whose report was pruned is never counted silent.
Each prune also deletes the canary seats of a release's earlier evidence
windows (a resume after a halt seats the retry afresh) once its current
window is 48 h old; a release's current seats stay for its life.
What is pruned is gone: a rollout longer than the kept history is judged on
what is kept. The dashboard and admin reads wait for no prune: after a
restart on a store far over the bound, they read it whole until the first
prune ends. Metrics: lpsd_retention_pruned_total{kind},
lpsd_retention_stored_records{kind}, lpsd_retention_last_prune_timestamp_seconds.

Components other than aksNodeController (localDNS, say) are answered from
component configurations an operator signed with the release keys and
published (lpsctl component sign, lpsctl component publish): the highest
version whose rollout includes the node, served as the configuration's JSON
object with its envelope in one more member, nodehotfixConfigEnvelope,
which reference nodes ignore. A component nothing is published for, or
none of whose configurations includes the node, is NotFound. Their
rollouts take the releases' percentages and scopes, --deploy-env included;
their plans are timed (stepped every --autopilot-interval once each bake
ends) and never judged: components send no reports.

The admin listener also serves the operator dashboard (go doc
nodehotfix/internal/lps/dashboard; --dashboard=false turns it off), to the
admin API's callers and with its roles: the releases; per release its
outcome reports and charts, its nodes (the admin API's ListNodes, as lpsctl
nodes: worst first under their commonest reasons, 100 a page, each linked to
explain, and all of them as CSV) and its audit log; the whole audit log;
explain a VM. An operator can set a release's percentage, plan it (after the
admin API's dry run of the plan), skip its plan step, and complete, pause,
resume, halt or revoke it, as the state machine allows from its state, each
with a reason and a confirmation, through the admin API's own methods as the
signed-in actor (so each is audited as lpsctl's are). Every form acts at the
revision its page showed (if_revision): one filled in on a page the release
has moved on from is refused, saying what changed, and the page then shows
the release as it is.

Usage:

	lpsd --tls-cert FILE --tls-key FILE (--admin-token-file FILE | --admin-client-ca FILE) [flags]

Listeners:

	--listen ADDR          node-facing gRPC/TLS (default :8443); selects ALPN
	                       h2 for clients offering [aks-live-patching, h2] and
	                       presents --tls-cert whatever SNI the node sends
	--admin-listen ADDR    admin API, TLS 1.3, authenticated (default
	                       127.0.0.1:8444), and the operator dashboard at
	                       https://ADDR/ (gRPC is routed by content type)
	--dashboard=false      no dashboard (the admin API only)
	--dashboard-refresh D  how often the dashboard rebuilds its view from
	                       the admin API (default 5s; at least ten times as
	                       long as a rebuild takes, so it stays under a tenth
	                       of a core on a big fleet)
	--http-listen ADDR     /metrics (Prometheus), /healthz, /readyz (default
	                       127.0.0.1:9090)
	--debug-listen ADDR    net/http/pprof (CPU and heap profiles), loopback
	                       only; off by default (bench/loadgen -mode profile
	                       profiles lpsd through it)
	--addr-file FILE       write {"grpc","admin","http"[,"debug"]} bound
	                       addresses as JSON

TLS and authentication:

	--tls-cert, --tls-key  node-facing certificate; must cover --server-name
	--server-name NAME     default aks-security-patch.data.mcr.microsoft.com
	--admin-tls-cert, --admin-tls-key   admin certificate (default the node one)
	--admin-token-file FILE  bearer tokens, one [name:[role:]]token or
	                       name:role:token:expires per line; role operator
	                       (the default) or reader (status, explain, audit and
	                       nodes only); expires is RFC 3339
	                       (2026-12-31T18:00:00Z) or a date (2026-12-31: from
	                       that day's start, UTC), after which every call and
	                       dashboard request with the token is Unauthenticated,
	                       saying which token expired and when (never the
	                       token); lpsd_admin_token_expiry_timestamp_seconds{name}
	                       is each expiry, to alert on before it
	--admin-client-ca FILE   CA for admin client certificates (mTLS)

State:

	--store SPEC           bolt:PATH (default bolt:/var/lib/lpsd/lpsd.db),
	                       etcd:HOST:PORT[,HOST:PORT...] or mem:; a bbolt
	                       file that is empty or damaged is refused at start
	--etcd-ca FILE         CA verifying the etcd servers; turns on TLS
	                       (without it, an etcd that cannot be reached is
	                       probed: one that speaks TLS fails the start
	                       with "seems to speak TLS: set --etcd-ca")
	--etcd-cert, --etcd-key  client certificate presented to etcd
	--etcd-user NAME, --etcd-password-file FILE  etcd authentication
	--etcd-allow-plaintext   allow plain text to a non-loopback etcd (refused
	                       otherwise: anyone on that network could read and
	                       change every release); a password is never sent
	                       in plain text off this host
	--retention-age D      delete reports and served records older than D
	                       (default 30d; 0: none by age; at least 48h)
	--retention-records N  keep at most N reports and N served records, the
	                       newest (default 20000, which keeps an idle lpsd
	                       well inside the shipped 256 MiB limit: see
	                       bench/README.md "Look cost"; 0: no bound; at most
	                       10000000); never the last 48 h's
	--retention-interval D how often the pruning replica prunes (default 1h)
	--release-keys FILE    only releases signed by these keys can be published
	--region LABEL         this instance's region, matched by rollout scopes:
	                       a letter, then letters and digits, at most 64
	                       (eastus, westeurope2; case is ignored); the
	                       replicas' labels are the regions a scope may
	                       name (see below); the Kubernetes manifest takes
	                       it from the pod's nodehotfix/region label, the
	                       systemd unit from LPSD_REGION
	--deploy-env LABEL     this instance's deploy environment (prod, staging),
	                       matched by rollout deploy-environment scopes, as
	                       the reference's toggle keys on the service's
	                       environment; the same form as a region label
	--advance-window "DAYS HH:MM-HH:MM ZONE"  when the autopilot may
	                       advance a healthy plan step, as operators' change
	                       windows do ("Mon-Fri 09:00-17:00 Europe/Dublin";
	                       days a day, a range or a comma list; a span
	                       crossing midnight ends the next morning; an IANA
	                       zone, daylight saving included); a step due
	                       outside it waits for the next opening, while
	                       halts and pauses are never held back (default:
	                       any time); lpsctl rollout plan --dry-run's
	                       windows do not include it

Rollout policy, enforced on every operator's change to a release, whoever
asks (docs/closed-loop.md "Rollout policy and the two-person rule"; set it
the same on every replica; refusals are FailedPrecondition with ErrorInfo
reason POLICY or APPROVAL_REQUIRED):

	--policy-min-canary N  a release serves a percentage only after a plan's
	                       canary of at least N nodes that hears from N
	                       (0: none, the default)
	--policy-max-step P    no change or plan step raises a percentage by
	                       more than P points, completing included (0: none)
	--policy-min-bake D    every plan step but a final 100% bakes at least D,
	                       and an operator's rise comes D after the last
	                       (30m, 2h, 1d; 0: none)
	--policy-two-person    leaving or replanning a canary early, serving
	                       nodes without a canary, resuming a halted
	                       release and widening a serving release's scope
	                       wait for a second operator (another credential)
	                       asking for the same change within an hour

Attestation (see internal/imds/attest):

	--imds-roots FILE          trust anchors (default: embedded public roots)
	--imds-intermediates FILE  intermediates for chain building
	--imds-san-domain LIST     metadata domains (default metadata.azure.com)
	--imds-aia-hosts LIST      AIA fetch allowlist (default www.microsoft.com)
	--imds-no-aia              never fetch intermediates
	--allowed-subscriptions LIST  only these subscriptions may attest
	--attest-max-uses N        times one document is accepted (1: single use)

Memory: unless GOMEMLIMIT is set, lpsd gives the Go runtime a soft memory
limit of 90% of its cgroup's (cgroup v2 memory.max, or v1
memory.limit_in_bytes; the Kubernetes manifest's 256 MiB limit, a systemd
MemoryMax=), so that the collector works harder before the kernel would
kill it; it logs the limit it set at start.

Node-facing limits, so one client cannot deny lpsd to the fleet (every
closed connection is counted; nodes fail open at once rather than at their
3 s deadline):

	--max-connections N    open node connections (default 4096); more wait in
	                       the listen backlog
	--max-connections-per-peer N  open connections from one peer (an IPv4
	                       address, an IPv6 /64; default 1024, -1 none);
	                       more are closed at accept
	                       (lpsd_connections_closed_total{reason="peer-connections"})
	--max-handshakes N     TLS handshakes at once (default 128 per CPU); a
	                       connection waiting 2 s for a slot is closed
	                       (lpsd_connections_shed_total)
	--max-handshakes-per-peer N  handshakes in flight from one peer
	                       (default 64, -1 none); more are closed at once
	                       ({reason="peer-handshakes"})

A connection takes a handshake slot only once its whole ClientHello has
arrived: one that has not sent it within 1 s (silent, or trickling bytes)
is closed holding nothing ({reason="silent"}); a client that closes first
is not counted. A handshake holding a slot has 2.5 s to finish. A
connection with no call in flight is closed after 5 s (about 10 s for a
client that ignores GOAWAY), and every connection after 30 s (plus 5 s
for a call in flight): nodes make one call, of at most 3 s, per
connection. The per-peer caps assume they see the nodes' own addresses:
behind a balancer or NAT that hides them (Kubernetes
externalTrafficPolicy: Cluster, SNAT), one peer is many nodes, so raise
the caps or turn them off (-1). The admin listener takes at most 256
connections; keep it on a management network.

Node-facing answers: the pointer {"hotfixes","releases","revoked"} when
something applies; NotFound when nothing does; Unauthenticated or
PermissionDenied (no detail) when attestation fails; Unavailable before the
first snapshot or when an intermediate cannot be fetched.
A release whose signed envelope has expired (its not_after) is offered to no
node, whatever its rollout state: nodes would refuse it. When that changes
what nodes get (the release was rolling, paused or complete, not revoked,
and served some of its base's nodes just before), the autopilot writes one
audit entry, action expire, actor lpsd, with the record before and after,
what each cohort of the base's nodes got and gets (its evidence) and a
reason; on etcd only the elected replica does, and the release is marked
(expiry_recorded) in the same compare-and-swap, so no replica or restart
writes a second (with --autopilot-interval 0, none is written). Such a skip is
counted in lpsd_release_expired_skipped_total{version}, and every release's
expiry is exported as lpsd_release_not_after_timestamp_seconds{version,base} (Unix
seconds) for alerting before it happens.

lpsd is stateless apart from its store: run several replicas on one etcd
behind any L4 balancer; each watches the store and swaps its snapshot
atomically. On etcd every replica joins the others as it starts (its
autopilot off or not), under a lease of 15 s: its heartbeat (every 5 s) and
its --region and --deploy-env labels; lpsctl status lists the live replicas
and their labels (on bbolt or memory, the one replica). A rollout scope
naming a region no live replica serves, or a subscription that no report or
served record of the last 24 h has, is refused by SetRollout when it sets
it (FailedPrecondition naming the value and its nearest seen spelling) unless
the request allows unseen values (lpsctl --allow-unseen): such a scope
would match no node. The check reads what an autopilot look reads, no more
(the reports and served records, only when subscriptions are named).

On etcd a replica keeps the reports and served records it read decoded,
and after its first read a watch of each prefix keeps them current, so a
look, status or explain reads one key's revision and waits (at most 2 s)
until the watch has applied every change up to it, instead of reading
the prefix. That needs etcd 3.5.13 or 3.4.31 and later on every member
(progress notifications that never run ahead of their events, as
Kubernetes requires for its watch cache); with an older member, or a
watch that does not catch up in time (an etcd gRPC proxy that drops
progress requests), reads list the keys and fetch the changed values
instead, and try a watch again after 10 minutes (logged).

A region in a scope is always the serving replica's --region, never one
a node claims: the attested identity document carries no location, and
the instance metadata a node could read one from is unsigned, so a VM
could name any region it liked. Nothing a node says about its place
picks it into a scope, a canary seat or a cohort (a node-claimed
location that could only narrow a scope is not offered: it would still
let a VM leave a cohort it belongs in). Deploy each region's replicas
with their own --region, as the Kubernetes manifest, the systemd unit
and make demo do. Status
also says, per base, what each part of the nodes gets now and why (the
incumbent, the candidate at its percentage, a halted release's nodes on the
one below it, superseded releases), from the snapshot nodes are served
from, by the same rules as a node's answer. SIGINT/SIGTERM drain: /readyz answers 503 for --drain-delay
(default 5s) while the listeners still serve, then they stop gracefully.
SIGHUP reloads the node and admin certificates and the admin token file
without dropping a connection: new handshakes present the new certificates,
calls are checked against the new tokens. They are loaded and checked the
same way at start and on SIGHUP: a certificate that has expired or is not
yet valid (more than 5 minutes ahead of this clock) is refused (at start, a
startup error; a stale certificate later in the chain file is a warning),
and on SIGHUP so is a token file whose last line lacks its newline (a file
caught mid-write: write it whole, then rename it over; at start such a file
loads with a warning, there being nothing older to keep). A token file with
an expiry that does not parse is refused at start and on SIGHUP; a token
already past its expiry loads with a warning, and is refused on use. On SIGHUP a
refused file keeps its current value, the log says what was reloaded and what failed, and the
failure is counted in lpsd_reload_failures_total{what} (node-certificate,
admin-certificate, admin-tokens). lpsd_reload_successful is 1 when the last
load (start or SIGHUP) loaded everything, lpsd_reload_last_success_timestamp_seconds
says when that last happened, and lpsd_certificate_not_after_timestamp_seconds{listener}
(node, admin) when the certificate in use expires.
--version prints the version; lpsd_build_info carries it as a metric. The
admin API's calls are counted and timed in lpsd_admin_grpc_server_* (by
method and code). The node-facing listener serves the gRPC health service
(grpc.health.v1, no attested document needed): SERVING exactly when
/readyz answers 200. Check answers once; Watch sends the status, then each
change (the first snapshot is noticed within a second, a drain at once),
and ends its stream on a drain (NOT_SERVING first); at most 32 watches are
open at once, and 4 from one address while per-peer limits are on (more
are ResourceExhausted: a watch holds its connection, so anonymous clients
may not hold many, and one address may not hold them all), and, as every connection, each is closed after about
35 s, so watchers reconnect. At
start lpsd warns when it has no --release-keys (publish then verifies
nothing), and when a key, token or password file (or the file a symlink
there names) is readable by its group or others, or owned by a user other
than root and lpsd's own; every SIGHUP checks the TLS keys and the token
file again.

Exit codes: 0 after a clean shutdown, 1 on a startup or serving error
(logged once, as JSON on stderr), 2 on usage errors (flags that cannot work
together or are missing, printed once as text; a mistyped flag gets a
suggestion, "unknown flag --tls-crt; did you mean --tls-cert?", as lpsctl's
do). The etcd client's warnings
and errors go to lpsd's log with "component":"etcd-client".
*/
package main
