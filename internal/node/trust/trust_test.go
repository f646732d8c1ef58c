package trust

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

func sameLinks(a, b []json.RawMessage) bool {
	return slices.EqualFunc(a, b, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })
}

// TestEvaluateChain walks the served key-set chain from the baked root and
// the kept links, as a hostile service would serve it.
func TestEvaluateChain(t *testing.T) {
	t.Parallel()
	c := newChain(t)
	v2, v3, v4 := c.link(2), c.link(3), c.link(4)

	// A fork at v3: other keys, signed by v2's threshold, and a v4 signed
	// by the forked v3's keys.
	fork := &chain{t: t, set: map[int64][]ed25519.PrivateKey{2: c.set[2]}, log: map[int64]release.LogPolicy{}}
	forkV3, forkV4 := fork.link(3), fork.link(4)

	oldOnly := sign(t, c.doc(2), c.set[1][0], c.set[1][1]) // v2 not signed by its own keys
	ownOnly := sign(t, c.doc(2), c.set[2][0], c.set[2][1]) // nor by v1's
	expired := c.doc(2)
	expired.Expires = testNow.Add(-time.Hour)
	expiredV2 := sign(t, expired, c.set[1][0], c.set[1][1], c.set[2][0], c.set[2][1])

	long := newChain(t)
	long.set[1] = c.set[1]
	links17 := long.links(2, 18)
	links21 := long.links(2, 21)

	tests := []struct {
		name        string
		kept        []json.RawMessage
		served      []json.RawMessage
		wantErr     bool
		wantVersion int64
		wantKept    []json.RawMessage // the chain Next keeps
	}{
		{name: "baked-root-alone", wantVersion: 1},
		{name: "walk-v2-v3", served: []json.RawMessage{v2, v3}, wantVersion: 3, wantKept: []json.RawMessage{v2, v3}},
		{name: "kept-v3-served-v2-v4", kept: []json.RawMessage{v2, v3}, served: []json.RawMessage{v2, v3, v4}, wantVersion: 4, wantKept: []json.RawMessage{v2, v3, v4}},
		{name: "kept-v3-served-v4", kept: []json.RawMessage{v2, v3}, served: []json.RawMessage{v4}, wantVersion: 4, wantKept: []json.RawMessage{v2, v3, v4}},
		{name: "fork-at-v3", kept: []json.RawMessage{v2, v3}, served: []json.RawMessage{v2, forkV3, forkV4}, wantErr: true, wantKept: []json.RawMessage{v2, v3}},
		{name: "fork-at-v3-nothing-kept", served: []json.RawMessage{v2, forkV3, v4}, wantErr: true},
		{name: "served-shorter", kept: []json.RawMessage{v2, v3, v4}, served: []json.RawMessage{v2, v3}, wantVersion: 4, wantKept: []json.RawMessage{v2, v3, v4}},
		{name: "served-none-kept-wins", kept: []json.RawMessage{v2, v3}, wantVersion: 3, wantKept: []json.RawMessage{v2, v3}},
		{name: "old-threshold-only", served: []json.RawMessage{oldOnly}, wantErr: true},
		{name: "own-threshold-only", served: []json.RawMessage{ownOnly}, wantErr: true},
		{name: "gap", served: []json.RawMessage{v3}, wantErr: true},
		{name: "out-of-order", served: []json.RawMessage{v3, v2}, wantErr: true},
		{name: "17-links", served: links17, wantErr: true},
		{name: "16-links", served: links17[:16], wantVersion: 17, wantKept: links17[:16]},
		{name: "kept-10-served-10", kept: links21[:10], served: links21[10:], wantVersion: 21, wantKept: links21},
		{name: "expired-newest", served: []json.RawMessage{expiredV2}, wantErr: true},
		{name: "expired-intermediate", served: []json.RawMessage{expiredV2, v3}, wantVersion: 3, wantKept: []json.RawMessage{expiredV2, v3}},
		{name: "kept-newest-expired", kept: []json.RawMessage{expiredV2}, wantErr: true, wantKept: []json.RawMessage{expiredV2}},
		{name: "garbage-link", served: []json.RawMessage{json.RawMessage(`{"payloadType":"x"}`)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kept := State{KeySets: tt.kept}
			v := Evaluate(c.root(), kept, hotfix.Pointer{KeySets: tt.served}, testNow)
			if (v.Err != nil) != tt.wantErr {
				t.Fatalf("Evaluate: Err = %v, want error %v", v.Err, tt.wantErr)
			}
			if !tt.wantErr && v.KeySetVersion() != tt.wantVersion {
				t.Errorf("KeySetVersion() = %d, want %d", v.KeySetVersion(), tt.wantVersion)
			}
			next, changed := v.Next(kept, testBaked)
			if !sameLinks(next.KeySets, tt.wantKept) {
				t.Errorf("Next kept %d links, want %d", len(next.KeySets), len(tt.wantKept))
			}
			if want := !sameLinks(tt.kept, tt.wantKept); changed != want {
				t.Errorf("Next changed = %v, want %v", changed, want)
			}
		})
	}
}

// TestEvaluateBrokenKeptChain: a kept chain that no longer verifies from
// the baked root (the disk was damaged or written by someone else) is
// dropped, said so, and the served chain is walked from the root.
func TestEvaluateBrokenKeptChain(t *testing.T) {
	t.Parallel()
	c := newChain(t)
	v2, v3 := c.link(2), c.link(3)
	other := newChain(t)
	alien := other.link(2) // signed by keys the root does not know

	v := Evaluate(c.root(), State{KeySets: []json.RawMessage{alien}}, hotfix.Pointer{KeySets: []json.RawMessage{v2, v3}}, testNow)
	if v.Err != nil {
		t.Fatalf("Evaluate: Err = %v, want the served chain walked from the root", v.Err)
	}
	if v.KeptErr == nil {
		t.Error("KeptErr = nil, want the dropped kept chain named")
	}
	if v.KeySetVersion() != 3 {
		t.Errorf("KeySetVersion() = %d, want 3", v.KeySetVersion())
	}
	next, changed := v.Next(State{KeySets: []json.RawMessage{alien}}, testBaked)
	if !changed || !sameLinks(next.KeySets, []json.RawMessage{v2, v3}) {
		t.Errorf("Next = %d links (changed %v), want the 2 verified ones", len(next.KeySets), changed)
	}

	// Nothing served: the root alone, and the broken chain is not kept.
	v = Evaluate(c.root(), State{KeySets: []json.RawMessage{alien}}, hotfix.Pointer{}, testNow)
	if v.Err != nil || v.KeptErr == nil || v.KeySetVersion() != 1 {
		t.Errorf("Evaluate with nothing served = version %d, Err %v, KeptErr %v; want version 1, no Err, KeptErr", v.KeySetVersion(), v.Err, v.KeptErr)
	}
	if next, _ := v.Next(State{KeySets: []json.RawMessage{alien}}, testBaked); len(next.KeySets) != 0 {
		t.Errorf("Next kept %d links of a broken chain, want 0", len(next.KeySets))
	}
}

// logCase is one log evidence a node is served.
type logCase struct {
	name string
	// kept is the checkpoint the node kept ("" none); log the pointer's.
	kept string
	log  json.RawMessage
	// keysets are the served links (a log key rotation).
	keysets []json.RawMessage
	// wantErr: the evidence does not hold; wantLogged: the release is
	// proven; wantCheckpoint: the checkpoint Next keeps.
	wantErr        bool
	wantLogged     bool
	wantCheckpoint string
}

func TestEvaluateLog(t *testing.T) {
	t.Parallel()
	for _, required := range []bool{true, false} {
		t.Run(fmt.Sprintf("required=%v", required), func(t *testing.T) {
			t.Parallel()
			testEvaluateLog(t, required)
		})
	}
}

func testEvaluateLog(t *testing.T, required bool) {
	c := newChain(t)
	l := newLog(t, "nodehotfix.example/log")
	c.log[1] = l.policy(required)
	env := releaseOf(t, "202604.01.1", c.set[1][0], c.set[1][1])
	l.tree.filler(t, 5)
	idx := l.tree.add(t, env)
	l.tree.filler(t, 4) // size 10
	cp10 := l.checkpoint(t, 10, testNow.Add(-time.Hour), 2)
	l.tree.filler(t, 6) // size 16
	cp16 := l.checkpoint(t, 16, testNow.Add(-time.Minute), 2)

	other := newLog(t, "nodehotfix.example/log") // same origin, another key
	other.tree = l.tree
	otherCP := other.checkpoint(t, 16, testNow, 2)

	forked := l.signedCheckpoint(t, translog.Checkpoint{Origin: l.signer.Name(), Size: 10, Hash: l.tree.root(t, 9)}, testNow, 2)

	// Log key rotation: v2 names a new log; the node kept v1's log.
	l2 := newLog(t, "nodehotfix.example/log2")
	c.log[2] = l2.policy(required)
	v2 := c.link(2)
	l2.tree.filler(t, 2)
	idx2 := l2.tree.add(t, env)
	l2cp := l2.checkpoint(t, 3, testNow, 2)

	tests := []logCase{
		{name: "no-log-member", wantErr: true},
		{name: "proven", log: l.bundle(t, cp16, []int64{idx}, 0), wantLogged: true, wantCheckpoint: string(cp16)},
		{name: "other-log-key", log: l.bundle(t, otherCP, []int64{idx}, 0), wantErr: true},
		{name: "one-witness-of-two", log: l.bundle(t, l.checkpoint(t, 16, testNow, 1), []int64{idx}, 0), wantErr: true},
		{name: "no-witness", log: l.bundle(t, l.checkpoint(t, 16, testNow, 0), []int64{idx}, 0), wantErr: true},
		{name: "stale-cosignature", log: l.bundle(t, l.checkpoint(t, 16, testNow.Add(-25*time.Hour), 2), []int64{idx}, 0), wantErr: true},
		{name: "future-cosignature", log: l.bundle(t, l.checkpoint(t, 16, testNow.Add(time.Hour), 2), []int64{idx}, 0), wantErr: true},
		{name: "release-not-in-proofs", log: l.bundle(t, cp16, []int64{0, 1}, 0), wantCheckpoint: string(cp16)},
		{name: "proof-for-another-checkpoint", log: swapCheckpoint(t, l.bundle(t, cp10, []int64{idx}, 0), cp16), wantCheckpoint: string(cp16)},
		{name: "kept-same", kept: string(cp16), log: l.bundle(t, cp16, []int64{idx}, 0), wantLogged: true, wantCheckpoint: string(cp16)},
		{name: "rollback", kept: string(cp16), log: l.bundle(t, cp10, []int64{idx}, 0), wantErr: true, wantCheckpoint: string(cp16)},
		{name: "fork-same-size", kept: string(cp10), log: l.bundle(t, forked, []int64{}, 0), wantErr: true, wantCheckpoint: string(cp10)},
		{name: "larger-no-consistency", kept: string(cp10), log: l.bundle(t, cp16, []int64{idx}, 0), wantErr: true, wantCheckpoint: string(cp10)},
		{name: "larger-consistency-from-other-size", kept: string(cp10), log: l.bundle(t, cp16, []int64{idx}, 9), wantErr: true, wantCheckpoint: string(cp10)},
		{name: "larger-consistent", kept: string(cp10), log: l.bundle(t, cp16, []int64{idx}, 10), wantLogged: true, wantCheckpoint: string(cp16)},
		{name: "kept-recosigned-older", kept: string(cp16), log: l.bundle(t, l.checkpoint(t, 16, testNow.Add(-2*time.Hour), 2), []int64{idx}, 0), wantLogged: true, wantCheckpoint: string(cp16)},
		{name: "malformed-bundle", log: json.RawMessage(`{"checkpoint":"x","proofs":{},"extra":1}`), wantErr: true},
		{name: "log-key-rotated", kept: string(cp16), keysets: []json.RawMessage{v2}, log: l2.bundle(t, l2cp, []int64{idx2}, 0), wantLogged: true, wantCheckpoint: string(l2cp)},
		{name: "log-key-rotated-old-log-served", kept: string(cp16), keysets: []json.RawMessage{v2}, log: l.bundle(t, cp16, []int64{idx}, 0), wantErr: true, wantCheckpoint: string(cp16)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kept := State{Checkpoint: tt.kept}
			p := hotfix.Pointer{Releases: []json.RawMessage{env}, KeySets: tt.keysets, Log: tt.log}
			v := Evaluate(c.root(), kept, p, testNow)
			if got := v.LogErr != nil; got != tt.wantErr {
				t.Fatalf("Evaluate: LogErr = %v, want error %v", v.LogErr, tt.wantErr)
			}
			if got, want := v.Err != nil, tt.wantErr && required; got != want {
				t.Errorf("Evaluate: Err = %v, want error %v (required %v)", v.Err, want, required)
			}
			if v.LogRequired() != required {
				t.Errorf("LogRequired() = %v, want %v", v.LogRequired(), required)
			}
			if err := v.CheckLogged(env); (err == nil) != tt.wantLogged {
				t.Errorf("CheckLogged = %v, want proven %v", err, tt.wantLogged)
			}
			next, _ := v.Next(kept, testBaked)
			if next.Checkpoint != tt.wantCheckpoint {
				t.Errorf("Next keeps checkpoint\n%s\nwant\n%s", next.Checkpoint, tt.wantCheckpoint)
			}
		})
	}
}

// swapCheckpoint replaces the checkpoint of bundle raw with cp, keeping
// its proofs.
func swapCheckpoint(t *testing.T, raw json.RawMessage, cp []byte) json.RawMessage {
	t.Helper()
	b, err := translog.ParseBundle(raw)
	if err != nil {
		t.Fatal(err)
	}
	b.Checkpoint = cp
	out, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testBaked is the baked agent the kept revocations are judged for.
var testBaked = hotfix.MustParseVersion("202604.01.0")

// TestRevocationsKept: a revocation seen once stays kept when the next
// document omits it, and a document flooding the list cannot push the
// kept ones out.
func TestRevocationsKept(t *testing.T) {
	t.Parallel()
	root := newChain(t).root()
	v := Evaluate(root, State{}, hotfix.Pointer{Revoked: []string{"202604.01.3", " 202604.01.3 ", "not-a-version"}}, testNow)
	kept, changed := v.Next(State{}, testBaked)
	if !changed || !slices.Equal(kept.Revoked, []string{"202604.01.3"}) {
		t.Fatalf("Next = %q (changed %v), want [202604.01.3]", kept.Revoked, changed)
	}
	v = Evaluate(root, kept, hotfix.Pointer{}, testNow)
	if !slices.Contains(v.Revoked, "202604.01.3") {
		t.Errorf("Revoked = %q, want the kept revocation", v.Revoked)
	}
	if again, changed := v.Next(kept, testBaked); changed || !slices.Equal(again.Revoked, kept.Revoked) {
		t.Errorf("Next of nothing new = %q (changed %v), want unchanged", again.Revoked, changed)
	}

	// Other bases' versions, and this base's not newer than the baked
	// agent, can never run here: they are not kept at all.
	v = Evaluate(root, kept, hotfix.Pointer{Revoked: []string{"202701.01.1", "202604.01.0", "202604.01.4"}}, testNow)
	if next, _ := v.Next(kept, testBaked); !slices.Equal(next.Revoked, []string{"202604.01.3", "202604.01.4"}) {
		t.Errorf("Next = %q, want only this base's versions above the baked one", next.Revoked)
	}

	var flood []string
	for i := range 2 * maxKeptRevoked {
		flood = append(flood, fmt.Sprintf("202604.01.%d", i+10))
	}
	v = Evaluate(root, kept, hotfix.Pointer{Revoked: flood}, testNow)
	next, _ := v.Next(kept, testBaked)
	if len(next.Revoked) > maxKeptRevoked {
		t.Errorf("Next kept %d revocations, want at most %d", len(next.Revoked), maxKeptRevoked)
	}
	if !slices.Contains(next.Revoked, "202604.01.3") {
		t.Error("a flood of served revocations pushed the kept one out")
	}
}

func TestLoadSave(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "trust.json")
	if s, err := Load(path); err != nil || s.Checkpoint != "" || s.KeySets != nil || s.Revoked != nil {
		t.Fatalf("Load(missing) = %+v, %v; want the zero State", s, err)
	}
	c := newChain(t)
	want := State{KeySets: []json.RawMessage{c.link(2)}, Checkpoint: "cp\n", Revoked: []string{"202604.01.3"}}
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil || !sameLinks(got.KeySets, want.KeySets) || got.Checkpoint != want.Checkpoint || !slices.Equal(got.Revoked, want.Revoked) {
		t.Errorf("Load(Save(s)) = %+v, %v; want %+v", got, err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("Save left %d entries in its directory, want 1", len(entries))
	}

	for name, content := range map[string]string{
		"truncated":     `{"keysets":[`,
		"unknown-key":   `{"keysets":[],"extra":1}`,
		"trailing-data": `{} {}`,
		"not-json":      "\x00\x01",
		"too-large":     `{"revoked":["` + string(bytes.Repeat([]byte("a"), MaxStateSize)) + `"]}`,
	} {
		p := filepath.Join(t.TempDir(), "trust.json")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil {
			t.Errorf("Load(%s) = nil error, want one", name)
		}
	}
	link := filepath.Join(t.TempDir(), "trust.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(link); err == nil {
		t.Error("Load(symlink) = nil error, want the link refused")
	}
	if err := Save(filepath.Join(t.TempDir(), "missing", "trust.json"), want); err == nil {
		t.Error("Save into a missing directory = nil error")
	}
}

// TestDeclared is what check-hotfix sends for each state of the node's
// files.
func TestDeclared(t *testing.T) {
	t.Parallel()
	c := newChain(t)
	l := newLog(t, "nodehotfix.example/log")
	l.tree.filler(t, 42)
	cp := string(l.checkpoint(t, 42, testNow, 2))
	v5 := newChain(t)
	v5file, err := release.MarshalKeySetFile(release.KeySetDocument{Version: 5, Threshold: 1, Keys: pubs(v5.set[1])})
	if err != nil {
		t.Fatal(err)
	}
	state := func(s State) []byte {
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tests := []struct {
		name             string
		keys, state      []byte // nil: no file
		wantKeys, wantCP int64
	}{
		{name: "no-files"},
		{name: "no-keys", state: state(State{Checkpoint: cp}), wantKeys: 0},
		{name: "corrupt-keys", keys: []byte("garbage\n"), state: state(State{Checkpoint: cp})},
		{name: "keys-no-state", keys: c.rootFile(), wantKeys: 1},
		{name: "baked-v5", keys: v5file, wantKeys: 5},
		{name: "corrupt-state", keys: c.rootFile(), state: []byte(`{"keysets":`), wantKeys: 1},
		{name: "kept-chain", keys: c.rootFile(), state: state(State{KeySets: c.links(2, 3)}), wantKeys: 3},
		{name: "kept-checkpoint", keys: c.rootFile(), state: state(State{Checkpoint: cp}), wantKeys: 1, wantCP: 42},
		{name: "kept-both", keys: c.rootFile(), state: state(State{KeySets: c.links(2, 2), Checkpoint: cp}), wantKeys: 2, wantCP: 42},
		{name: "corrupt-checkpoint", keys: c.rootFile(), state: state(State{Checkpoint: "nodehotfix.example/log\n-1\n"}), wantKeys: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			kp, sp := filepath.Join(dir, "keys.pub"), filepath.Join(dir, "trust.json")
			for p, data := range map[string][]byte{kp: tt.keys, sp: tt.state} {
				if data != nil {
					if err := os.WriteFile(p, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			ks, size := Declared(kp, sp)
			if ks != tt.wantKeys || size != tt.wantCP {
				t.Errorf("Declared = %d, %d; want %d, %d", ks, size, tt.wantKeys, tt.wantCP)
			}
		})
	}
}

// TestServedChainFromTheNextVersionIsTakenAsServed: a served chain that
// starts at the version after the one the node holds is walked exactly as
// served: a repeated or badly signed link in it, or more than
// release.MaxChain links, refuse it whole, rather than being dropped as
// links the node already holds.
func TestServedChainFromTheNextVersionIsTakenAsServed(t *testing.T) {
	t.Parallel()
	c := newChain(t)
	v2, v3 := c.link(2), c.link(3)
	oldOnly := sign(t, c.doc(2), c.set[1][0], c.set[1][1])
	long := []json.RawMessage{c.link(2)}
	for v := int64(3); v <= release.MaxChain+2; v++ {
		long = append(long, c.link(v))
	}
	for name, served := range map[string][]json.RawMessage{
		"a repeated link":          {v2, v2, v3},
		"a link its own keys skip": {v2, oldOnly, v3},
		"more than MaxChain links": long,
	} {
		v := Evaluate(c.root(), State{}, hotfix.Pointer{KeySets: served}, testNow)
		if v.Err == nil {
			t.Errorf("%s: accepted at key-set version %d, want the chain refused", name, v.KeySetVersion())
		}
	}
	// As served, it walks.
	if v := Evaluate(c.root(), State{}, hotfix.Pointer{KeySets: []json.RawMessage{v2, v3}}, testNow); v.Err != nil || v.KeySetVersion() != 3 {
		t.Errorf("v2, v3: %v at version %d, want version 3", v.Err, v.KeySetVersion())
	}
}
