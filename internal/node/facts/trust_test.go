package facts

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/trust"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// memTree is a log's stored hashes in memory, a tlog.HashReader.
type memTree struct {
	hashes []tlog.Hash
	n      int64
}

func (m *memTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(m.hashes)) {
			return nil, fmt.Errorf("hash %d not stored", x)
		}
		out[i] = m.hashes[x]
	}
	return out, nil
}

func (m *memTree) add(t *testing.T, rec []byte) int64 {
	t.Helper()
	hs, err := tlog.StoredHashes(m.n, rec, m)
	if err != nil {
		t.Fatal(err)
	}
	m.hashes = append(m.hashes, hs...)
	m.n++
	return m.n - 1
}

// trustedNode is a node whose baked key set is 2 of 3 keys and requires
// the transparency log, with 2 of 2 witnesses.
type trustedNode struct {
	*node
	priv   []ed25519.PrivateKey
	logSig note.Signer
	wit    []*translog.Cosigner
	tree   *memTree
	now    time.Time
}

func newTrustedNode(t *testing.T, required bool) *trustedNode {
	t.Helper()
	n := &trustedNode{node: newNode(t), tree: &memTree{}, now: time.Now()}
	var pubs []ed25519.PublicKey
	for range 3 {
		pub, priv, err := release.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pubs, n.priv = append(pubs, pub), append(n.priv, priv)
	}
	skey, vkey, err := translog.GenerateLogKey("nodehotfix.example/log")
	if err != nil {
		t.Fatal(err)
	}
	if n.logSig, err = translog.NewLogSigner(skey); err != nil {
		t.Fatal(err)
	}
	var witV []string
	for i := range 2 {
		s, v, err := translog.GenerateWitnessKey(fmt.Sprintf("witness%d.example", i))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := translog.NewCosigner(s, func() time.Time { return n.now })
		if err != nil {
			t.Fatal(err)
		}
		n.wit, witV = append(n.wit, cs), append(witV, v)
	}
	file, err := release.MarshalKeySetFile(release.KeySetDocument{Version: 1, Threshold: 2, Keys: pubs,
		Log: release.LogPolicy{Key: vkey, Witnesses: witV, Quorum: 2, MaxCheckpointAge: time.Hour, Required: required}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.root.ReleaseKeys(), file, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// release returns a release of target for the staged script, signed by
// the first signers keys.
func (n *trustedNode) release(signers int) []byte {
	n.t.Helper()
	sum := sha256.Sum256(n.script)
	env, err := release.Sign(release.Release{
		Base: "202604.01", Version: target, NotAfter: n.now.Add(time.Hour),
		Artifacts: map[string]release.Artifact{release.Platform(runtime.GOOS, runtime.GOARCH): {URL: "https://x/a", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(n.script))}},
	}, n.priv[0])
	if err != nil {
		n.t.Fatal(err)
	}
	for _, k := range n.priv[1:signers] {
		if env, err = release.AddSignature(env, k); err != nil {
			n.t.Fatal(err)
		}
	}
	return env
}

// bundle appends records to the log and returns the log member proving
// the ones prove says, under a checkpoint cosigned by both witnesses.
func (n *trustedNode) bundle(records [][]byte, prove []bool) json.RawMessage {
	n.t.Helper()
	n.tree.add(n.t, []byte(`{"filler":0}`))
	var idx []int64
	for i, r := range records {
		if x := n.tree.add(n.t, r); prove[i] {
			idx = append(idx, x)
		}
	}
	root, err := tlog.TreeHash(n.tree.n, n.tree)
	if err != nil {
		n.t.Fatal(err)
	}
	text, err := translog.Checkpoint{Origin: n.logSig.Name(), Size: n.tree.n, Hash: root}.Format()
	if err != nil {
		n.t.Fatal(err)
	}
	msg, err := note.Sign(&note.Note{Text: string(text)}, n.logSig, n.wit[0], n.wit[1])
	if err != nil {
		n.t.Fatal(err)
	}
	b, err := translog.Prove(n.tree, msg, idx, 0)
	if err != nil {
		n.t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		n.t.Fatal(err)
	}
	return raw
}

func (n *trustedNode) state(s State) {
	n.t.Helper()
	if err := trust.Save(n.root.TrustState(), s); err != nil {
		n.t.Fatal(err)
	}
}

// State is trust.State, for the table's brevity.
type State = trust.State

// TestGatherTrust: the decision runs a release only under the threshold
// and, when the key set requires it, proven in the log; what the node
// kept can only add to what it refuses.
func TestGatherTrust(t *testing.T) {
	t.Parallel()
	want := map[string]string{"202604.01": target}
	tests := []struct {
		name        string
		notRequired bool
		setup       func(n *trustedNode) hotfix.Pointer
		wantRun     bool
		reason      hotfix.Reason
		wantRefused bool
	}{
		{name: "2-of-3-proven", wantRun: true, reason: hotfix.ReasonHotfix, setup: func(n *trustedNode) hotfix.Pointer {
			env := n.release(2)
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: n.bundle([][]byte{env}, []bool{true})}
		}},
		{name: "signed-once", reason: hotfix.ReasonUntrusted, wantRefused: true, setup: func(n *trustedNode) hotfix.Pointer {
			env := n.release(1)
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: n.bundle([][]byte{env}, []bool{true})}
		}},
		{name: "not-in-log", reason: hotfix.ReasonUntrusted, wantRefused: true, setup: func(n *trustedNode) hotfix.Pointer {
			env := n.release(2)
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: n.bundle([][]byte{env}, []bool{false})}
		}},
		{name: "no-log-member", reason: hotfix.ReasonUntrusted, setup: func(n *trustedNode) hotfix.Pointer {
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{n.release(2)}}
		}},
		{name: "no-log-member-not-required", notRequired: true, wantRun: true, reason: hotfix.ReasonHotfix, setup: func(n *trustedNode) hotfix.Pointer {
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{n.release(2)}}
		}},
		{name: "corrupt-kept-state", wantRun: true, reason: hotfix.ReasonHotfix, wantRefused: true, setup: func(n *trustedNode) hotfix.Pointer {
			if err := os.WriteFile(n.root.TrustState(), []byte(`{"keysets":[`), 0o644); err != nil {
				n.t.Fatal(err)
			}
			env := n.release(2)
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: n.bundle([][]byte{env}, []bool{true})}
		}},
		{name: "broken-kept-chain", wantRun: true, reason: hotfix.ReasonHotfix, wantRefused: true, setup: func(n *trustedNode) hotfix.Pointer {
			other := newTrustedNode(n.t, true)
			_, priv, _ := release.GenerateKey(rand.Reader)
			alien, err := release.SignKeySet(release.KeySetDocument{Version: 2, Expires: n.now.Add(time.Hour), Threshold: 1, Keys: []ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}}, other.priv[0])
			if err != nil {
				n.t.Fatal(err)
			}
			n.state(State{KeySets: []json.RawMessage{alien}})
			env := n.release(2)
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: n.bundle([][]byte{env}, []bool{true})}
		}},
		{name: "kept-revoked", reason: hotfix.ReasonRevoked, setup: func(n *trustedNode) hotfix.Pointer {
			n.state(State{Revoked: []string{target}})
			env := n.release(2)
			return hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: n.bundle([][]byte{env}, []bool{true})}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newTrustedNode(t, !tt.notRequired)
			n.pointer(tt.setup(n))
			f := Gather(t.Context(), Config{Root: n.root, Baked: baked, Now: n.now})
			if d := hotfix.Select(f.Input); d.Reason != tt.reason {
				t.Errorf("Select = %s (%s), want %s", d.Reason, d.Detail, tt.reason)
			}
			if n.wasRun() != tt.wantRun {
				t.Errorf("staged binary run: %v, want %v", n.wasRun(), tt.wantRun)
			}
			if got := len(f.Trust.Refused) > 0; got != tt.wantRefused {
				t.Errorf("Trust.Refused = %q, want some: %v", f.Trust.Refused, tt.wantRefused)
			}
		})
	}
}

// TestGatherRevocationOutlivesThePointer: a version revoked by one
// pointer and absent from the next stays revoked once the node kept it,
// and is never started.
func TestGatherRevocationOutlivesThePointer(t *testing.T) {
	t.Parallel()
	n := newTrustedNode(t, true)
	env := n.release(2)
	log := n.bundle([][]byte{env}, []bool{true})
	want := map[string]string{"202604.01": target}
	n.pointer(hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: log, Revoked: []string{target}})
	f := Gather(t.Context(), Config{Root: n.root, Baked: baked, Now: n.now})
	if d := hotfix.Select(f.Input); d.Reason != hotfix.ReasonRevoked {
		t.Fatalf("Select = %s (%s), want revoked", d.Reason, d.Detail)
	}
	next, changed := f.View.Next(f.Kept, hotfix.MustParseVersion(baked))
	if !changed {
		t.Fatal("View.Next: unchanged, want the revocation kept")
	}
	n.state(next) // what download-hotfix does

	n.pointer(hotfix.Pointer{Hotfixes: want, Releases: []json.RawMessage{env}, Log: log})
	f = Gather(t.Context(), Config{Root: n.root, Baked: baked, Now: n.now})
	if d := hotfix.Select(f.Input); d.Reason != hotfix.ReasonRevoked {
		t.Errorf("Select after the revocation left the pointer = %s (%s), want revoked", d.Reason, d.Detail)
	}
	if n.wasRun() {
		t.Error("the revoked binary was started")
	}
}
