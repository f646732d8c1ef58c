/*
Command aks-node-controller is the node agent. The launcher shim
(deploy/node/aks-node-controller-launcher.sh) runs `aks-node-controller
launch`, which stages and applies a hotfix of the agent and provisions the
node.

Usage:

	aks-node-controller <command> [flags]

Commands:

	launch           provision the node as the launcher does (below)
	apply-embedded-hotfix  apply the script hotfix this agent carries for the
	                 node's distribution (internal/node/embedhotfix): exit 0
	                 when it applied or had none (the agent as built carries
	                 none), 1 for a bad payload, of which nothing is written
	check-hotfix     ask the live-patching service for the hotfix pointer and
	                 stage it; always exits 0
	download-hotfix  stage the verified hotfix agent the pointer names, apply a
	                 scripts hotfix, or remove a staged hotfix that no longer
	                 applies
	explain          say what launch would do on this node and why, step by
	                 step, from local files only (--json for machines)
	live-patching    print the configuration the live-patching service serves
	                 this node for a component (below)
	fetch-localdns-config  fetch this node's localDNS configuration and
	                 stage its Corefile; prints the outcome, always exits 0
	                 (below)
	apply-localdns-config  stage the Corefile of a localDNS configuration
	                 given in a file or on stdin (below)
	provision        run the node bootstrap; record provision.json and
	                 provision.complete
	provision-wait   wait for provision.complete; print provision.json
	report-resend    resend the reports the live-patching service did not
	                 acknowledge (below); a timer runs it; always exits 0
	version          print the agent version (also --version)

Flags common to the node commands:

	--root DIR           directory every on-node path resolves under (default /)
	--imds-url URL       metadata service (default http://169.254.169.254)
	--lps-addr HOST:PORT where to dial the live-patching service (default
	                     <api_server_name>:443); TLS still verifies the cluster
	                     CA and aks-security-patch.data.mcr.microsoft.com

# launch

launch does the reference launcher's job, in its order, and only provision
can fail it:

 1. wait, at most --hostname-wait (default 60s), until the kernel hostname
    equals the first line of /etc/hostname;
 2. exit 0 if neither the node config nor the bootstrap command exists;
 3. read enabled_features.sh as data (never sourced): the file is void,
    every feature off, if it is a symlink, not a regular file, owned by
    another user, writable by group or others (it or its directory), larger
    than 64 KiB or 256 lines, or holds a CR, a NUL or a key twice. Flags
    never enter the agent's own environment; the accepted ones are added to
    the bootstrap's. Keys that steer the shell, the loader, libc, the Go
    runtime, proxies or the TLS trust of curl, OpenSSL, Python, Node or git
    are refused (features.Reserved);
 4. if ENABLE_PROVISIONING_HOTFIX is exactly "true": check-hotfix, in this
    process, within --check-budget (5s);
 5. if the pointer file exists: download-hotfix, in this process, within
    --download-budget (3m);
 6. choose the agent with the one decision (hotfix.Select) that
    download-hotfix and explain use too: the staged hotfix runs only if the
    pointer requests, for the baked base, a newer patch that is not revoked
    (and every entry of the pointer's revoked list is a version: one that is
    not means the baked agent, reason unreadableRevocation), that a release
    key signed (when the image has keys), and the staged
    file is a regular executable that only root can write, in a directory
    only root can write, whose sha256 is the signed one and whose `version`
    reports exactly that patch. Whatever download-hotfix did (staged, failed,
    busy), this is decided on the files as they are, so a revoked or stale
    binary never runs. It prints the reference's line "Using hotfix binary:
    PATH" or "Using VHD-baked binary: PATH" and records a Launcher event;
 7. provision: with the baked agent in this process, or with the hotfix:
    first `<hotfix> apply-embedded-hotfix [--root R]` as the reference
    launcher runs it (within its 1 min budget; a failure is logged and provisioning
    goes on; the scripts it wrote stay if the hotfix then falls back), then
    `<hotfix> provision [--provision-config=F] [--nbc-cmd=F] [--root R]`,
    and exit with its code.

Same-boot fallback. Before it provisions, launch records its launch ID in
var/log/azure/aks/launch.json (the handover: from then on the shim never
provisions; if it cannot be recorded launch provisions nothing and leaves the
node to the shim). A hotfix agent's provision records its preflight, then,
just before it starts the bootstrap, the bootstrap's start, in
var/log/azure/aks/provision-started.json. If the hotfix agent ends non-zero
and neither recorded the start nor wrote provision.complete (an agent that
keeps no record, such as the reference's, writes it once its bootstrap has
run) — a crash, a panic, a signal, exit 240, a failed preflight — the baked
agent provisions in the same boot, once; so it does after a hotfix agent
that exits 0 with neither (it provisioned nothing, so it counts as failed); provision.json records Agent
"baked" and the Fallback reason, and the Launcher event says fallback=true.
A preflight that does not reach the bootstrap within a minute is a hang:
the hotfix agent is killed and the baked agent provisions. So is a hotfix
agent that wrote no launch record at all within a minute, but only when
its verified release declares that its agent writes them (a signed
"launch_records": lpsctl release sign --launch-records; never without
release keys): such an agent records its preflight at once and never
starts the bootstrap unrecorded, so no record means no bootstrap, and the
record is read once more before the kill (one written after the kill means
its bootstrap stands, and launch does not fall back). An agent without the
declaration that writes no record is never timed, since it may be running
its bootstrap (the reference's agent writes none); it is bounded by the
CSE's timeout alone. A bootstrap that
started is never run again (it is not idempotent): its exit code stands. If
the hotfix agent is killed by a signal after the bootstrap started, launch
records that in provision.json (exit code 128+signal) so provision-wait does
not wait out its timeout; killed after it wrote its own provision.json and
provision.complete (lingering once done), its status stands and launch
exits with the code it recorded. The hotfix agent writes to launch's own stdout and
stderr, not a pipe, so its bootstrap outlives a launch that dies.

Outcome report. With ENABLE_PROVISIONING_HOTFIX=true, launch reports once,
after provision and within 2 s, to the live-patching service
(nodehotfix.node.v1.ReportService, same TLS, ALPN, verify name and attested
document as check-hotfix): the boot ID, the baked version, the agent that
provisioned and its version, the hotfix chosen, the decision, check-hotfix's
and download-hotfix's outcomes and route, the fallback and its reason,
provision's exit code and the durations, and the version the staged pointer
requested for the base, run or not (a node served a release it refused
counts against that release). check-hotfix sends the boot ID with its
request too (nodehotfix-boot metadata), so the service records whom it
served and counts a node that never reports as silent. A failed report is
logged and changes nothing. Nodes that ran the baked agent with nothing
requested are their base's control cohort. With the flag off nothing is
sent.

Started report. With the flag on, just before it first runs a chosen hotfix
agent (its apply-embedded-hotfix, then its provision), launch sends
ReportService.ReportStarted: the boot ID, the baked version, the hotfix
version about to run, and check-hotfix's and download-hotfix's durations.
It goes over check-hotfix's connection, still open (no second metadata
service call or TLS handshake), or over one of its own if check-hotfix did
not reach the service; it runs while the agent runs and launch never waits
for it before the exec (measured: 0.02 to 0.06 ms on the exec's path, go
test -bench BenchmarkStartedReportExecDelay ./internal/node/launch/), only
before the outcome report, within 2 s. lpsd counts a started boot without
an outcome as pending, then silent, never as a success; the outcome
replaces it. It is an RPC of its own so that an older lpsd answers
Unimplemented instead of storing it as an outcome.

Reports that arrive. A started or outcome report the service did not
acknowledge with an answer that says it may take it later (Unavailable, a
deadline, ResourceExhausted, a transport failure, the metadata service
down) is sent again at once, on a new connection (which a load balancer may
give another replica), within the same 2 s: the first attempt has half of
them. Still unacknowledged, it is kept in
var/log/azure/aks/report-outbox.json (at most 8 reports and 32 KiB; an
outcome replaces its boot's started report) for `report-resend`, which the
timer aks-node-controller-report-resend.timer runs every minute while the
file exists: it sends each kept report that is due once (each within 2 s,
all within 20 s, over one connection while the service answers and over a
new one after a report it could not take), waits 1, 2, 4, 8, 16 and then 30 minutes between the
attempts at one report, drops it once delivered or refused (InvalidArgument,
FailedPrecondition, Unimplemented, a certificate the node refuses), and
drops every report 48 hours after it was first sent: the node knows
neither the release's plan nor the service's outages, and no report counts
later (the longest --silent-after, 24 h, stretched by the longest outage
lpsd forgives, 24 h). Every disk fault fails open: the
report is lost and logged, provisioning is never affected. report-resend
takes the common flags (--root, --imds-url, --lps-addr) and prints
"delivered N, dropped N, kept N".

launch flags, besides the common ones: --bin-path (the baked agent),
--hotfix-bin (default <bin-path>-hotfix), --hotfix-json, --provision-config,
--nbc-cmd, --features (paths, default under --root), --release-keys,
--artifact-ca, --hostname-wait, --check-budget, --download-budget,
--select-only, --features-only, --result-fd.

# live-patching

`aks-node-controller live-patching [--json] [--timeout D] COMPONENT` asks the
live-patching service, as check-hotfix does (the node config's target and
cluster CA, an attested document, this image's base), for COMPONENT's
configuration (aksNodeController, localDNS, ...) and prints the raw config
on stdout with no trailing newline; an empty config prints nothing. --json
prints the whole response ({"componentName", "config"}) and a newline. It is
an operator's probe, not fail-open: every failure exits 1 with the reason on
stderr, NotFound and the other codes check-hotfix treats as "no hotfix"
included; usage errors exit 2. --timeout (default 30s) bounds it whole.
For a component other than aksNodeController, a config that carries its
signature (our lpsd serves it in the member nodehotfixConfigEnvelope) is
verified against the node's release keys (--release-keys, default the
image's) before anything is printed: one that does not verify, or a damaged
key file, exits 1. Without keys, or without a signature, it prints what was
served.

# localDNS

`aks-node-controller fetch-localdns-config [--output PATH] [--timeout D]
[--release-keys FILE]` is the reference's command: it asks the service for
the localDNS component's configuration (the node config's target, as
live-patching), stages the Corefile it selects at PATH (default
opt/azure/containers/localdns/livepatched.localdns.corefile) with its
version in PATH.version, and prints the outcome as the last line of stdout:
applied, alreadyCurrent (the Corefile and version are there already),
notFound (the service answered NotFound, PermissionDenied or
Unauthenticated), noCorefileData (an empty configuration, none for this
node's agent pool, or only a localDnsProfile, which this agent does not
render into a Corefile) or failed. It always exits 0: its bootstrap caller
is fail-open and reads the line. --timeout (default 10s) bounds it whole,
metadata service included; the configuration is at most 36 KiB (a
signed one with its envelope), the response at 1 MiB.

The configuration is the reference's JSON object: corefile, coreFile,
corefileBase64 or corefile_base64, or per agent pool under agentPools or
profiles, keyed by the kubernetes.azure.com/agentpool kubelet node label
(the node config's kubelet_config.kubelet_node_labels, else nbc-cmd.sh's
KUBELET_NODE_LABELS), each entry with an optional corefileVersion or
configChecksum for the version file. On a node with release keys only a
configuration whose signature verifies (and names localDNS) is applied; an
unsigned one is failed, so a service that could strip the signature cannot
hand the node an unsigned Corefile. Without keys, the configuration is
taken as served.

`aks-node-controller apply-localdns-config [--config FILE|-] [--output PATH]`
applies a configuration given in a file or on stdin (the default; read for
at most 10 s, at most 36 KiB) the same way, prints the outcome line, and
exits 1 when it is failed.

Log lines. launch prints, at the same moments, the lines the reference's
launcher prints and its e2e and log queries look for:
"ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix
pointer", "ANC check-hotfix completed; hotfix pointer refresh attempted" or
"ANC check-hotfix failed; continuing (fail-open)", "Found ANC hotfix config at
PATH; running download-hotfix", "ANC download-hotfix completed; binary
selection follows" (or failed), "Using hotfix binary: PATH" or "Using
VHD-baked binary: PATH", "ANC apply-embedded-hotfix completed" (or failed),
and "aks-node-controller completed successfully" or "aks-node-controller
exited with code N". download-hotfix logs "downloading ANC hotfix" to the
agent log, then "downloaded ANC hotfix through authenticated repository fast
path" when the repository route staged it, or "... falling back to package
manager" when it could not.

The hotfix flow helper. Later reference launchers source
/opt/azure/containers/aks-node-controller-hotfix.sh (HOTFIX_FLOW_SCRIPT
overrides the path; one generation exits 1 without it, so packaging always
installs it beside the launcher: make install-node), call
`anc_run_hotfix_flow BIN HOTFIX_BIN HOTFIX_JSON FEATURES_PATH` and provision
with "$ANC_HOTFIX_SELECTED_BIN" themselves. The helper is a shim over
`BIN launch --select-only --result-fd=3`, which runs steps 3 to 6 above and,
once the hotfix is chosen, its apply-embedded-hotfix, with the same lines,
and provisions nothing, waits for no hostname and sends no report. On fd 3
it writes one record a line: "flag KEY=VALUE" for each accepted feature flag
(the helper exports them, as the reference's exports the file's pairs, so
the bootstrap that the launcher's provision starts sees them; refused keys
never are) and "selected PATH". Without --result-fd the selected agent is
the last line of stdout. `launch --features-only` reads the flags alone
(anc_hotfix_read_feature_flags). Fail-open in every branch: a missing, old
or crashing agent leaves the baked agent selected.

The shim maps the reference launcher's environment onto these flags
(BIN_PATH, HOTFIX_JSON, CONFIG_PATH, NBC_CMD_PATH, FEATURES_PATH; NODE_ROOT,
IMDS_URL, LPS_ADDR, HOSTNAME_WAIT_SECONDS for hermetic runs) and falls back
to `<baked> provision` itself if launch does not exist (an older agent) or
ends non-zero without a handover recorded for its launch ID: fail-open even
against a bug in launch.

Environment provision reads (set by launch for a hotfix agent child; the
shim sets the first):

	AKS_NODE_CONTROLLER_LAUNCH_ID     recorded in launch.json and provision-started.json
	AKS_NODE_CONTROLLER_AGENT         recorded in provision.json ("hotfix")
	AKS_NODE_CONTROLLER_BAKED_FALLBACK "1": a fallback follows a failure
	                                  before the bootstrap starts, so the
	                                  status files are left to it, and the
	                                  bootstrap does not start unless its
	                                  start could be recorded

# Pointer precedence

check-hotfix merges what the service serves into the staged pointer:
served entries win per base; a base the served map lacks keeps its staged
(custom-data) entry, so a served map for other image bases never disables
this node's custom-data hotfix. The revoked lists are united (an entry
that is not a version does not void the document: its other revocations
are staged, and the bad entry with them until the service next serves
hotfixes or a revoked list, keeping the node on the baked agent
meanwhile); staged
releases that the service did not send again are kept. A base is withdrawn
by revocation, never by omission. When the service is unreachable the node
config's cold-start map only adds bases the staged pointer lacks: an outage
never removes a verified hotfix or a revocation. `version` and
`scripts_version` (custom data) are never set by the service. Pointer
writes are atomic, unescaped, and refused above the 64 KiB read cap.

# Other commands

check-hotfix flags:

	--budget DURATION    overall budget, metadata service included (default 5s)

download-hotfix flags:

	--release-keys FILE  trusted release keys (default
	                     <root>/opt/azure/containers/aks-node-controller-release-keys.pub);
	                     when present only signed releases are downloaded.
	                     Otherwise the node's package repository is trusted:
	                     the repository route fetches the package straight
	                     from the apt source the image configures
	                     (etc/apt/sources.list.d/microsoft-prod.{list,sources},
	                     its signed-by keyring or apt's trusted.gpg.d), checked
	                     from the InRelease signature through the Packages
	                     SHA-256 to the .deb, and takes the agent out of it;
	                     on Azure Linux from the enabled etc/yum.repos.d
	                     repositories with gpgcheck=1, the package's
	                     signature checked by rpmkeys against the node's rpm
	                     database, the agent read through rpm2cpio.
	                     Only when that route is unavailable (no usable
	                     source, unreachable, a timeout after half the
	                     budget, no such package) does the package manager
	                     install the exact version: the one package whose
	                     upstream version is the target (apt-cache madison,
	                     dnf/tdnf list --showduplicates), pinned with its
	                     revision. A repository that contradicts its
	                     signatures is repositoryIntegrity, never a fallback
	--artifact-ca FILE   extra CA (PEM) for artifact downloads
	--budget DURATION    overall budget (default 3m)

A staged binary the decision does not run (revoked, not the target, not
signed, unsafe) is removed before anything is downloaded, so a failed
replacement leaves nothing that could run.

provision flags:

	--provision-config FILE  node config (aks-node-controller-config.json)
	--nbc-cmd FILE           bootstrap command; runs as `/bin/bash -- FILE` and
	                         takes priority over the config

provision-wait flags:

	--timeout DURATION   give up after this long (default 14m, under the CSE
	                     timeout; 0 waits until killed)

Exit codes:

	0    success; check-hotfix and report-resend always; download-hotfix whenever nothing had to
	     be installed or the outcome is a policy decision (no hotfix,
	     untrusted, revoked, busy)
	1    error (download-hotfix staging failed, provision-wait timed out, an
	     unexpected argument, any live-patching failure, apply-localdns-config
	     failed)
	2    usage error (unknown command or flag)
	N    launch and provision: the bootstrap's exit code (240 when it could
	     not start; 128+signal when a hotfix agent was killed after it
	     started and before it recorded its status); provision-wait: the recorded ExitCode; download-hotfix: the
	     package manager's exit code (255 if it was killed)

Files (under --root):

	opt/azure/containers/aks-node-controller-config.json   node config (read)
	opt/azure/containers/aks-node-controller-nbc-cmd.sh    bootstrap command (read)
	opt/azure/containers/enabled_features.sh               feature flags (launch reads, as data)
	opt/azure/containers/aks-node-controller-hotfix.sh     the hotfix flow helper later reference launchers source (installed with the launcher)
	opt/azure/containers/aks-node-controller-hotfix.json   hotfix pointer (check-hotfix writes, download-hotfix reads; a symlink is refused)
	opt/azure/containers/aks-node-controller-release-keys.pub  trusted release keys (read)
	opt/azure/containers/aks-node-controller-hotfix        staged hotfix agent (download-hotfix writes or removes)
	opt/azure/containers/nodecustomdata.yml                scripts hotfix source (read)
	opt/azure/containers/embedded-nodecustomdata.yml       the embedded script hotfix applied (apply-embedded-hotfix writes, 0600)
	opt/azure/containers/provision.complete                provisioning done (provision writes)
	opt/azure/containers/localdns/livepatched.localdns.corefile  the live-patched Corefile (fetch-localdns-config, apply-localdns-config write; .version beside it)
	var/log/azure/aks/launch.json                          launch handed over to provisioning: launch ID, agent, version, pid, time
	var/log/azure/aks/provision-started.json               a provision under launch: its preflight, then the bootstrap's start
	var/log/azure/aks/provision.json                       provisioning result: ExitCode, Error, Output, timing, Agent, AgentVersion, Fallback
	var/log/azure/aks/report-outbox.json                   reports the service did not acknowledge (launch writes, report-resend resends and removes; 0600, ≤ 32 KiB)
	var/log/azure/aks/.report-outbox.lock                  serialises the outbox's writers (flock)
	var/log/azure/aks-node-controller.log                  JSON log (appended; never through a symlink)
	var/log/azure/Microsoft.Azure.Extensions.CustomScript/events/*.json  telemetry events (the directory is never a symlink)

Telemetry: one guest-agent event per command run, task
AKS.AKSNodeController.{ApplyEmbeddedHotfix,CheckHotfix,DownloadHotfix,Launcher,Provision,ProvisionWait,FetchLocalDNSConfig,ApplyLocalDNSConfig},
whether the command ran as its own process or inside launch.
check-hotfix outcomes are the reference's: lpsRead, noHotfixForBase,
noHotfixAvailable, customDataFallback, noColdStartPointer (the service
unreachable and no cold-start map: Informational), failed. download-hotfix outcomes:
staged, alreadyStaged, noPointer, invalidPointer, noHotfixForBase, notNewer,
unparsableVersion, revoked, unreadableRevocation, untrusted, busy, noPackage
and ambiguousPackage (the repositories have none, or several revisions, of
the version; both failures), repositoryIntegrity (a bad signature, a package
whose digest differs from the signed index, a package without the agent, on the
repository route; a failure, nothing staged), artifactIntegrity (the
artifact's size or sha256 is not the signed one, or the verified bytes are
not an ELF agent of the signed version: the release is at fault, and the
service counts it against it; a failure, nothing staged), failed; each event also names
the route (direct, repository, package-manager, none) and the version, and
repositoryFallback="…" says why the repository route gave way. Launcher events:
"launcher choice=hotfix version=V reason=hotfix", "launcher choice=baked
reason=R detail=…" (none for reason noPointer: nothing was staged, and a
node with the flag on has check-hotfix's event), and, at Error level,
"launcher choice=baked fallback=true version=V reason=…".
*/
package main
