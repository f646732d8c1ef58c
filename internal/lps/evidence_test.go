package lps

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/hotfix"
	rel "nodehotfix/internal/release"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// memLog is a log of n synthetic records held as its stored hashes, for
// sizing proofs at scale without a store.
type memLog map[int64]tlog.Hash

func (m memLog) ReadHashes(ix []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ix))
	for i, x := range ix {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

func (m memLog) LogHashes(_ context.Context, ix []int64) ([]tlog.Hash, error) {
	return m.ReadHashes(ix)
}
func (m memLog) LogRecords(context.Context, int64, int64) ([][]byte, error) { return nil, nil }
func (m memLog) Checkpoint(context.Context) (int64, []byte, error)          { return 0, nil, nil }

// logOf returns a log of size synthetic records whose last is last, and
// its tree hash.
func logOf(t testing.TB, size int64, last []byte) (memLog, tlog.Hash) {
	t.Helper()
	m := memLog{}
	for i := int64(0); i < size; i++ {
		rec := []byte(fmt.Sprintf(`{"record":%d}`, i))
		if i == size-1 {
			rec = last
		}
		hs, err := tlog.StoredHashes(i, rec, m)
		if err != nil {
			t.Fatal(err)
		}
		base := tlog.StoredHashCount(i)
		for j, h := range hs {
			m[base+int64(j)] = h
		}
	}
	root, err := tlog.TreeHash(size, m)
	if err != nil {
		t.Fatal(err)
	}
	return m, root
}

// TestServedEvidenceSize: a node of a base, baked with key-set version 1,
// served a release from a log of a million records with the whole chain
// of 16 key-set versions (3 keys, 2 signatures each), a checkpoint with
// three witnesses' cosignatures and a consistency proof from a checkpoint
// half as old, stays within ServedBudget, and its evidence within what
// publishing allows for it (MaxChainBytes, EvidenceAllowance).
func TestServedEvidenceSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a million-record tree (a few seconds)")
	}
	const size = 1 << 20
	envelope := signedRelease(t)
	m, root := logOf(t, size, envelope)
	skey, _, _ := translog.GenerateLogKey("nodehotfix.example.com/log")
	signer, _ := translog.NewLogSigner(skey)
	signers := []note.Signer{signer}
	for i := range 3 {
		wkey, _, _ := translog.GenerateWitnessKey(fmt.Sprintf("witness-%d.example.com", i))
		c, _ := translog.NewCosigner(wkey, time.Now)
		signers = append(signers, c)
	}
	text, _ := translog.Checkpoint{Origin: signer.Name(), Size: size, Hash: root}.Format()
	signed, err := note.Sign(&note.Note{Text: string(text)}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := tlog.ProveRecord(size, size-1, m)
	if err != nil {
		t.Fatal(err)
	}
	lg := &servedLog{note: signed, size: size, hashes: newHashCache(m), keySets: chain(t, 16),
		proofs: map[tlog.Hash]translog.InclusionProof{tlog.RecordHash(envelope): {Index: size - 1, Hashes: proof}}}

	p := hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.3"}, Releases: []json.RawMessage{envelope}}
	bare, _ := p.MarshalJSON()
	served := withEvidence(t.Context(), p, lg, caller{base: "202604.01", keySet: 1, logSize: size / 2})
	body, err := served.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	chainBytes := 0
	for _, k := range served.KeySets {
		chainBytes += len(k)
	}
	t.Logf("served %d bytes: pointer %d, %d links %d bytes, log bundle %d bytes (budget %d)", len(body), len(bare), len(served.KeySets), chainBytes, len(served.Log), ServedBudget)
	if b, err := translog.ParseBundle(served.Log); err != nil || b.Consistency == nil {
		t.Fatalf("bundle %v (consistency %v), want one with a consistency proof", err, b.Consistency)
	}
	switch {
	case len(served.KeySets) != 15:
		t.Errorf("served %d links to a version-1 node, want versions 2 to 16", len(served.KeySets))
	case len(body) > ServedBudget:
		t.Errorf("served %d bytes, over the %d budget", len(body), ServedBudget)
	case len(served.Log) > EvidenceAllowance:
		t.Errorf("log bundle %d bytes, over the %d allowance publishing reserves for it", len(served.Log), EvidenceAllowance)
	case chainBytes > MaxChainBytes:
		t.Errorf("chain %d bytes, over MaxChainBytes %d", chainBytes, MaxChainBytes)
	}
}

// signedRelease is a real release envelope of one artifact.
func signedRelease(t testing.TB) []byte { return signedVersion(t, "202604.01.3") }

// signedVersion is a real release envelope of version v.
func signedVersion(t testing.TB, v string) []byte {
	t.Helper()
	_, priv, _ := rel.GenerateKey(nil)
	env, err := rel.Sign(rel.Release{Base: v[:9], Version: v, NotAfter: time.Now().Add(24 * time.Hour),
		Artifacts: map[string]rel.Artifact{"linux/amd64": {URL: "https://blob.example.com/anc/aks-node-controller-" + v + "?sv=2026-01-01&sig=0123456789abcdef0123456789abcdef", SHA256: "ab" + fmt.Sprintf("%062d", 0), Size: 40 << 20}}}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// chain returns key-set links 2 to n, each of 3 keys signed by 2 of the
// previous set's and 2 of its own (the same two keys stay on).
func chain(t testing.TB, n int64) []store.KeySetRecord {
	t.Helper()
	keys := make([]ed25519.PublicKey, 0, 3)
	privs := make([]ed25519.PrivateKey, 0, 3)
	for range 3 {
		pub, priv, _ := rel.GenerateKey(nil)
		keys, privs = append(keys, pub), append(privs, priv)
	}
	var out []store.KeySetRecord
	for v := int64(2); v <= n; v++ {
		env, err := rel.SignKeySet(rel.KeySetDocument{Version: v, Threshold: 2, Keys: keys, Expires: time.Now().Add(365 * 24 * time.Hour)}, privs[0])
		if err != nil {
			t.Fatal(err)
		}
		if env, err = rel.AddSignature(env, privs[1]); err != nil {
			t.Fatal(err)
		}
		out = append(out, store.KeySetRecord{Version: v, Envelope: env})
	}
	return out
}

// BenchmarkServedEvidence is what the evidence adds to answering a node:
// "plain" encodes a pointer of one release, "fresh" adds what a node
// baked at key-set version 1 with no kept checkpoint gets (two links, the
// checkpoint, the release's inclusion proof), "kept" what one that kept a
// checkpoint of half the log gets (the checkpoint, the proofs and a
// consistency proof), from a log of 4096 records.
func BenchmarkServedEvidence(b *testing.B) {
	const size = 4096
	envelope := signedRelease(b)
	m, root := logOf(b, size, envelope)
	skey, _, _ := translog.GenerateLogKey("nodehotfix.example.com/log")
	signer, _ := translog.NewLogSigner(skey)
	wkey, _, _ := translog.GenerateWitnessKey("witness.example.com")
	c, _ := translog.NewCosigner(wkey, time.Now)
	text, _ := translog.Checkpoint{Origin: signer.Name(), Size: size, Hash: root}.Format()
	signed, err := note.Sign(&note.Note{Text: string(text)}, signer, c)
	if err != nil {
		b.Fatal(err)
	}
	proof, err := tlog.ProveRecord(size, size-1, m)
	if err != nil {
		b.Fatal(err)
	}
	// Links as lpsd stores them: compacted at publish.
	links := chain(b, 3)
	for i := range links {
		var c bytes.Buffer
		if err := json.Compact(&c, links[i].Envelope); err != nil {
			b.Fatal(err)
		}
		links[i].Envelope = c.Bytes()
	}
	lg := &servedLog{note: signed, size: size, hashes: newHashCache(m), keySets: links,
		proofs: map[tlog.Hash]translog.InclusionProof{tlog.RecordHash(envelope): {Index: size - 1, Hashes: proof}}}
	p := hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.3"}, Releases: []json.RawMessage{envelope}}
	for _, bc := range []struct {
		name string
		c    *caller
	}{
		{"plain", nil},
		{"fresh", &caller{base: "202604.01", keySet: 1}},
		{"kept", &caller{base: "202604.01", keySet: 3, logSize: size / 2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				q := p
				if bc.c != nil {
					q = withEvidence(b.Context(), p, lg, *bc.c)
				}
				if _, err := q.MarshalJSON(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
