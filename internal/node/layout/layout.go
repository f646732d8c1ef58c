// Package layout names the agent's on-node files relative to a root directory.
package layout

import "path/filepath"

// Root is the directory every on-node path resolves under: "/" on a node, a
// temp directory in tests. The paths below are the reference's, unchanged.
type Root string

func (r Root) join(rel string) string { return filepath.Join(string(r), rel) }

const containers = "opt/azure/containers"

// Containers is the agent's directory, /opt/azure/containers.
func (r Root) Containers() string { return r.join(containers) }

// NodeConfig is aks-node-controller-config.json, the protojson node config.
func (r Root) NodeConfig() string { return r.join(containers + "/aks-node-controller-config.json") }

// NBCCmd is aks-node-controller-nbc-cmd.sh, the bootstrap command line.
func (r Root) NBCCmd() string { return r.join(containers + "/aks-node-controller-nbc-cmd.sh") }

// Pointer is aks-node-controller-hotfix.json, the staged hotfix pointer.
func (r Root) Pointer() string { return r.join(containers + "/aks-node-controller-hotfix.json") }

// EnabledFeatures is enabled_features.sh, the per-node feature flags.
func (r Root) EnabledFeatures() string { return r.join(containers + "/enabled_features.sh") }

// NodeCustomData is nodecustomdata.yml, the scripts hotfix source.
func (r Root) NodeCustomData() string { return r.join(containers + "/nodecustomdata.yml") }

// EmbeddedNodeCustomData is where apply-embedded-hotfix writes the payload
// it applies, as the reference does.
func (r Root) EmbeddedNodeCustomData() string {
	return r.join(containers + "/embedded-nodecustomdata.yml")
}

// BakedBinary is the agent shipped in the image.
func (r Root) BakedBinary() string { return r.join(containers + "/aks-node-controller") }

// HotfixBinary is where a verified hotfix agent is staged.
func (r Root) HotfixBinary() string { return r.join(containers + "/aks-node-controller-hotfix") }

// LocalDNSCorefile is where the localDNS component's live-patched
// Corefile is staged, as the reference stages it; its version file is
// beside it with ".version" appended.
func (r Root) LocalDNSCorefile() string {
	return r.join(containers + "/localdns/livepatched.localdns.corefile")
}

// ReleaseKeys is the image's set of trusted release public keys.
func (r Root) ReleaseKeys() string {
	return r.join(containers + "/aks-node-controller-release-keys.pub")
}

// TrustState is what the node keeps of its trust across boots: the key-set
// chain it verified, the last log checkpoint it saw and the revocations
// it was shown (internal/node/trust). It sits beside the pointer, on the
// image's disk, so a reprovision of the same disk never goes back.
func (r Root) TrustState() string { return r.join(containers + "/aks-node-controller-trust.json") }

// HotfixLock serialises download-hotfix runs.
func (r Root) HotfixLock() string { return r.join(containers + "/.aks-node-controller-hotfix.lock") }

// ProvisionComplete marks the end of provisioning.
func (r Root) ProvisionComplete() string { return r.join(containers + "/provision.complete") }

// ProvisionJSON holds provisioning's exit code, error and output tail.
func (r Root) ProvisionJSON() string { return r.join("var/log/azure/aks/provision.json") }

// ReportOutbox holds the reports the live-patching service did not
// acknowledge, until they are resent (report.Keep, report.Resend).
func (r Root) ReportOutbox() string { return r.join("var/log/azure/aks/report-outbox.json") }

// ReportOutboxLock serialises the writers of ReportOutbox.
func (r Root) ReportOutboxLock() string { return r.join("var/log/azure/aks/.report-outbox.lock") }

// EtcHostname is /etc/hostname, the name cloud-init configures.
func (r Root) EtcHostname() string { return r.join("etc/hostname") }

// KernelHostname is the kernel's hostname, what hostname(1) prints.
func (r Root) KernelHostname() string { return r.join("proc/sys/kernel/hostname") }

// BootID is the kernel's boot ID, a UUID that changes every boot.
func (r Root) BootID() string { return r.join("proc/sys/kernel/random/boot_id") }

// EventsDir is where the guest agent collects telemetry event files.
func (r Root) EventsDir() string {
	return r.join("var/log/azure/Microsoft.Azure.Extensions.CustomScript/events")
}

// LogFile is the agent's JSON log.
func (r Root) LogFile() string { return r.join("var/log/azure/aks-node-controller.log") }

// OSRelease returns the os-release candidates in the order to consult them.
func (r Root) OSRelease() []string {
	return []string{r.join("etc/os-release"), r.join("usr/lib/os-release")}
}
