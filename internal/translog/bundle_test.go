package translog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
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

func (m *memTree) appendRecord(t testing.TB, rec []byte) {
	hs, err := tlog.StoredHashes(m.n, rec, m)
	if err != nil {
		t.Fatal(err)
	}
	m.hashes = append(m.hashes, hs...)
	m.n++
}

func (m *memTree) root(t testing.TB, size int64) tlog.Hash {
	h, err := tlog.TreeHash(size, m)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func record(i int64) []byte { return []byte(fmt.Sprintf(`{"record":%d}`, i)) }

func newTree(t testing.TB, n int64) *memTree {
	m := &memTree{}
	for i := range n {
		m.appendRecord(t, record(i))
	}
	return m
}

// cosigned returns the checkpoint of m at size, signed and cosigned by two
// witnesses.
func (f *fixture) cosigned(t testing.TB, m *memTree, size int64) []byte {
	return cosign(t, f.signed(t, size, m.root(t, size)), f.cosigner(t, 0, testNow), f.cosigner(t, 1, testNow))
}

func TestBundle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := newTree(t, 37)
	b, err := Prove(m, f.cosigned(t, m, 37), []int64{36, 0, 5}, 20)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b, err = ParseBundle(raw)
	if err != nil {
		t.Fatalf("ParseBundle(%s): %v", raw, err)
	}
	if again, _ := b.Marshal(); string(again) != string(raw) {
		t.Errorf("Marshal(ParseBundle(x)) = %s, want %s", again, raw)
	}
	c, _, err := Open(b.Checkpoint, f.policy(2), testNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int64{0, 5, 36} {
		got, err := b.Include(c, record(i))
		if err != nil || got != i {
			t.Errorf("Include(record %d) = %d, %v", i, got, err)
		}
	}
	old := Checkpoint{Origin: testOrigin, Size: 20, Hash: m.root(t, 20)}
	if err := b.Consistent(old, c); err != nil {
		t.Errorf("Consistent from 20: %v", err)
	}
	for _, same := range []Checkpoint{c, {Origin: testOrigin, Size: 0, Hash: emptyTreeHash()}} {
		if err := b.Consistent(same, c); err != nil {
			t.Errorf("Consistent from size %d: %v", same.Size, err)
		}
	}
}

func TestBundleRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := newTree(t, 37)
	signed := f.cosigned(t, m, 37)
	b, err := Prove(m, signed, []int64{0, 5, 36}, 20)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := Open(signed, f.policy(2), testNow)
	if err != nil {
		t.Fatal(err)
	}
	// with returns b with the proof of record i changed by edit.
	with := func(i int64, edit func(p *InclusionProof)) Bundle {
		nb := Bundle{Checkpoint: b.Checkpoint, Proofs: map[tlog.Hash]InclusionProof{}, Consistency: b.Consistency}
		for h, p := range b.Proofs {
			p.Hashes = slices.Clone(p.Hashes)
			if h == LeafHash(record(i)) {
				edit(&p)
			}
			nb.Proofs[h] = p
		}
		return nb
	}
	older, err := Prove(m, f.cosigned(t, m, 30), []int64{5}, 0)
	if err != nil {
		t.Fatal(err)
	}
	olderProof := older.Proofs[LeafHash(record(5))]

	incl := []struct {
		name string
		b    Bundle
		c    Checkpoint
		rec  []byte
	}{
		{"not-in-bundle", b, c, record(6)},
		{"record-not-in-log", b, c, []byte("never appended")},
		{"other-index", with(5, func(p *InclusionProof) { p.Index = 4 }), c, record(5)},
		{"index-beyond-size", with(5, func(p *InclusionProof) { p.Index = 37 }), c, record(5)},
		{"truncated", with(5, func(p *InclusionProof) { p.Hashes = p.Hashes[:len(p.Hashes)-1] }), c, record(5)},
		{"extra-hash", with(5, func(p *InclusionProof) { p.Hashes = append(p.Hashes, someHash) }), c, record(5)},
		{"flipped-hash", with(5, func(p *InclusionProof) { p.Hashes[0][0] ^= 1 }), c, record(5)},
		{"proof-for-other-size", with(5, func(p *InclusionProof) { *p = olderProof }), c, record(5)},
		{"other-checkpoint", b, Checkpoint{Origin: testOrigin, Size: 30, Hash: m.root(t, 30)}, record(5)},
	}
	for _, tt := range incl {
		t.Run("include-"+tt.name, func(t *testing.T) {
			i, err := tt.b.Include(tt.c, tt.rec)
			if err == nil {
				t.Fatalf("Include = %d, nil error", i)
			}
			wantReason(t, "Include", err, ReasonNotIncluded)
		})
	}

	// A fork: the same first 19 records, then others.
	fork := newTree(t, 19)
	for i := int64(19); i < 37; i++ {
		fork.appendRecord(t, []byte(fmt.Sprintf("forked %d", i)))
	}
	at20 := Checkpoint{Origin: testOrigin, Size: 20, Hash: m.root(t, 20)}
	fork20 := Checkpoint{Origin: testOrigin, Size: 20, Hash: fork.root(t, 20)}
	fork37 := Checkpoint{Origin: testOrigin, Size: 37, Hash: fork.root(t, 37)}
	proof20, _ := tlog.ProveTree(37, 20, m)
	forkProof, _ := tlog.ProveTree(37, 20, fork)
	proof21, _ := tlog.ProveTree(37, 21, m)
	cons := []struct {
		name       string
		old, newer Checkpoint
		proof      tlog.TreeProof
		want       Reason
	}{
		{"fork-same-size", c, fork37, nil, ReasonInconsistent},
		{"fork-old", fork20, c, proof20, ReasonInconsistent},
		{"fork-new", at20, fork37, forkProof, ReasonInconsistent},
		{"fork-with-its-own-proof", at20, fork37, proof20, ReasonInconsistent},
		{"proof-from-other-size", at20, c, proof21, ReasonInconsistent},
		{"truncated", at20, c, proof20[:len(proof20)-1], ReasonInconsistent},
		{"extra-hash", at20, c, append(slices.Clone(proof20), someHash), ReasonInconsistent},
		{"same-size-with-proof", c, c, proof20, ReasonInconsistent},
		{"empty-with-proof", Checkpoint{Origin: testOrigin, Hash: emptyTreeHash()}, c, proof20, ReasonInconsistent},
		{"empty-wrong-hash", Checkpoint{Origin: testOrigin, Hash: someHash}, c, nil, ReasonInconsistent},
		{"rollback", c, at20, nil, ReasonRollback},
		{"other-origin", Checkpoint{Origin: "other.example", Size: 20, Hash: at20.Hash}, c, proof20, ReasonOrigin},
	}
	for _, tt := range cons {
		t.Run("consistency-"+tt.name, func(t *testing.T) {
			wantReason(t, "VerifyConsistency", VerifyConsistency(tt.old, tt.newer, tt.proof), tt.want)
		})
	}
	if err := VerifyConsistency(at20, c, proof20); err != nil {
		t.Errorf("VerifyConsistency of the real tree: %v", err)
	}
	wantReason(t, "Consistent without a proof from 21", b.Consistent(Checkpoint{Origin: testOrigin, Size: 21, Hash: m.root(t, 21)}, c), ReasonInconsistent)
	wantReason(t, "Consistent from a fork", b.Consistent(fork20, c), ReasonInconsistent)
	wantReason(t, "Consistent with another checkpoint", b.Consistent(at20, fork37), ReasonNotIncluded)
}

func TestParseBundleRefuses(t *testing.T) {
	t.Parallel()
	h := someHash.String()
	cp := `"checkpoint":"o\n1\n` + h + `\n\n— o AAAA\n"`
	proof := `{"index":0,"hashes":[]}`
	tests := []struct{ name, raw string }{
		{"not-json", `x`},
		{"array", `[]`},
		{"missing-proofs", `{` + cp + `}`},
		{"missing-checkpoint", `{"proofs":{}}`},
		{"unknown-key", `{` + cp + `,"proofs":{},"extra":1}`},
		{"duplicate-key", `{` + cp + `,"proofs":{},"proofs":{}}`},
		{"case-folded-key", `{` + cp + `,"Proofs":{}}`},
		{"null-checkpoint", `{"checkpoint":null,"proofs":{}}`},
		{"null-proofs", `{` + cp + `,"proofs":null}`},
		{"null-consistency", `{` + cp + `,"proofs":{},"consistency":null}`},
		{"trailing-data", `{` + cp + `,"proofs":{}} {}`},
		{"bad-leaf-key", `{` + cp + `,"proofs":{"AAAA":` + proof + `}}`},
		{"unpadded-leaf-key", `{` + cp + `,"proofs":{"` + strings.TrimRight(h, "=") + `":` + proof + `}}`},
		{"duplicate-leaf", `{` + cp + `,"proofs":{"` + h + `":` + proof + `,"` + h + `":` + proof + `}}`},
		{"negative-index", `{` + cp + `,"proofs":{"` + h + `":{"index":-1,"hashes":[]}}}`},
		{"string-index", `{` + cp + `,"proofs":{"` + h + `":{"index":"1","hashes":[]}}}`},
		{"fractional-index", `{` + cp + `,"proofs":{"` + h + `":{"index":1.5,"hashes":[]}}}`},
		{"from-in-proof", `{` + cp + `,"proofs":{"` + h + `":{"from":1,"hashes":[]}}}`},
		{"bad-hash", `{` + cp + `,"proofs":{"` + h + `":{"index":1,"hashes":["AAAA"]}}}`},
		{"64-hashes", `{` + cp + `,"proofs":{"` + h + `":{"index":1,"hashes":[` + strings.Repeat(`"`+h+`",`, 63) + `"` + h + `"]}}}`},
		{"consistency-index", `{` + cp + `,"proofs":{},"consistency":{"index":1,"hashes":[]}}`},
		{"oversize", `{` + cp + `,"proofs":{}}` + strings.Repeat(" ", MaxBundleSize)},
		{"oversize-checkpoint", `{"checkpoint":"` + strings.Repeat("x", MaxNoteSize+1) + `","proofs":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseBundle([]byte(tt.raw))
			if err == nil {
				t.Fatalf("ParseBundle = %+v, want an error", b)
			}
			wantReason(t, "ParseBundle", err, ReasonMalformed)
		})
	}
	if _, err := ParseBundle([]byte(`{` + cp + `,"proofs":{"` + h + `":` + proof + `}}`)); err != nil {
		t.Errorf("ParseBundle of the valid base case: %v", err)
	}
}

// TestBundleSize: the bundle of one release proof and a consistency proof
// in a tree of 2^20 records, with two cosignatures, stays small.
func TestBundleSize(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := Bundle{
		Checkpoint:  f.cosigned(t, newTree(t, 1), 1),
		Proofs:      map[tlog.Hash]InclusionProof{someHash: {Index: 1 << 19, Hashes: make(tlog.RecordProof, 20)}},
		Consistency: &ConsistencyProof{From: 1<<20 - 12345, Hashes: make(tlog.TreeProof, 40)},
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 4<<10 {
		t.Errorf("bundle is %d bytes, want at most 4 KiB", len(raw))
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	t.Logf("bundle: %d bytes", len(raw))
}

func FuzzParseBundle(f *testing.F) {
	fx := newFixture(f)
	m := newTree(f, 9)
	b, err := Prove(m, fx.cosigned(f, m, 9), []int64{3}, 4)
	if err != nil {
		f.Fatal(err)
	}
	raw, _ := b.Marshal()
	f.Add(raw)
	policy := fx.policy(2)
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := ParseBundle(raw)
		if err != nil {
			return
		}
		out, err := b.Marshal()
		if err != nil {
			t.Fatalf("Marshal(ParseBundle(%q)): %v", raw, err)
		}
		if _, err := ParseBundle(out); err != nil {
			t.Fatalf("ParseBundle(Marshal(ParseBundle(%q))): %v", raw, err)
		}
		if c, _, err := Open(b.Checkpoint, policy, testNow.Add(time.Minute)); err == nil {
			b.Include(c, record(3)) //nolint:errcheck // must not panic
		}
	})
}
