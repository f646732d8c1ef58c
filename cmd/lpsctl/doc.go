/*
lpsctl is the operator CLI of the live-patching service (lpsd): it makes
release signing keys, signs hotfix releases offline, publishes them, steers
their rollouts, revokes them, shows what the service serves and why, lists
the audit log, and renders a node's custom data.

Usage:

	lpsctl <command> [arguments] [flags]

Flags and arguments may come in any order. "lpsctl <command> -h" lists a
command's flags.

# Offline commands

These touch no network.

	lpsctl keys generate --out-private FILE --out-public FILE [--comment TEXT] [--json]

Creates an ed25519 release key pair. The private key is a PEM PKCS #8 file
created with mode 0600; keep it offline. The public key is one line of a key
set file ("nodehotfix-release-ed25519 <base64> [comment]"), the format nodes
trust (opt/azure/containers/aks-node-controller-release-keys.pub). Refuses
to overwrite either file: if one exists nothing is written.

	lpsctl release sign --key FILE --base YYYYMM.DD --version YYYYMM.DD.PATCH \
	    --artifact PLATFORM=PATH,URL [--artifact ...] \
	    (--not-after RFC3339 | --valid-for DURATION) --out FILE|- [--json]

Signs a release envelope with the private key. For each --artifact, PLATFORM
is "os/arch" (linux/amd64, linux/arm64), PATH the local binary, whose
sha256 and size are computed here, and URL the https address nodes download
it from (PATH cannot contain a comma; URL may). The expiry must be in the
future. The envelope is written atomically to --out (mode 0644), or printed
with "--out -".

	lpsctl customdata --config FILE [--pointer FILE] [--nbc-cmd FILE] [--root DIR]

Prints a node's cloud-init custom data (a boothook script) to stdout: the
node config (protojson aks-node-controller-config.json; it must parse), an
optional hotfix pointer to stage at boot, and an optional nbc-cmd.sh
command line. --root prefixes every node path, for demos only.

# Service commands

	lpsctl release publish --envelope FILE
	lpsctl rollout set VERSION --percent N [--subscriptions a,b] [--regions r1,r2] [--if-revision REV]
	lpsctl rollout plan VERSION --steps SIZE:BAKE:REPORTS,... [--margin M] [--max-failure F] [--silent-after D] [--if-revision REV]
	lpsctl rollout pause|resume|halt|complete VERSION [--if-revision REV]
	lpsctl revoke VERSION
	lpsctl status [--watch [--interval 2s]]   (--json --watch: one document per refresh)
	lpsctl explain --vm-id ID --subscription ID [--region R]
	lpsctl audit [--after SEQ] [--limit N]

publish stores a signed envelope as a draft (the service may require a
trusted signature). rollout set grows the percentage of in-scope nodes (it
can never shrink; halt or revoke instead) and, when given, replaces the
subscription or region scope; an empty list ("--subscriptions ”") means
all; a draft starts rolling. pause keeps serving the current nodes but
refuses growth; resume sets it rolling again; halt stops serving it;
complete serves every node in scope. --if-revision makes a change apply only
if the release is still at the revision status showed, so two operators
cannot overwrite each other unknowingly. rollout plan puts a draft or
rolling release on steps (e.g. --steps 20n:30m:20,10:1h:100,100:2h:500: a
canary of exactly 20 nodes, the first 20 in scope to ask, who stay served
through the later steps; then percentages) that lpsd advances by itself once a step's bake time has
passed and the release has the step's reports, and halts by itself when the
health rule finds a regression: the failure rate (failed, fallen back, and
canary nodes silent for --silent-after, default 30m, after taking a seat)
over --max-failure (default 0.2) with 99.5% confidence, or over the base's
control cohort's by more than --margin (default 0.05) with 99.5% confidence;
each automatic change is an audit entry by lpsd with its evidence, and a
pause, halt or revoke by an operator stops it. revoke stops serving a release for
good and makes nodes remove staged copies. status lists releases, rollout
states, the nodes' outcome reports per release (reported, ok, failed, fell
back), the control cohort per base, each planned release's step, health
verdict and when its next step is due, and this lpsd instance's node request
counts. explain shows, release
by release and rule by rule, what the node would be served, from the
snapshot lpsd serves; --region defaults to the instance's. audit lists
changes oldest first, 100 at a time; when a page is full, stderr says how to
get the next.

Connection flags of every service command:

	--server HOST:PORT   lpsd admin listener (default $LPSCTL_SERVER)
	--token-file FILE    admin bearer token (default $LPSCTL_TOKEN_FILE)
	--ca FILE            PEM CAs to verify the server (default: system roots)
	--cert FILE, --key FILE
	                     PEM client certificate and key, for mTLS
	--server-name NAME   name to verify the server certificate for
	--timeout DURATION   time limit of the call (default 30s)
	--json               print JSON instead of text

A token file holds one line, "TOKEN" or "NAME:TOKEN" (the name is ignored
by the client), in the server's token file syntax; lines starting with '#'
are ignored. At least one of --token-file and --cert/--key is required. The
connection is always TLS 1.3 and the token is never sent without it.

# Output

Results go to stdout, diagnostics and errors to stderr, as
"lpsctl <command>: <what failed, naming the flag or file>: <reason>". For
service errors the reason ends in the gRPC code, e.g.
"rollout percentage can only grow: ... (FailedPrecondition)".

With --json, publish, rollout and revoke print a release:

	{"version": "202604.01.3", "base": "202604.01",
	 "state": "draft|rolling|paused|halted|complete", "percent": 10,
	 "subscriptions": ["sub-a"], "regions": [],   // [] means all
	 "revoked": false, "published_at": RFC3339, "updated_at": RFC3339,
	 "revision": 4}

status prints:

	{"region": "eastus", "snapshot_revision": 7,
	 "snapshot_time": RFC3339 or null (no snapshot loaded yet),
	 "releases": [release, ...],                  // in version order
	 "requests": [{"outcome": "served", "count": 12}, ...]}

explain prints:

	{"vm_id": "...", "subscription_id": "...", "region": "" (the instance's),
	 "decisions": [{"version": "...", "base": "...", "included": true,
	                "chosen": true,
	                "rules": [{"rule": "not-revoked", "passed": true,
	                           "detail": "revoked=false"}, ...]}, ...],
	 "pointer": {pointer document the node would get} or null (nothing)}

Rules are evaluated in order (not-revoked, state-serving,
subscription-in-scope, region-in-scope, percentage) up to the first that
fails.

audit prints:

	{"entries": [{"seq": 1, "time": RFC3339, "actor": "token:ops",
	              "action": "publish|rollout-set|plan|pause|resume|halt|complete|revoke|auto-advance|auto-halt",
	              "target": "202604.01.3",
	              "before": {release record} or null (publish),
	              "after": {release record},
	              "evidence": {"verdict": {...}, "step", "due", "rule"}}, ...]}

Entries by actor "lpsd" are the autopilot's; only they carry evidence (the
health verdict with its counts and numbers, the plan step, the rule), and
the table prints their verdict after the change.

keys generate prints {"key_id", "private_key", "public_key"} (the paths);
release sign prints {"out", "key_id", "base", "version", "not_after",
"artifacts": {"linux/amd64": {"url", "sha256", "size"}}}.

# Exit codes

	0  success (also -h)
	1  error: a file could not be read or written, the server is unreachable
	   or failed, or it rejected the input (InvalidArgument)
	2  usage: unknown command, bad or missing flag or argument, no credentials
	3  refused by the rollout state: a percentage decrease, a transition the
	   state machine forbids, a revoked release (FailedPrecondition); a
	   concurrent change won, re-read and retry (Aborted)
	4  authentication failed (Unauthenticated, PermissionDenied; a reader
	   token or certificate asking for a change)
	5  no such release (NotFound)
	6  a different envelope is already published under that version
	   (AlreadyExists): sign the change as a new patch version

A change that is already in effect succeeds: publishing a byte-identical
envelope again, or pausing, resuming, halting or completing a release that
is already in that state, exits 0 and says "nothing changed".

# Files

Read: the --key, --artifact, --envelope, --token-file, --ca, --cert, --key,
--config, --pointer and --nbc-cmd files. Written: --out-private,
--out-public (created, never replaced) and --out (replaced atomically).

# Environment

LPSCTL_SERVER, LPSCTL_TOKEN_FILE and LPSCTL_CA default --server, --token-file
and --ca.
*/
package main
