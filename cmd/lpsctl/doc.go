/*
lpsctl is the operator CLI of the live-patching service (lpsd): it makes
release signing keys and key sets, signs and co-signs hotfix releases and
key-set rotations offline, publishes them, steers their rollouts, revokes
them, shows what the service serves and why, lists
the audit log, verifies and mirrors the release transparency log (see
"Transparency log"), and renders a node's custom data. It does the same for
the signed configurations of components other than the agent (localDNS):
see "Component configurations".

Usage:

	lpsctl <command> [arguments] [flags]

Flags and arguments may come in any order. "lpsctl <command> -h" shows a
command's flags, defaults and examples; "lpsctl help" lists the commands by
group. A mistyped command or flag gets a suggestion. Durations are Go
durations with an optional leading number of days: 90s, 30m, 12h, 30d,
1d12h.

# Offline commands

These touch no network.

	lpsctl keys generate --out-private FILE --out-public FILE [--comment TEXT]

Creates an ed25519 release key pair. The private key is a PEM PKCS #8 file
created with mode 0600; keep it offline. The public key is one line of a key
set file ("nodehotfix-release-ed25519 <base64> [comment]"), the format nodes
trust (opt/azure/containers/aks-node-controller-release-keys.pub). Refuses
to overwrite either file: if one exists nothing is written.

	lpsctl keys init --public-key FILE [--public-key FILE]... [--threshold K] [--version N] \
	    [--log-key VKEY [--witness VKEY]... [--witness-quorum Q] [--max-checkpoint-age D] [--require-log]] \
	    --out FILE|-

Writes the key set file nodes are baked with: the keys of every
--public-key file, of which --threshold (default 1) distinct ones must
sign a release, as key-set version --version (default 1), with the log
policy of the log flags (their verifier keys as text, checked for shape
only). Directives equal to the defaults are not written, so a 1-of-n
version-1 set without a log is the format every agent reads. The file is
replaced atomically (mode 0644), or printed with "--out -".

	lpsctl keys rotate --current FILE [--add-key FILE]... [--remove-key ID]... [--threshold K] \
	    [log flags] (--expires RFC3339 | --valid-for DURATION) --key FILE --out FILE|-
	lpsctl keys rotate --envelope FILE --key FILE [--current FILE] --out FILE|-

Builds and signs the key-set document that follows --current (a key set
file or the newest key-set envelope): version one higher, less each
--remove-key (a key ID), plus the keys of each --add-key file, the current
threshold unless --threshold, the current log policy unless a log flag is
given (then the flags are the whole policy). The expiry is at least 1h
away; once the newest version has expired nodes refuse the chain and
provision with their baked agent, so sign the next in time. A link is
valid only when signed by the threshold of the current version's keys and
by its own threshold of its own keys: --envelope adds --key's signature to
an existing document instead. Either way it prints how many more of each
set must sign (of the current set only with --current) and the command to
co-sign.

	lpsctl keys verify --root FILE [LINK...]

Walks the key-set envelopes LINK... in order from the key set file --root,
as a node does (at most 16; only the last link's expiry is checked), and
prints the resulting set, or fails (exit 1) naming the first link that
does not verify and why (below-threshold, rollback, version-gap, expired,
...).

	lpsctl keys publish --envelope FILE --reason TEXT
	lpsctl keys list

publish stores a fully signed key-set document as the next link of the
chain lpsd serves; nodes walk to it on their next provisioning, and from
then on releases verify against it. It is appended to the transparency
log. Refused (exit 3): a link under either threshold, one that does not
follow lpsd's newest version, and one whose policy requires a
transparency log lpsd keeps no checkpoint of (start lpsd with --log-key
and its --witness list first). list prints lpsd's root (--release-keys)
and every published version, oldest first (-o json: {"key_sets": [...]}).

	lpsctl release sign --key FILE --base YYYYMM.DD --version YYYYMM.DD.PATCH \
	    --artifact PLATFORM=PATH,URL [--artifact ...] \
	    (--not-after RFC3339 | --valid-for DURATION) --out FILE|- [--skip-version-check] \
	    [--launch-records]
	lpsctl release sign --envelope FILE --key FILE --out FILE|-

Signs a release envelope with the private key. For each --artifact, PLATFORM
is "os/arch" (linux/amd64, linux/arm64), PATH the local binary, whose
sha256 and size are computed here, and URL the https address nodes download
it from (PATH cannot contain a comma; URL may). The expiry must be at least
1h away (publish, a canary's bake and clock skew between the signer and the
nodes take that long); from it on, nodes refuse the release and lpsd stops
serving it. The version stamped into each artifact (make build's
-X main.version) is read from the ELF file, never run: this machine holds
the private key, and running a binary here would hand it to whoever built
it. Nodes run the binary with "version" before staging it and refuse any
other answer, so signing is refused unless the stamp is --version; a binary
for any architecture can be checked. One without the stamp (stripped, or
not built by make build) or not an ELF file is refused too, naming
--skip-version-check, which signs it unchecked.
--launch-records signs the declaration that the release's agent keeps
launch's protocol (this agent does: run as a hotfix, its provision records
its preflight at once and never starts the bootstrap unrecorded), so a
launch that ran it and found no launch record within a minute kills it and
provisions with the baked agent in the same boot. Without it such a hang
holds the node until the CSE's timeout. An agent that predates the
declaration refuses a release carrying it (an unknown signed key), which
counts as refusedIntegrity: sign it only for a base whose baked agent
verifies it.
The envelope is written atomically to --out (mode 0644), or printed with
"--out -".
With --envelope, sign co-signs an existing envelope (a release, a
component configuration or a key-set document) with --key instead,
keeping its payload and signatures: the holders of a key set's threshold
sign one after another, offline, in any order, each passing the file on.
It takes none of the flags that describe a new release, refuses a key that
has already signed, and verifies no signature.

	lpsctl component sign --key FILE --component NAME --version N --config FILE \
	    (--not-after RFC3339 | --valid-for DURATION) --out FILE|-

Signs a component configuration with a release key (see "Component
configurations").

	lpsctl customdata --config FILE [--pointer FILE] [--nbc-cmd FILE] [--root DIR]

Prints a node's cloud-init custom data (a boothook script) to stdout: the
node config (protojson aks-node-controller-config.json; it must parse), an
optional hotfix pointer to stage at boot, and an optional nbc-cmd.sh
command line. --root prefixes every node path, for demos only.

	lpsctl completion bash|zsh|fish|powershell

Prints a shell completion script, e.g. "source <(lpsctl completion bash)".
It completes commands and flags, and a VERSION argument with the releases
of the lpsd that the environment (LPSCTL_SERVER and the rest) reaches, if it
answers within 2 seconds; rollout pause, resume, halt and complete offer only
the releases the rollout state machine lets them move (resume: a draft,
paused or halted one), and rollout skip only rolling releases with a plan
step to skip to; never a revoked one.

# Service commands

	lpsctl release publish --envelope FILE --reason TEXT
	lpsctl component publish --envelope FILE --reason TEXT
	lpsctl component list
	lpsctl rollout set VERSION [--percent N] [--subscriptions ID,...] [--regions R,...] [--deploy-envs E,...] [--allow-unseen] --reason TEXT
	lpsctl rollout plan VERSION --steps SIZE:BAKE:REPORTS,... [--from-step N] [--dry-run] [--margin M] [--max-failure F] [--max-silent F] [--max-delivery F] [--silent-after D] [--deadline D] --reason TEXT
	lpsctl rollout plan COMPONENT@VERSION --steps PERCENT:BAKE,... [--dry-run] --reason TEXT
	lpsctl rollout skip VERSION --reason TEXT
	lpsctl rollout pause|resume|halt|complete VERSION --reason TEXT
	lpsctl revoke VERSION --reason TEXT
	lpsctl status [--watch [--interval D]]
	lpsctl explain --vm-id ID --subscription ID [--region R] [--deploy-env E] [--component NAME]
	lpsctl audit [--target VERSION] [--actor ID] [--action ACTION] [--since TIME|DURATION] [--after SEQ] [--limit N]
	lpsctl nodes [--release VERSION] [--base BASE] [--outcome OUTCOME] [--subscription ID] [--since TIME|DURATION] [--limit N] [--page TOKEN] [--all]
	lpsctl history VERSION [--changes] [--limit N]

nodes lists the nodes behind status's counts (the admin API's ListNodes,
which a reader may call): per release, one per vmId by its worst outcome
(failed, fellBack, refusedIntegrity, silent, refusedDelivery, ok,
notApplicable, pending; --outcome refused is both refusals, and several
outcomes may be joined by commas: --outcome failed,fellBack,refusedIntegrity
is every VM a bad release reached), what it ran, its exit code, why (the
fallback reason, a refusal's decision and download outcome), its boot and
when, and the lpsd replica that served it (host name and pid; "-" when
only its report says it had the release), worst first; 100 a page, and a full page says on stderr how to get
the next (--page); --all follows every page (1000 nodes a call unless
--limit says otherwise), so --release V --outcome
failed,fellBack,refusedIntegrity --all -o json is every VM a bad release
reached and hurt. A page token is where its page ended, so nodes that
report between pages do not shift the next page: every node is listed
once, except one whose outcome changed between pages, which may be listed
under both or neither (the dashboard's nodes.csv is one assessment).
Above the nodes it sums up the commonest outcomes and
reasons worse than ok over every matching node (top_reasons in JSON:
outcome, reason, nodes). An unknown --outcome is a usage error (exit 2);
an unknown --release is not found (exit 5).

history shows a release's recorded assessment (the admin API's
GetHistory, which a reader may call), oldest first: at each point its
nodes by outcome, its failure rate beside its baseline's (BASELINE is the
incumbent a planned release is compared with, "baked" or a version, or
"control", the base's nodes that ran the baked agent, without a plan),
and the rollout's state (with its reason code, revoked or expired),
percentage, plan step and health verdict then. The deciding replica
records a point after a look that changed any of those, while the
release is served and once when it stops: of a minute's looks it keeps
the last and each after which the rollout moved (a halt resumed within
the minute stays), at each look's time; the store
keeps them for the release's life and 90 days after, so every replica
shows the same history after restarts, after its reports are pruned and
after a revoke. Nothing is recorded while lpsd runs with
--autopilot-interval=0, and history says so when a release has no point.
--limit N (default 1440, a day at one a minute; at most 10000) shows the
newest N; --changes only the points where the rollout moved (state,
percentage, step, reason, health, revoked, expired), with the first and
the last. -o json prints

	{"version": "202604.01.3", "kept": true,   // false: the store keeps none
	 "unreadable": 0,                          // points this lpsd cannot decode, left out
	 "points": [{"time": RFC3339, "state": "rolling", "percent": 20,
	             "step": 0 or null (no plan), "steps": 3, "reason": "",
	             "revoked": false, "expired": false, "health": "healthy" ("": no plan),
	             "counts": {...}, "seated": 20, "failure_rate": 0.05 or null,
	             "baseline": "baked", "baseline_counts": {...},
	             "baseline_failure_rate": 0.04 or null}, ...],
	 "failure_rate_definition": "failure rate = ..."}

An unknown release is not found (exit 5).

Every command that changes something requires --reason TEXT (at most 1024
bytes, no control characters), stored in the audit log with the change and
shown by audit: release, component and keys publish, rollout set, plan,
skip, pause, resume, halt and complete, and revoke. A script may set
LPSCTL_REASON instead (--reason wins). Without either, or with a blank
one, the command is a usage error (exit 2) saying how to give one, and
nothing is sent; a dry run (rollout plan --dry-run) changes nothing and
needs none. When a change's answer does not arrive (Ctrl-C, --timeout,
a lost connection), stderr says it may or may not have been applied and how
to check. The rollout commands take --if-revision REV: the change
applies only if the release is still at the revision status showed, so two
operators cannot overwrite each other unknowingly (exit 3 if it moved).

publish stores a signed envelope as a draft (the service may require
trusted signatures). An lpsd configured with release keys refuses an
envelope signed by fewer of them than their threshold (exit 3), naming the
key IDs that have signed and how many more must: co-sign it with
"lpsctl release sign --envelope FILE --key FILE --out FILE" and publish
the result.

rollout set grows the percentage of in-scope nodes (it can never shrink;
halt or revoke instead) and, when given, replaces the subscription or
region scope, or with --deploy-envs the deploy-environment scope (lpsd
--deploy-env labels: prod, staging; --deploy-env is accepted too).
Subscriptions are GUIDs, regions lpsd region labels (eastus);
an empty list (--subscriptions "") means all; anything else is refused,
naming the value, and so is a blank one (" " or ","), which a script's unset
variable would make. Repeating a flag adds to its list. A
draft starts rolling. The scope of a paused or complete release changes
without stopping it (--percent is then left out: it keeps its percentage).
--subscription and --region are accepted for --subscriptions and --regions.
A scope must match nodes that exist: a subscription no node of was seen in
the last 24 h (no stored report or served record of it) or a region no
live replica serves from (its lpsd --region; status lists them) is refused
(exit 3), naming each such value and the nearest seen spelling
(westeuropee: did you mean westeurope?), and nothing changes; --allow-unseen
sets it anyway (a cluster not provisioned yet, a replica not started yet).
Only the values the command sets are checked, so a change of --percent
alone is not. rollout plan sets no scope, so it checks none: a plan
whose scope reaches nobody is paused (stalled) at its step's deadline.

rollout plan puts a draft or rolling release on steps (e.g. --steps
20n:30m:20,10:1h:100,100:2h:500: a canary of exactly 20 nodes, the first 20
in scope to ask, who stay served through the later steps; then percentages)
that lpsd advances by itself once a step's bake time has passed and the
release has the step's reports, and halts by itself when the health rule
finds a regression (docs/closed-loop.md): every node served the release
counts, by one outcome; the failure rate (failed, fallen back, refused as
signed) over --max-failure (default 0.2) with 99.5% confidence, refusals as
signed over 5%, the silent rate (served nodes that did not report within
--silent-after, default 30m) over --max-silent (default 0.2), the
refused-for-delivery rate over --max-delivery (default 0.2), or any of them
over the baseline's (the base's incumbent on nodes not served the release)
by more than --margin (default 0.05) with 99.5% confidence. A step that
still lacks the evidence to advance --deadline (default 6h) after its bake
pauses the release, reason inconclusive (stalled if it reached no node).
Each automatic change is an audit entry by lpsd with its evidence and reason
code; a pause, halt or revoke by an operator stops it.

A plan skips no step unless told to. On a release already past a step (a
canary of nodes once any percentage is served; a percentage below the
release's, since a percentage never shrinks), rollout plan is refused
(exit 3), naming the step, why, and the --from-step that starts the plan
after it: after "rollout set --percent 5", a plan starting with a 20n canary
says to add --from-step 2. A step at the release's own percentage is not
past: "--steps 50:1m:3,100:1h:10" on a release at 50% bakes at 50% for a
minute before it goes on. --from-step N (counted from 1, as status and the
text output count; from_step in the API, also from 1, 0 meaning the first)
starts the plan at step N, skipping the steps before it; a start step the
release is past is refused the same way. --dry-run sends the plan with the
API's dry_run: lpsd checks it by the same rules (a refusal is the same
refusal and exit code) and answers with the release as the plan would leave
it, changing nothing and writing no audit entry. Its text prints every step
with its size, bake, reports, the soonest it can start and end and its
DEADLINE (a skipped step says so), when the release can complete at the
soonest, the baseline (the ceiling --max-failure; the --margin over the
release's base's incumbent, named as of now: the base's previous complete
hotfix or the baked agent, measured on the base's nodes not served the
release; the silent and refused-for-delivery ceilings; the floor: the
plan's smallest REPORTS, the fewest judged), and the deadlines (a node
served the release that has not reported within --silent-after counts as
silent; a step still without enough evidence at its DEADLINE, the plan's
deadline after its bake, pauses the release as inconclusive; nothing is
served after the envelope's not_after). rollout plan without --dry-run prints where the plan starts
and the release; either warns when the envelope expires before the plan
can complete. An lpsd from before dry runs ignores the field and applies
the plan: lpsctl then prints what was applied and fails (exit 1), naming
rollout pause to stop it.

rollout skip ends a rolling release's current plan step now, whatever its
bake time, reports and health, and starts the next one (steps a percentage
set by hand is already past are passed over too). It gives up the step's
evidence, so --reason is required (exit 2 without it); it takes
--if-revision like the other rollout commands and is audited as "skip". At
the plan's last step, on a paused, halted or complete release, or one
without a plan it is refused (exit 3), naming the command that works
(rollout complete, resume or plan).

pause keeps serving the current nodes but refuses growth; resume sets a
paused or halted release rolling again, or complete again when it was
halted while complete; halt stops serving it; complete serves every node
in scope. Resuming a halted release opens a fresh evidence window: only
reports lpsd accepts from the resume on count for its health and its
plan's report minimums (and only canary seats taken from then on can count
as silent), so the reports that led to the halt cannot halt it again. The
release's evidence_since says when (text: "counting reports accepted
since ..."), and the resume's audit entry shows it ("fresh evidence from
..."). Resuming a paused release keeps its window. Asking for the state a release is already in
succeeds and says "nothing changed". Each refusal names a command that
works from the release's state.

revoke stops serving a release for good and makes nodes remove staged
copies; revoking again changes nothing.

freeze holds every rollout of the fleet (releases and component
configurations) until unfreeze: lpsd refuses rollout set, plan, skip,
resume and complete (exit 3, ErrorInfo reason FROZEN, naming who froze it,
since when and why, and how to thaw), and its autopilot advances no plan
step; halts, pauses and revocations go on, the autopilot still halts a
regressing release, publishing drafts and dry runs work, and nodes keep
being served what they are served. A freeze lpsd cannot read counts as
one. Both need --reason and are audited (actions freeze and unfreeze,
target fleet); --if-revision takes the freeze's revision from status.
status prints FROZEN under its header while frozen, the dashboard a banner
on every page, and lpsd_rollouts_frozen is 1 (alert LpsdRolloutsFrozen
after a day). After unfreeze, each plan step that came due meanwhile
advances at the autopilot's next look.

lpsd may enforce a rollout policy (lpsd --policy-*; status prints it
under its header): a smallest canary, a largest step, a shortest bake.
A change it refuses exits 3 (ErrorInfo reason POLICY) naming the rule and
what would comply. Under its two-person rule, leaving or replanning a
canary early, serving more nodes without a canary having run,
resuming a halted release and widening a serving release's scope wait for
a second operator: the first ask is recorded (audit request-approval) and
exits 3 (ErrorInfo reason APPROVAL_REQUIRED) saying so; status lists it
under AWAITING A SECOND OPERATOR with the change asked for; another
operator (another token or certificate) running the same command (the
same change) within an hour makes it, and its audit entry names who
asked. rollout plan --dry-run says when the plan would wait. When lpsd
runs with --advance-window, status's policy line says when plan steps
advance ("plan steps advance only Mon-Fri 09:00-17:00 Europe/Dublin";
-o json: policy.advance_window), and explain's plan rule says it beside
the next step's due time: a step due outside the window waits for its
next opening, while halts and pauses happen any time.

status lists the replicas serving from the store and the labels each
carries (REGION, DEPLOY ENV: what region and deploy-environment scopes
match; on a store one lpsd holds alone, that one) and how old each one's
heartbeat was by the answering replica's clock (CLOCK: "beat 2s ago";
"ahead 1m0s" for a heartbeat from the future; marked * when its clock is
behind by more than 15 s, so that the looks read the times that replica
stamps on reports and served records later by up to 10 minutes: fix its
time sync), releases, rollout
states, the autopilot's REASON for a pause or halt (stalled: a step's
deadline passed and the release reached no node), expiry (NOT AFTER;
EXPIRED once passed, when lpsd serves the release to nobody whatever its
rollout says), the nodes' outcome reports per release (reported, ok,
failed, fell back, silent), what is SERVED NOW, the control cohort per
base, each planned release's step, health verdict and when its next step
is due, and this lpsd instance's node request counts. --watch redraws it
until interrupted.

SERVED NOW is one table of what each part of each base's nodes gets now
and why, from the snapshot lpsd serves and by the rules explain shows for
one node: per cohort (NODES: the subscriptions the base's scopes name
alike, or all or the other subscriptions, @ the replicas' labels serving
them), each release of the base newest first and then the baked agent,
with its SHARE of the cohort (a release's percentage of the nodes no newer
release takes; percentages of different releases are independent),
its ROLE (incumbent: complete; candidate: rolling or paused at N%, plus
its canary seat holders; canary: seat holders only; superseded: a newer
release serves every node it would; halted, draft, expired, revoked,
out-of-scope: served to none of the cohort, WHY naming what its nodes get
instead, the incumbent most often; baked), its FELL BACK count and its
FAILURE RATE with the counts, whose definition follows the table:
(failed + fell back + refused as signed) / judged nodes, as the health rule
counts them.

explain shows, release by release and rule by rule, what the node would be
served, from the snapshot lpsd serves, and summarises the pointer document
(each base's version, its signed release, the revocations); -o json has the
whole document. For each base it says what its nodes verify: the newest
key set's threshold and log policy for nodes that walk the chain, one
signature and no log for images baked before release trust v2, and how
many nodes of each kind this lpsd instance answered. --region and
--deploy-env default to the instance's. --component NAME explains that component's configurations instead. --vm-id and
--subscription must be GUIDs (a VM's ID as in its attested document): any
other value is a usage error (exit 2), as it describes no node.

audit lists changes oldest first, 100 at a time, optionally only those of
one release (--target), one actor (--actor, e.g. token:ops, cert:alice,
lpsd), one action (--action: publish, rollout-set, plan, skip, pause,
resume, halt, complete, revoke, rotate-keys, restore-log, freeze,
unfreeze, request-approval, auto-advance, auto-halt, auto-pause, expire; any other is a
usage error) or since a time (--since 2026-12-01T00:00:00Z, or a duration ago:
--since 2h). When more may follow, stderr says the command for the next
page. An operator's actor carries its credential's kind: when --actor ops
matches nothing and token:ops or cert:ops would, stderr says so.

Connection flags of every service command:

	--server HOST:PORT   lpsd admin listener (default $LPSCTL_SERVER)
	--token-file FILE    admin bearer token (default $LPSCTL_TOKEN_FILE)
	--ca FILE            PEM CAs to verify the server (default $LPSCTL_CA, else the system roots)
	--cert FILE, --key FILE
	                     PEM client certificate and key, for mTLS
	--server-name NAME   name to verify the server certificate for
	--timeout DURATION   time limit of the call (default 30s)

A token file holds one line, "TOKEN", "NAME:TOKEN" or
"NAME:ROLE:TOKEN[:EXPIRES]" (all but the token are ignored by the client),
in the server's token file syntax; a token past its expiry is refused
(exit 4) with a message naming it and when it expired; lines starting with '#'
are ignored. At least one of --token-file and --cert/--key is required. The
connection is always TLS 1.3 and the token is never sent without it. A
reader token or certificate can run status, explain and audit; changes need
an operator one.

# Transparency log

lpsd appends every published release envelope, revocation and key-set
version to an append-only Merkle log and serves it read-only as C2SP
tlog-tiles. These commands read it over plain http(s) or from a directory,
with no admin credentials (operators' guide, with witnesses, cron
monitoring and backup and restore: docs/transparency-log.md):

	lpsctl log (--url URL | --dir DIR) --log-key VKEY [--witness VKEY ... [--witness-quorum Q] [--max-age D]]
	           [--root FILE] [--state FILE] [--since INDEX]
	lpsctl log export --url URL --log-key VKEY DIR

log fetches the checkpoint (a signed note) and accepts it only with a valid
signature by --log-key, the log's note verifier key ("name+hash+base64",
whose name is the log's origin). With --witness (a cosignature/v1 key,
repeatable) it also requires cosignatures by --witness-quorum distinct
witnesses (default: all given) of which that many are at most --max-age
old (default 24h) and not more than 5 minutes in the future, as nodes
do; otherwise it exits 1 naming "no-quorum" or "stale". With --state, it
proves the checkpoint extends the one kept there, by a consistency proof
from the log's hash tiles, then replaces the file with the new checkpoint
once everything verified; the first run with a new file trusts the log as
it is and says so on stderr, and so does a run without --state. Every
record is checked against the tree's leaf hash before it is listed, so a
server cannot add, drop or alter one. It lists each record (from --since
on) with its index and kind: a release with its version and base; a
revocation with the version and time; a key set with its version,
threshold, the IDs of its keys and its log policy; "unknown" with the
reason for anything else.

Signers are verified only with --root, the baked key set file nodes trust
(as keys verify reads it). log then reads every record, whatever --since,
and walks the key-set records the log holds from that set as a node walks
its chain: each link must be signed by the threshold of the set before it
and by its own threshold, with the next version (its expiry is not held
against it: history may have expired since; the newest set's expiry is
reported). Each release is checked against the key set in force before it
in the log: its CHECK says which of that set's keys really signed it and
whether they met the threshold. Statuses: "verified"; "below-threshold"
(a release with fewer valid signatures than the threshold: lpsd publishes
none, so someone went around it); "bad-link" (a key-set record that does
not verify as the next link; the chain stays at the set before it);
"root" (the key-set record of --root's own version, with its keys and
threshold) or "root-mismatch" (the same version with other keys or
threshold); "before-root" (a record older than --root's version, which it
cannot vouch for). Give the version-1 key file, or a version the log
holds. Without --root, releases and key sets are "unverified": the key IDs
their envelopes name are claims, and lpsctl log does not print them.

A record below-threshold, bad-link or root-mismatch, or of unknown kind, is
flagged: the listing is printed in full, "N records FLAGGED" ends it, and
log exits 8 (flagged records before --since are walked but not counted).
The checkpoint is still kept in --state, so the next run compares with it.
A run from cron with --state and --root alerts on any release nobody
expected, any release or key set not signed as it must be, and a fork:

	lpsctl log --url https://lpsd.example/log/ --log-key "$(cat log.vkey)" \
	    --witness "$(cat w1.vkey)" --witness "$(cat w2.vkey)" \
	    --root release-keys.pub --state /var/lib/lpsmon/log.state -o json

A fork is a checkpoint, signed by the log key, that the kept one is not a
prefix of (the same size with another root hash, or a larger tree without a
consistency proof): log prints both checkpoints, signed notes included, as
evidence, leaves --state unchanged and exits 7. A checkpoint smaller than
the kept one (a lagging mirror, or a rollback) exits 1 and leaves --state
unchanged too. Data the log key does not vouch for (a tile or an entry
bundle that does not match the checkpoint, an oversize response) exits 1,
naming the file and "bad-tile", "bad-entries", "bad-checkpoint" or
"too-large". Each request times out after 30s.

log export writes the log at --url into DIR as static files (checkpoint,
tile/<L>/<N>[.p/<W>], tile/entries/<N>[.p/<W>]) that any web server can
serve and log --dir reads. Every tile and bundle is verified before it is
written and the checkpoint is written last; each file is replaced
atomically. When DIR holds an earlier export, the log must extend it (a fork
exits 7 and writes nothing) and only the new tiles are written.

log status asks the lpsd replica --server reaches for its log: the records
its store holds, the size of the cosigned checkpoint it keeps, how many of
its witnesses answered since it started, and the size their answers bound
the log nodes were shown by. While too few answered to tell (UNVERIFIED),
or the store holds fewer records than that (BEHIND: restored from an older
backup, or lost writes), lpsd refuses every publish, revoke and key-set
publish (exit 3, ErrorInfo reason LOG_UNVERIFIED or LOG_BEHIND), since each
would append a record and could fork the log at a size witnesses and nodes
already know. Halting a release appends nothing and stays allowed. A
reader may run it.

log restore re-appends, from an export (log export, run from cron), the
records the restored store lost: it verifies the export as log --dir does,
asks lpsd its log's size, and sends the records from there to the export's
end, 32 a call, each call with the proof that they lead to the export's
checkpoint; lpsd appends nothing unless they extend its log to a tree its
log key signed (exit 3 otherwise, nothing appended). Each record is
appended with its change (a release as a draft, a revocation, a key-set
version) and an audit entry, action restore-log. Run again, it goes on
where it stopped; with --dry-run it lists the records and changes nothing.
When lpsd still refuses appends after the whole export is in (the export is
older than what the witnesses cosigned), it exits 3 and says so: find a
newer export, or see "When records are lost" in docs/transparency-log.md.
An export of another log (another origin) exits 1.

# Output

Results go to stdout, diagnostics and errors to stderr, as
"lpsctl <command>: <what failed, naming the flag or file>: <reason>", e.g.
`lpsctl rollout set: --percent "400": want a whole number from 0 to 100`.
For service errors the reason ends in the gRPC code, e.g. "rollout
percentage can only grow: ... (FailedPrecondition)". Strings from the
service are printed with control characters quoted.

-o text (the default) is for people; -o json and -o yaml print documents
with the same fields (--json is -o json). publish, rollout and revoke print
a release:

	{"version": "202604.01.3", "base": "202604.01",
	 "state": "draft|rolling|paused|halted|complete", "percent": 10,
	 "subscriptions": ["3f2b9c1d-..."], "regions": [],   // [] means all
	 "revoked": false, "not_after": RFC3339, "expired": false,
	 "published_at": RFC3339, "updated_at": RFC3339, "revision": 4,
	 "served": 0, "unchanged": true,   // unchanged only when already so
	 "evidence_since": RFC3339,        // only once a resume after a halt opened
	                                   // a fresh evidence window
	 "halted_from": "complete"}        // halted only: the state it was halted from

rollout plan adds "preview" (and, with --dry-run, "dry_run": true; the
release is then as the plan would leave it, at its current revision):

	{"steps": [{"earliest_start": RFC3339 or null (skipped),
	            "earliest_end": RFC3339 or null,
	            "deadline": RFC3339 or null}, ...],       // per plan step
	 "earliest_complete": RFC3339,
	 "baseline": {"max_failure_rate": 0.2, "margin": 0.05, "floor": 20,
	              "incumbent": "baked" or "202604.01.2",
	              "max_silent_rate": 0.2, "max_delivery_rate": 0.2,
	              "compared_with": "the incumbent of base 202604.01 (...), ..."}}

rollout skip adds "skipped_step": the index (from 0) of the step it left.

status prints:

	{"region": "eastus", "snapshot_revision": 7,
	 "snapshot_time": RFC3339 or null (no snapshot loaded yet),
	 "releases": [release, ...],       // in version order, each also with
	                                   // "counts"; a planned one with "plan",
	                                   // "health" and "canary_seats"
	 "control": [{"base": "202604.01", "counts": {...}}, ...],
	 "requests": [{"outcome": "served", "count": 12}, ...],
	 "replicas": [{"id": "lpsd-7c9f-1", "region": "eastus", "deploy_env": "prod",
	               "last_heartbeat": RFC3339 or null, "self": true,
	               "heartbeat_age_seconds": 2.1 or null, "clock_corrected": false}, ...],
	 "served_now": [{"base": "202604.01", "omitted_cohorts": 0,
	                 "cohorts": [{"subscriptions": [...], "other_subscriptions": true,
	                              "places": [{"region": "eastus", "deploy_env": "prod"}],
	                              "shares": [{"version": "202604.01.3" ("" the baked agent),
	                                          "state": "rolling", "percent": 10,
	                                          "role": "candidate", "why": "...",
	                                          "instead": "" (for a share of 0: who gets its nodes),
	                                          "canary_seats": 0, "fell_back": 2,
	                                          "failures": 3, "judged": 50,
	                                          "failure_rate": 0.06 or null}, ...]}]}, ...],
	 "failure_rate_definition": "failure rate = ...",
	 "freeze": {"frozen": false, "reason": "...", "actor": "token:ops",
	            "since": RFC3339, "revision": 9} or null (a store without one)}

freeze and unfreeze print {"freeze": {...as above}, "unchanged": false}.

A release's plan is

	{"steps": [{"percent": 0, "nodes": 20, "bake_seconds": 1800,
	            "min_reports": 20}, {"percent": 10, ...}, ...],
	 "step": 0,                        // the current step: an index into steps
	 "step_since": RFC3339, "margin": 0.05, "max_failure_rate": 0.2,
	 "silent_after_seconds": 1800}

Every "step" in JSON and YAML (a plan's, an audit entry's evidence, the
release records in before and after) is that 0-based index, so
plan.steps[plan.step] is the current step; text and the dashboard, for
people, count from 1 and show the total: "step": 0 of three steps is
"1/3" in status and "step 1/3" in explain. The index is what lpsd stores
and its audit log keeps, so it is not renumbered for output.

With --watch, one document per refresh and nothing between them (each
YAML document starts with "---").

explain prints:

	{"vm_id": "...", "subscription_id": "...", "region": "" (the instance's),
	 "decisions": [{"version": "...", "base": "...", "included": true,
	                "chosen": true,
	                "rules": [{"rule": "not-revoked", "passed": true,
	                           "detail": "revoked=false"}, ...]}, ...],
	 "pointer": {pointer document the node would get} or null (nothing),
	 "trust": [{"base": "...", "keyset_version": 3, "threshold": 2,
	            "log_required": true, "nodes_declared": 12,
	            "nodes_legacy": 3, "detail": "..."}, ...]}

Rules are evaluated in order (not-revoked, not-expired, state-serving,
subscription-in-scope, region-in-scope, deploy-env-in-scope when the
rollout has that scope, then canary-seat or percentage) up to the first
that fails. With --component the document also has "component",
"deploy_env" and "config": the config the node would be served (with its
envelope), or null; decisions are named <component>@<version>.

component publish, rollout and revoke of a component configuration, and
each entry of component list's "component_configs", print:

	{"id": "localDNS@3", "component": "localDNS", "version": 3,
	 "state": "...", "percent": 10, "subscriptions": [], "regions": [],
	 "deploy_envs": ["staging"], "revoked": false, "not_after": RFC3339,
	 "expired": false, "published_at": RFC3339, "updated_at": RFC3339,
	 "revision": 5, "plan": {...} (timed: no margin, nodes or reports),
	 "config": {the configuration it signs}, "unchanged": true}

component list prints {"deploy_env": "staging", "component_configs": [...]};
component sign prints {"out", "key_id", "id", "not_after", "config_bytes"}.

audit prints:

	{"entries": [{"seq": 1, "time": RFC3339, "actor": "token:ops",
	              "action": "publish|rollout-set|plan|skip|pause|resume|halt|complete|revoke|rotate-keys|auto-advance|auto-halt|auto-pause|expire",
	              "target": "202604.01.3", "reason": "ICM 1234",
	              "before": {release record} or null (publish),
	              "after": {release record},
	              "evidence": {"verdict": {...}, "step", "due", "rule"}}, ...],
	 "next_after_seq": 57, "more": false}

Entries by actor "lpsd" are the autopilot's; only they carry evidence (the
health verdict with its counts and numbers, the plan step, the rule), and
the table prints their verdict after the change. An expire entry says a
release's envelope passed its not_after while it was served: its before
and after records (expiry_recorded set), its reason (the part of its
base's nodes it was served to, and what they get now) and as evidence
{"not_after", "cohorts": [{"subscriptions" (none: every other), "places":
[{"region", "deploy_env"}], "before": [{"version", "percent"}], "after":
[...]}]} ("baked" is the baked agent). lpsd writes it once per release:
on etcd the elected replica, marking the release in the same
compare-and-swap, so no replica or restart writes a second.

log prints:

	{"origin": "nodehotfix.example/log", "size": 301, "root_hash": "<base64>",
	 "kept": {"origin", "size", "root_hash"} or null (first use, no --state),
	 "first_use": true,
	 "witness_quorum": 2,
	 "cosignatures": [{"witness": "<name>", "key_hash": "<8 hex>", "time": RFC3339}, ...],
	 "root_version": 1,                                  // --root only
	 "key_set": {"version", "threshold", "expires", "keys", "log"} or null (no --root),
	 "key_set_expired": true,                            // only when it has
	 "flagged": 0,
	 "records": [{"index": 0, "kind": "release|revocation|keyset|unknown",
	              "hash": "<base64 leaf hash>",
	              "version": "202604.01.3" (a key set's: "2"),
	              "base": "202604.01", "not_after": RFC3339,   // release
	              "time": RFC3339,                             // revocation
	              "threshold": 2, "keys": ["<key ID>", ...],
	              "expires": RFC3339, "log": {"key", "witnesses", "quorum",
	                "max_checkpoint_age", "required"},         // key set
	              "check": {"status": "verified|below-threshold|bad-link|root|root-mismatch|before-root",
	                        "key_set_version": 1, "threshold": 2,
	                        "signers": ["<key ID>", ...],      // that set's keys that signed
	                        "own_signers": [...],              // a link's own keys that signed
	                        "problem": "..."},                 // release, key set; --root only
	              "flagged": false,
	              "problem": "..."}, ...]}                     // unknown

On a fork (exit 7) it prints instead {"fork": {"reason": "...",
"kept": {"origin", "size", "root_hash", "note"}, "served": {...}}}, each
with its signed note. log export prints {"dir", "origin", "size",
"root_hash", "previous_size" (null on a first export), "tiles", "bundles"}.
log status prints {"origin" ("" without a log key), "size",
"checkpoint_size", "witnesses", "witness_quorum", "witnesses_answered",
"verified", "witnessed_size", "witness" (whose answer it is), and
"appends_refused"}. log restore prints {"origin", "from" (the
log's size before), "size" (after), "checkpoint_size" (the export's),
"dry_run", "records": [{"index", "kind": "release|revocation|keyset",
"target": "202604.01.3|keyset@2"}, ...]}.

keys generate prints {"key_id", "private_key", "public_key"} (the paths);
release sign prints {"out", "key_id", "base", "version", "not_after",
"artifacts": {"linux/amd64": {"url", "sha256", "size"}}}.
release sign --envelope prints {"out", "key_id", "type":
"release|component-config|key-set", "id"}. keys init and keys verify
print a key set:

	{"out": "root.pub" (init), "version": 2, "threshold": 2,
	 "expires": RFC3339 (not for a baked set), "keys": ["<key ID>", ...],
	 "log": {"key", "witnesses": [...], "quorum", "max_checkpoint_age": "1d",
	         "required"} (only with a log policy)}

keys rotate prints the same for the new version, with "signers" (key IDs
of either set whose signature verifies), "missing_own" and, with
--current, "missing_current" (how many more of each set must sign).

# Examples

The whole life of a hotfix, as a test runs it against a real lpsd (with
LPSCTL_SERVER, LPSCTL_TOKEN_FILE and LPSCTL_CA set):

	lpsctl keys generate --out-private release.key --out-public release.pub
	lpsctl release sign --key release.key --base 202604.01 --version 202604.01.3 \
	    --artifact linux/amd64=./aks-node-controller,https://cdn.example/aks-node-controller-202604.01.3 \
	    --valid-for 30d --out 202604.01.3.json
	lpsctl release publish --envelope 202604.01.3.json --reason "ICM 1234: kubelet flag"
	lpsctl release publish --envelope 202604.01.3.json --reason "ICM 1234: a retry"
	lpsctl rollout set 202604.01.3 --percent 5 --regions eastus --reason "first region"
	lpsctl rollout plan 202604.01.3 --steps 20n:30m:20,10:1h:100,100:2h:500 --from-step 2 --dry-run
	lpsctl rollout plan 202604.01.3 --steps 20n:30m:20,10:1h:100,100:2h:500 --from-step 2 --silent-after 45m --reason "ICM 1234"
	lpsctl rollout skip 202604.01.3 --reason "10% looked fine for a day"
	lpsctl status
	lpsctl status -o yaml
	lpsctl explain --vm-id 6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b --subscription 8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a
	lpsctl rollout pause 202604.01.3 --reason "waiting for the weekend"
	lpsctl rollout pause 202604.01.3 --reason "a pause again changes nothing"
	lpsctl rollout set 202604.01.3 --subscriptions 8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a --allow-unseen --reason "new cluster, not provisioned yet"
	lpsctl rollout resume 202604.01.3 --reason "CHG 42: the weekend is over"
	lpsctl rollout complete 202604.01.3 --reason "ICM 1234: healthy everywhere"
	lpsctl rollout set 202604.01.3 --subscriptions '' --regions '' --reason "every subscription and region"
	lpsctl rollout halt 202604.01.3 --reason "regression in westeurope"
	lpsctl revoke 202604.01.3 --reason "superseded by 202604.01.4"
	lpsctl audit --target 202604.01.3 --since 1h
	lpsctl audit --actor lpsd -o json

# Component configurations

lpsd also serves configurations of components other than the agent, for
nodes asking GetComponentConfig with another component name (localDNS, as
the reference's fetch-localdns-config does). Each is a JSON object signed
offline with a release key, published, then rolled out like a release,
named <component>@<version> wherever a command takes a VERSION:

	lpsctl component sign --key release.key --component localDNS --version 3 \
	    --config localdns.json --valid-for 30d --out localDNS-3.json
	lpsctl component publish --envelope localDNS-3.json --reason "new resolver"
	lpsctl rollout set localDNS@3 --percent 10 --deploy-envs staging --reason "staging first"
	lpsctl rollout plan localDNS@3 --steps 10:1h,50:2h,100:0s --reason "then everyone"
	lpsctl rollout skip localDNS@3 --reason "verified on staging"
	lpsctl explain --component localDNS --vm-id ID --subscription ID
	lpsctl component list
	lpsctl rollout halt localDNS@3 --reason "resolver errors"
	lpsctl revoke localDNS@3 --reason "bad corefile"
	lpsctl audit --target localDNS@3

--config is at most 12 KiB and must be one JSON object without duplicate
keys or the member nodehotfixConfigEnvelope: lpsd serves the object with
that member added, holding the envelope, which reference nodes ignore and
ours verify with their release keys. For localDNS it holds corefile (or
coreFile, corefileBase64), optionally per agent pool under agentPools or
profiles (keyed by the node's kubernetes.azure.com/agentpool label), each
with an optional corefileVersion. A node is served the highest version of
the component whose rollout includes it; none, or nothing published, is
NotFound. --version runs from 1; a published version is never replaced
(exit 6 for another envelope): sign a new one. aksNodeController is served
from releases and refused here.

A component configuration's rollout has the release states, percentage
(by hash bucket of vmId and <component>@<version>) and scopes, deploy
environment included. Its plan is timed: PERCENT:BAKE steps that lpsd
advances once each bake has passed (audit action auto-advance, actor lpsd)
and completes after the last. Components send no outcome reports, so
nothing judges the rollout and nothing halts it but an operator.

# Exit codes

	0    success (also -h)
	1    error: a file could not be read or written, the server is
	     unreachable or failed, or it rejected the input (InvalidArgument)
	2    usage: unknown command, bad or missing flag or argument, no
	     credentials, a change without --reason (or $LPSCTL_REASON)
	3    refused by the rollout state: a percentage decrease, a transition
	     the state machine forbids, a plan whose start step the release is
	     past (give --from-step), no plan step to skip, a revoked release,
	     an envelope signed by fewer release keys than lpsd's threshold,
	     a scope value no node or replica was seen with (give
	     --allow-unseen), a change that would start or advance a rollout
	     while every rollout is frozen (unfreeze first), an append to the
	     transparency log while its store is behind what a witness cosigned
	     (lpsctl log restore), a change lpsd's rollout policy refuses, one
	     that waits for a second operator (FailedPrecondition); a concurrent change
	     won, re-read and retry (Aborted)
	4    authentication failed (Unauthenticated, PermissionDenied; a reader
	     token or certificate asking for a change)
	5    no such release (NotFound)
	6    a different envelope is already published under that version
	     (AlreadyExists): sign the change as a new patch version
	7    log, log export: the log forked: its checkpoint, signed by the
	     log key, is not an extension of the kept one (--state, or the
	     export directory's); both are printed
	8    log: records are flagged: a release under the threshold of the
	     key set in force, a key-set link that does not verify from
	     --root, or a record of unknown kind; all are printed
	130  interrupted (Ctrl-C; 143 for SIGTERM). For a change, stderr says
	     it may or may not have been applied: check with status or audit.

A change that is already in effect succeeds: publishing a byte-identical
envelope again, pausing, resuming, halting or completing a release that is
already in that state, or revoking a revoked one, exits 0 and says "nothing
changed".

# Transparency-log witness

	lpsctl witness keygen --kind log|witness --name NAME --out-private FILE --out-public FILE

Creates an Ed25519 key pair as C2SP signed-note text: --kind log is lpsd's
log key, named for the log's origin (nodehotfix.example/log); --kind witness
is a cosignature/v1 witness key. The private key ("PRIVATE+KEY+...") is
created with mode 0600, the public one holds the vkey that key sets list
(nodehotfix-log-key, nodehotfix-witness). Never overwrites either file.
With --json it prints {"kind", "vkey", "private_key", "public_key"}.

	lpsctl witness serve --key FILE --log-key VKEY [--log-key VKEY ...] --state FILE --listen ADDR

Runs a C2SP tlog-witness (POST /add-checkpoint). It cosigns a checkpoint
signed by a --log-key only if it extends the last one it cosigned for that
log, kept in --state (replaced atomically before each answer); a fork is
refused and logged at ERROR with the checkpoint. A missing --state is trust
on first use (the first checkpoint of each log is cosigned as it comes); a
--state that does not decode stops it. It prints "witness VKEY listening on
ADDR" on stdout, logs to stderr, and exits 0 after a graceful stop on
SIGTERM or Ctrl-C. Run it apart from lpsd, by someone else.

# Files

Read: the --key, --artifact, --envelope, --token-file, --ca, --cert, --key,
--config, --pointer, --nbc-cmd, --public-key, --current, --add-key and
--root files, keys verify's LINK files, and log's --state and --dir.
Written: --out-private, --out-public (created, never replaced), --out and
log's --state (replaced atomically), and log export's DIR.

# Environment

LPSCTL_SERVER, LPSCTL_TOKEN_FILE and LPSCTL_CA default --server, --token-file
and --ca. LPSCTL_REASON defaults --reason of every change, for scripts.
*/
package main
