package hotfix

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestSelect(t *testing.T) {
	const (
		baked  = "202604.01.0"
		target = "202604.01.2"
		sum    = "ab12"
	)
	ptr := Pointer{Hotfixes: map[string]string{"202604.01": target}}
	good := Staged{Present: true, Reported: target, SHA256: sum}
	keys := Trust{Keys: true, Signed: map[string]string{target: sum}}
	tests := []struct {
		name       string
		in         Input
		want       Agent
		reason     Reason
		remove     bool
		detailHas  string
		wantTarget string
	}{
		{name: "unparsable-baked", in: Input{Baked: "dev", Pointer: ptr, Staged: good}, want: AgentBaked, reason: ReasonUnparsableVersion, remove: true},
		{name: "invalid-pointer", in: Input{Baked: baked, PointerErr: errors.New("bad json"), Staged: good}, want: AgentBaked, reason: ReasonInvalidPointer, remove: true, detailHas: "bad json"},
		{name: "no-pointer", in: Input{Baked: baked}, want: AgentBaked, reason: ReasonNoPointer},
		{name: "no-pointer-staged", in: Input{Baked: baked, Staged: good}, want: AgentBaked, reason: ReasonNoPointer, remove: true},
		{name: "other-base", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: map[string]string{"202605.01": "202605.01.1"}}}, want: AgentBaked, reason: ReasonNoHotfixForBase},
		{name: "same-patch", in: Input{Baked: target, Pointer: ptr, Staged: good}, want: AgentBaked, reason: ReasonNotNewer, remove: true},
		{name: "older", in: Input{Baked: "202604.01.5", Pointer: ptr}, want: AgentBaked, reason: ReasonNotNewer},
		{name: "malformed-target", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.x"}}}, want: AgentBaked, reason: ReasonNotNewer},
		{name: "tombstone", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: map[string]string{"202604.01": Tombstone("202604.01")}}, Staged: good}, want: AgentBaked, reason: ReasonRevoked, remove: true, detailHas: "withdrawn"},
		{name: "tombstone-over-patch-0-baked", in: Input{Baked: "202604.01.0", Pointer: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.0"}}}, want: AgentBaked, reason: ReasonRevoked},
		{name: "revoked", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: ptr.Hotfixes, Revoked: []string{target}}, Staged: good}, want: AgentBaked, reason: ReasonRevoked, remove: true, wantTarget: target},
		// One unreadable entry among readable ones: the list cannot say
		// whether the target is revoked, so it does not run.
		{name: "unreadable-revocation", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: ptr.Hotfixes, Revoked: []string{"202604.01.1"}, RevokedUnreadable: rels(`"202604.01.x"`)}, Trust: keys, Staged: good},
			want: AgentBaked, reason: ReasonUnreadableRevocation, remove: true, detailHas: `202604.01.x`, wantTarget: target},
		{name: "unreadable-revocation-long-entry", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: ptr.Hotfixes, RevokedUnreadable: rels(`"` + strings.Repeat("\u001b", 5000) + `"`)}, Staged: good},
			want: AgentBaked, reason: ReasonUnreadableRevocation, remove: true},
		// A readable revocation of the target is the more precise reason.
		{name: "revoked-and-unreadable", in: Input{Baked: baked, Pointer: Pointer{Hotfixes: ptr.Hotfixes, Revoked: []string{target}, RevokedUnreadable: rels(`1`)}, Staged: good},
			want: AgentBaked, reason: ReasonRevoked, remove: true},
		// Nothing would run anyway: the earlier reason stands.
		{name: "unreadable-revocation-not-newer", in: Input{Baked: "202604.01.5", Pointer: Pointer{Hotfixes: ptr.Hotfixes, RevokedUnreadable: rels(`1`)}}, want: AgentBaked, reason: ReasonNotNewer},
		{name: "keys-unusable", in: Input{Baked: baked, Pointer: ptr, Trust: Trust{Keys: true, KeysErr: errors.New("no keys")}, Staged: good}, want: AgentBaked, reason: ReasonUntrusted, remove: true},
		{name: "keys-no-release", in: Input{Baked: baked, Pointer: ptr, Trust: Trust{Keys: true, Refused: []string{"release 0: bad signature"}}, Staged: good}, want: AgentBaked, reason: ReasonUntrusted, remove: true, detailHas: "bad signature"},
		{name: "not-staged", in: Input{Baked: baked, Pointer: ptr, Trust: keys}, want: AgentBaked, reason: ReasonNotStaged, wantTarget: target},
		{name: "unsafe", in: Input{Baked: baked, Pointer: ptr, Trust: keys, Staged: Staged{Present: true, Unsafe: "it is a symlink"}}, want: AgentBaked, reason: ReasonStagedUnsafe, remove: true},
		{name: "probe-failed", in: Input{Baked: baked, Pointer: ptr, Staged: Staged{Present: true, ProbeErr: "timed out"}}, want: AgentBaked, reason: ReasonStagedMismatch, remove: true},
		{name: "wrong-version", in: Input{Baked: baked, Pointer: ptr, Staged: Staged{Present: true, Reported: "202604.01.1"}}, want: AgentBaked, reason: ReasonStagedMismatch, remove: true},
		{name: "control-chars-quoted", in: Input{Baked: baked, Pointer: ptr, Staged: Staged{Present: true, Reported: "\x1b[2J"}}, want: AgentBaked, reason: ReasonStagedMismatch, remove: true, detailHas: `"\x1b[2J"`},
		{name: "wrong-digest", in: Input{Baked: baked, Pointer: ptr, Trust: keys, Staged: Staged{Present: true, Reported: target, SHA256: "ffff"}}, want: AgentBaked, reason: ReasonStagedMismatch, remove: true},
		{name: "digest-not-computed", in: Input{Baked: baked, Pointer: ptr, Trust: keys, Staged: Staged{Present: true}}, want: AgentBaked, reason: ReasonStagedMismatch, remove: true},
		{name: "hotfix-keys", in: Input{Baked: baked, Pointer: ptr, Trust: keys, Staged: good}, want: AgentHotfix, reason: ReasonHotfix, wantTarget: target},
		{name: "hotfix-digest-case", in: Input{Baked: baked, Pointer: ptr, Trust: keys, Staged: Staged{Present: true, Reported: target, SHA256: "AB12"}}, want: AgentHotfix, reason: ReasonHotfix},
		{name: "hotfix-no-keys", in: Input{Baked: baked, Pointer: ptr, Staged: Staged{Present: true, Reported: target}}, want: AgentHotfix, reason: ReasonHotfix},
		{name: "legacy-version", in: Input{Baked: baked, Pointer: Pointer{Version: target}, Staged: Staged{Present: true, Reported: target}}, want: AgentHotfix, reason: ReasonHotfix},
		{name: "other-base-keeps-legacy", in: Input{Baked: baked, Pointer: Pointer{Version: target, Hotfixes: map[string]string{"202605.01": "202605.01.1"}}, Staged: Staged{Present: true, Reported: target}}, want: AgentHotfix, reason: ReasonHotfix},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Select(tt.in)
			if d.Agent != tt.want || d.Reason != tt.reason || d.Remove != tt.remove {
				t.Fatalf("Select() = %s/%s remove=%v (%s), want %s/%s remove=%v", d.Agent, d.Reason, d.Remove, d.Detail, tt.want, tt.reason, tt.remove)
			}
			if tt.detailHas != "" && !strings.Contains(d.Detail, tt.detailHas) {
				t.Errorf("Detail = %q, want it to contain %q", d.Detail, tt.detailHas)
			}
			if strings.ContainsAny(d.Detail, "\x1b\r\n") {
				t.Errorf("Detail %q carries raw control characters", d.Detail)
			}
			if len(d.Detail) > 512 {
				t.Errorf("Detail is %d bytes, want one line", len(d.Detail))
			}
			if tt.wantTarget != "" && d.Target.String() != tt.wantTarget {
				t.Errorf("Target = %s, want %s", d.Target, tt.wantTarget)
			}
			if d.Agent == AgentHotfix && tt.in.Trust.Keys && d.SHA256 == "" {
				t.Errorf("hotfix chosen with keys but no signed digest")
			}
		})
	}
}

// FuzzSelect checks Select's safety property on arbitrary facts: the hotfix
// runs only as the exact, unrevoked, newer target, safe and probed, signed
// when keys exist.
func FuzzSelect(f *testing.F) {
	f.Add("202604.01.0", "202604.01", "202604.01.2", "202604.01.2", "", false, "", "")
	f.Add("202604.01.0", "202604.01", "202604.01.2", "202604.01.2", "202604.01.2", true, "ab", "ab")
	f.Fuzz(func(t *testing.T, baked, base, want, reported, revoked string, keys bool, signed, sum string) {
		in := Input{
			Baked:   baked,
			Pointer: Pointer{Hotfixes: map[string]string{base: want}},
			Staged:  Staged{Present: true, Reported: reported, SHA256: sum},
		}
		if revoked != "" {
			// As ParsePointer splits a revoked list.
			if _, err := ParseVersion(revoked); err == nil {
				in.Pointer.Revoked = []string{revoked}
			} else {
				in.Pointer.RevokedUnreadable = []json.RawMessage{json.RawMessage(strconv.Quote(revoked))}
			}
		}
		if keys {
			in.Trust = Trust{Keys: true, Signed: map[string]string{want: signed}}
		}
		d := Select(in)
		if d.Agent != AgentHotfix {
			if !d.Remove {
				t.Fatalf("baked chosen (%s) but a present staged file is kept", d.Reason)
			}
			return
		}
		cur, err := ParseVersion(baked)
		if err != nil {
			t.Fatalf("hotfix chosen for unparsable baked %q", baked)
		}
		if !IsUpgrade(cur, d.Target) || reported != d.Target.String() || in.Pointer.IsRevoked(d.Target) || len(in.Pointer.RevokedUnreadable) > 0 {
			t.Fatalf("hotfix chosen: baked %q target %s reported %q revoked %q", baked, d.Target, reported, revoked)
		}
		if keys && (signed == "" || !strings.EqualFold(sum, signed)) {
			t.Fatalf("hotfix chosen with keys: signed %q staged %q", signed, sum)
		}
	})
}
