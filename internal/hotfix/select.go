package hotfix

import (
	"fmt"
	"sort"
	"strings"
)

// Agent names the agent that provisions a node.
type Agent string

// Agents.
const (
	AgentBaked  Agent = "baked"  // the agent baked into the image
	AgentHotfix Agent = "hotfix" // the staged hotfix agent
)

// Reason says why Select chose as it did. The policy reasons share their
// strings with download-hotfix's telemetry outcomes.
type Reason string

// Reasons, in the order Select checks them.
const (
	ReasonUnparsableVersion    Reason = "unparsableVersion"    // the baked version is not YYYYMM.DD.PATCH
	ReasonInvalidPointer       Reason = "invalidPointer"       // the pointer is unreadable or malformed
	ReasonNoPointer            Reason = "noPointer"            // no pointer, or one that names no binary hotfix
	ReasonNoHotfixForBase      Reason = "noHotfixForBase"      // the pointer has nothing for this base
	ReasonNotNewer             Reason = "notNewer"             // the requested version is not a newer patch of the baked one
	ReasonRevoked              Reason = "revoked"              // the requested version is revoked
	ReasonUnreadableRevocation Reason = "unreadableRevocation" // a revoked entry is not a version: the target may be revoked
	ReasonUntrusted            Reason = "untrusted"            // release keys present, but no verified release of the target
	ReasonNotStaged            Reason = "notStaged"            // the target is good but no hotfix binary is staged
	ReasonStagedUnsafe         Reason = "stagedUnsafe"         // the staged file fails the type, owner or mode checks
	ReasonStagedMismatch       Reason = "stagedMismatch"       // the staged binary is not the target (version or digest)
	ReasonHotfix               Reason = "hotfix"               // the staged binary is the verified target
)

// Tombstone is what the service serves, for a base whose hotfix is revoked
// and that has nothing else for the node: the base's patch 0. No agent of
// that base takes it for an upgrade (the reference's gate, like IsUpgrade,
// wants a strictly higher patch), so it overrides a custom-data pointer to
// the revoked version on reference nodes too; Select reports it as revoked.
func Tombstone(base string) string { return base + ".0" }

// Input is everything Select decides on. Callers gather it from the node;
// Select itself does no I/O.
type Input struct {
	// Baked is the version the baked agent reports.
	Baked string
	// Pointer is the staged pointer; the zero Pointer when there is none.
	Pointer Pointer
	// PointerErr is why the pointer could not be read or parsed; nil when
	// it was read or is absent.
	PointerErr error
	// Trust is what the node's release keys say about the pointer.
	Trust Trust
	// Staged describes the file at the hotfix binary's path.
	Staged Staged
}

// Trust is the verdict of the node's release keys on the pointer's releases.
type Trust struct {
	// Keys reports that the node has release keys: then only a verified
	// release may run. Without keys the package manager's repository
	// signing is the trust, and any target may run.
	Keys bool
	// KeysErr is why nothing may run though the node has release keys: the
	// key file is unusable, the key-set chain does not verify, or the log
	// its newest set requires does not prove the pointer (internal/node/trust).
	KeysErr error
	// Signed maps each version with a release that verified (signature,
	// expiry, base) and carries an artifact for this platform to that
	// artifact's sha256 (lower-case hex).
	Signed map[string]string
	// LaunchRecords holds the versions of Signed whose verified release
	// declares that its agent writes launch records
	// (release.Release.LaunchRecords).
	LaunchRecords map[string]bool
	// Refused says why each other release was refused.
	Refused []string
}

// Staged describes the file at the hotfix binary's path.
type Staged struct {
	// Present reports that something exists at the path.
	Present bool
	// Unsafe is why the file must not run (a symlink, not a regular or
	// executable file, the wrong owner, writable by others); when set,
	// nothing else was probed.
	Unsafe string
	// SHA256 is the file's digest (lower-case hex); empty if not computed.
	SHA256 string
	// Reported is what `<staged> version` printed.
	Reported string
	// ProbeErr is why `<staged> version` failed; empty when it succeeded.
	ProbeErr string
}

// Decision is what Select chose.
type Decision struct {
	Agent  Agent
	Reason Reason
	// Target is the hotfix version the pointer requests for the baked
	// base when it is a valid upgrade; zero otherwise.
	Target Version
	// Requested is what the pointer requests for the baked base, verbatim;
	// empty when it requests nothing.
	Requested string
	// Source says where the pointer's request came from.
	Source Source
	// SHA256 is the signed digest of Target's artifact when the node has
	// release keys; empty otherwise.
	SHA256 string
	// Remove reports that a staged file exists and must not stay: it is not
	// what this decision runs.
	Remove bool
	// LaunchRecords, with AgentHotfix, says the target's verified release
	// declares that its agent writes launch records (Trust.LaunchRecords),
	// so launch may bound a run that writes none.
	LaunchRecords bool
	// Detail is one line for operators; untrusted strings in it are quoted.
	Detail string
}

// Select decides which agent provisions and why. It is the one decision:
// download-hotfix (what to stage or remove), explain (what it reports) and
// launch (what it runs) all call it on the same facts.
//
// The staged hotfix runs only if the pointer requests, for the baked
// agent's base, a strictly newer patch that is not revoked (and every entry
// of the revoked list is readable), that a
// release key signed (when the node has keys), and the file at the staged
// path is safe, reports exactly that version and, with keys, has the signed
// digest. Anything else provisions with the baked agent, and any staged
// file is to be removed.
func Select(in Input) Decision {
	d := decide(in)
	d.Remove = in.Staged.Present && d.Agent == AgentBaked
	return d
}

func decide(in Input) Decision {
	baked := func(r Reason, format string, a ...any) Decision {
		return Decision{Agent: AgentBaked, Reason: r, Detail: fmt.Sprintf(format, a...)}
	}
	current, err := ParseVersion(in.Baked)
	if err != nil {
		return baked(ReasonUnparsableVersion, "baked agent reports %q, not YYYYMM.DD.PATCH: no hotfix can apply", in.Baked)
	}
	if in.PointerErr != nil {
		return baked(ReasonInvalidPointer, "hotfix pointer unusable: %v", in.PointerErr)
	}
	if in.Pointer.IsEmpty() {
		return baked(ReasonNoPointer, "no hotfix pointer names a binary hotfix")
	}
	want, src := in.Pointer.Resolve(current)
	if want == "" {
		return baked(ReasonNoHotfixForBase, "the pointer requests nothing for base %s", current.Base())
	}
	target, err := ParseVersion(want)
	if err == nil && target.Base() == current.Base() && target.Patch() == 0 {
		d := baked(ReasonRevoked, "base %s is withdrawn: its hotfix is revoked (the service's tombstone %s)", current.Base(), target)
		d.Requested, d.Source = want, src
		return d
	}
	if err != nil || !IsUpgrade(current, target) {
		d := baked(ReasonNotNewer, "the pointer requests %q (from %s), not a newer patch of %s", want, src, current)
		d.Requested, d.Source = want, src
		return d
	}
	d := Decision{Agent: AgentBaked, Target: target, Requested: want, Source: src}
	reason := func(r Reason, format string, a ...any) Decision {
		d.Reason, d.Detail = r, fmt.Sprintf(format, a...)
		return d
	}
	if in.Pointer.IsRevoked(target) {
		return reason(ReasonRevoked, "%s is revoked", target)
	}
	if bad := in.Pointer.RevokedUnreadable; len(bad) > 0 {
		// An entry can be most of the 64 KiB document: name only its start.
		first := string(bad[0])
		if len(first) > 64 {
			first = first[:64] + "..."
		}
		return reason(ReasonUnreadableRevocation, "the pointer's revoked list is unreadable (entries that are not versions: %d, the first %q), so it cannot say whether %s is revoked: the baked agent provisions until the service serves a readable list",
			len(bad), first, target)
	}
	if in.Trust.Keys {
		if in.Trust.KeysErr != nil {
			return reason(ReasonUntrusted, "no release can be trusted: %v", in.Trust.KeysErr)
		}
		sum := in.Trust.Signed[target.String()]
		if sum == "" {
			return reason(ReasonUntrusted, "no verified release of %s for this platform: %s", target, in.Trust.why())
		}
		d.SHA256 = sum
	}
	st := in.Staged
	switch {
	case !st.Present:
		return reason(ReasonNotStaged, "%s is wanted but not staged", target)
	case st.Unsafe != "":
		return reason(ReasonStagedUnsafe, "staged hotfix refused: %s", st.Unsafe)
	case st.ProbeErr != "":
		return reason(ReasonStagedMismatch, "staged hotfix refused: %s", st.ProbeErr)
	case d.SHA256 != "" && !strings.EqualFold(st.SHA256, d.SHA256):
		return reason(ReasonStagedMismatch, "staged hotfix's sha256 is not the signed artifact's of %s", target)
	case st.Reported != target.String():
		return reason(ReasonStagedMismatch, "staged hotfix reports version %q, want %s", st.Reported, target)
	}
	d.Agent = AgentHotfix
	d.LaunchRecords = in.Trust.Keys && in.Trust.LaunchRecords[target.String()]
	return reason(ReasonHotfix, "hotfix %s (from %s) upgrades %s and passes every check", target, src, current)
}

// why summarises the releases that are not the target's.
func (t Trust) why() string {
	var parts []string
	if len(t.Signed) > 0 {
		vs := make([]string, 0, len(t.Signed))
		for v := range t.Signed {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		parts = append(parts, "verified releases are of "+strings.Join(vs, ", "))
	}
	parts = append(parts, t.Refused...)
	if len(parts) == 0 {
		return "the pointer carries no release"
	}
	return strings.Join(parts, "; ")
}
