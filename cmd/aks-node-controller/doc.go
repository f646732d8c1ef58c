/*
Command aks-node-controller is the node agent. During provisioning the
launcher (deploy/node/aks-node-controller-launcher.sh) runs it to stage and
apply a hotfix of itself, then to provision the node.

Usage:

	aks-node-controller <command> [flags]

Commands:

	check-hotfix     ask the live-patching service for the hotfix pointer and
	                 stage it; always exits 0
	download-hotfix  stage the verified hotfix agent the pointer names, apply a
	                 scripts hotfix, or remove a staged hotfix that no longer
	                 applies
	explain          say what the hotfix path would do on this node and why,
	                 step by step, from local files only (--json for machines)
	provision        run the node bootstrap; record provision.json and
	                 provision.complete
	provision-wait   wait for provision.complete; print provision.json
	version          print the agent version (also --version)

Flags common to the node commands:

	--root DIR           directory every on-node path resolves under (default /)
	--imds-url URL       metadata service (default http://169.254.169.254)
	--lps-addr HOST:PORT where to dial the live-patching service (default
	                     <api_server_name>:443); TLS still verifies the cluster
	                     CA and aks-security-patch.data.mcr.microsoft.com

check-hotfix flags:

	--budget DURATION    overall budget, metadata service included (default 5s)

download-hotfix flags:

	--release-keys FILE  trusted release keys (default
	                     <root>/opt/azure/containers/aks-node-controller-release-keys.pub);
	                     when present only signed releases are downloaded,
	                     otherwise the package manager installs the exact version
	--artifact-ca FILE   extra CA (PEM) for artifact downloads
	--budget DURATION    overall budget (default 3m)

provision flags:

	--provision-config FILE  node config (aks-node-controller-config.json)
	--nbc-cmd FILE           bootstrap command; runs as `/bin/bash -- FILE` and
	                         takes priority over the config

provision-wait flags:

	--timeout DURATION   give up after this long (default 14m, under the CSE
	                     timeout; 0 waits until killed)

Exit codes:

	0    success; check-hotfix always; download-hotfix whenever nothing had to
	     be installed or the outcome is a policy decision (no hotfix,
	     untrusted, revoked, busy)
	1    error (download-hotfix staging failed, provision-wait timed out, an
	     unexpected argument)
	2    usage error (unknown command or flag)
	N    provision: the bootstrap's exit code (240 when it could not start);
	     provision-wait: the recorded ExitCode; download-hotfix: the package
	     manager's exit code (255 if it was killed)

Files (under --root):

	opt/azure/containers/aks-node-controller-config.json   node config (read)
	opt/azure/containers/aks-node-controller-nbc-cmd.sh    bootstrap command (read)
	opt/azure/containers/aks-node-controller-hotfix.json   hotfix pointer (check-hotfix writes, download-hotfix reads)
	opt/azure/containers/aks-node-controller-release-keys.pub  trusted release keys (read)
	opt/azure/containers/aks-node-controller-hotfix        staged hotfix agent (download-hotfix writes or removes)
	opt/azure/containers/nodecustomdata.yml                scripts hotfix source (read)
	opt/azure/containers/provision.complete                provisioning done (provision writes)
	var/log/azure/aks/provision.json                       provisioning result (provision writes)
	var/log/azure/aks-node-controller.log                  JSON log (appended)
	var/log/azure/Microsoft.Azure.Extensions.CustomScript/events/*.json  telemetry events

Telemetry: one guest-agent event per command run, task
AKS.AKSNodeController.{CheckHotfix,DownloadHotfix,Provision,ProvisionWait}.
check-hotfix outcomes are the reference's: lpsRead, noHotfixForBase,
noHotfixAvailable, customDataFallback, failed. download-hotfix outcomes:
staged, alreadyStaged, noPointer, invalidPointer, noHotfixForBase, notNewer,
unparsableVersion, revoked, untrusted, busy, failed; each event also names
the route (direct, package-manager, none) and the version.
*/
package main
