package fleet

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/rollout"
)

// expected is what a node must be served under a snapshot's releases,
// computed here from the rollout rules as documented rather than with
// rollout.Select, so that the simulator checks the service instead of
// repeating it: per base, the highest patch that is not revoked, is
// rolling, paused or complete, and (unless complete) puts the node's
// bucket, sha256(lower(vmId) 0x00 version) mod 10000, below percent*100;
// plus every revoked version, and for a base with a revoked release and
// nothing chosen its tombstone, the base's patch 0. Scopes are not used by
// the simulator, nor expiry: every simulated release is valid for a day.
// seated says the node holds a seat of every rolling or paused release
// whose plan starts with a canary of nodes, which then
// includes it whatever its bucket; the store, not the oracle, knows who
// does, so the run checks those claims against it afterwards. A node that
// declared its base (base != "") is served that base's releases and
// revocations only.
func expected(rels []rollout.Release, vmID, base string, seated bool) hotfix.Pointer {
	best := map[string]rollout.Release{}
	var revoked []string
	revokedBases := map[string]bool{}
	for _, r := range rels {
		if base != "" && r.Base != base {
			continue
		}
		if r.Revoked {
			revoked = append(revoked, r.Version)
			revokedBases[r.Base] = true
			continue
		}
		in := false
		switch r.Rollout.State {
		case rollout.Complete:
			in = true
		case rollout.Rolling, rollout.Paused:
			canary := r.Rollout.Plan != nil && len(r.Rollout.Plan.Steps) > 0 && r.Rollout.Plan.Steps[0].Nodes > 0
			in = bucket(vmID, r.Version) < r.Rollout.Percent*100 || (seated && canary)
		}
		if !in {
			continue
		}
		if cur, ok := best[r.Base]; !ok || patch(r.Version) > patch(cur.Version) {
			best[r.Base] = r
		}
	}
	p := hotfix.Pointer{Revoked: revoked}
	slices.Sort(p.Revoked)
	if len(best) > 0 || len(revokedBases) > 0 {
		p.Hotfixes = map[string]string{}
	}
	for _, base := range slices.Sorted(maps.Keys(best)) {
		p.Hotfixes[base] = best[base].Version
		p.Releases = append(p.Releases, best[base].Envelope)
	}
	for base := range revokedBases {
		if _, chosen := best[base]; !chosen {
			p.Hotfixes[base] = base + ".0"
		}
	}
	return p
}

func bucket(vmID, version string) int {
	h := sha256.Sum256([]byte(strings.ToLower(vmID) + "\x00" + version))
	return int(binary.BigEndian.Uint64(h[:8]) % 10000)
}

func patch(version string) int {
	n, _ := strconv.Atoi(version[strings.LastIndexByte(version, '.')+1:])
	return n
}

// diff returns "" if got is want, else what differs. Envelopes compare as
// compacted JSON: the service re-encodes the pointer.
func diff(got, want hotfix.Pointer) string {
	if !maps.Equal(got.Hotfixes, want.Hotfixes) {
		return fmt.Sprintf("hotfixes %v, want %v", got.Hotfixes, want.Hotfixes)
	}
	if !slices.Equal(got.Revoked, want.Revoked) {
		return fmt.Sprintf("revoked %v, want %v", got.Revoked, want.Revoked)
	}
	if len(got.Releases) != len(want.Releases) {
		return fmt.Sprintf("%d releases, want %d", len(got.Releases), len(want.Releases))
	}
	for i := range got.Releases {
		var a, b bytes.Buffer
		if json.Compact(&a, got.Releases[i]) != nil || json.Compact(&b, want.Releases[i]) != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
			return fmt.Sprintf("release envelope %d differs from the published one", i)
		}
	}
	return ""
}
