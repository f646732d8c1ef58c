package trust

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/release"
)

const (
	benchTreeSize = 1 << 20
	benchIndex    = 777777
	benchKept     = benchTreeSize - 12345
)

// benchWorld is a node baked with a 2-of-3 key set, served 2 links (the
// newest requiring the log, 2 of 2 witnesses) and one release logged at
// benchIndex of a 2^20-record tree, with a consistency proof from the
// checkpoint it kept.
type benchWorld struct {
	root    release.KeySet
	kept    State
	pointer hotfix.Pointer
	env     []byte
	signer  []ed25519.PrivateKey
}

func newBenchWorld(b *testing.B) *benchWorld {
	c := newChain(b)
	l := newLog(b, "nodehotfix.example/log")
	c.log[3] = l.policy(true)
	links := c.links(2, 3)
	env := releaseOf(b, "202604.01.1", c.set[3][0], c.set[3][1])
	m := l.tree
	m.hashes = make([]tlog.Hash, 0, tlog.StoredHashCount(benchTreeSize))
	for i := range int64(benchTreeSize) {
		rec := fmt.Appendf(nil, `{"filler":%d}`, i)
		if i == benchIndex {
			rec = env
		}
		hs, err := tlog.StoredHashes(m.n, rec, m)
		if err != nil {
			b.Fatal(err)
		}
		m.hashes = append(m.hashes, hs...)
		m.n++
	}
	kept := l.checkpoint(b, benchKept, testNow.Add(-time.Hour), 2)
	cp := l.checkpoint(b, benchTreeSize, testNow.Add(-time.Minute), 2)
	return &benchWorld{
		root:    c.root(),
		kept:    State{Checkpoint: string(kept)},
		pointer: hotfix.Pointer{Releases: []json.RawMessage{env}, KeySets: links, Log: l.bundle(b, cp, []int64{benchIndex}, benchKept)},
		env:     env,
		signer:  c.set[3],
	}
}

// BenchmarkEvaluate is a node's trust work per boot: walk 2 links, open
// a checkpoint (log signature, 2 cosignatures), check consistency from
// the kept checkpoint, verify the release under the 2-of-3 threshold and
// its inclusion proof.
func BenchmarkEvaluate(b *testing.B) {
	w := newBenchWorld(b)
	b.ResetTimer()
	boot := func(b *testing.B, kept State) {
		for b.Loop() {
			v := Evaluate(w.root, kept, w.pointer, testNow)
			if v.Err != nil {
				b.Fatal(v.Err)
			}
			if _, err := v.Keys.Verify(w.env, testNow); err != nil {
				b.Fatal(err)
			}
			if err := v.CheckLogged(w.env); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("served-chain", func(b *testing.B) { boot(b, w.kept) })
	// The next boot: the 2 links are kept and none is served past them.
	v := Evaluate(w.root, w.kept, w.pointer, testNow)
	next, _ := v.Next(w.kept, testBaked)
	next.Checkpoint = w.kept.Checkpoint
	served := w.pointer
	w.pointer.KeySets = nil
	b.Run("kept-chain", func(b *testing.B) { boot(b, next) })
	w.pointer = served
	// The floor: one Ed25519 verification; a boot does 14 (4 per link, 2
	// for the release, the log's on the kept and the served checkpoint, 2
	// cosignatures).
	pub, priv := pubs(w.signer[:1])[0], w.signer[0]
	msg := []byte("nodehotfix benchmark message")
	sig := ed25519.Sign(priv, msg)
	b.Run("one-ed25519-verify", func(b *testing.B) {
		for b.Loop() {
			if !ed25519.Verify(pub, msg, sig) {
				b.Fatal("does not verify")
			}
		}
	})
}
