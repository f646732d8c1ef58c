package translog

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

const benchTreeSize = 1 << 20

var benchTree = sync.OnceValue(func() *memTree {
	m := &memTree{hashes: make([]tlog.Hash, 0, tlog.StoredHashCount(benchTreeSize))}
	for i := range int64(benchTreeSize) {
		hs, err := tlog.StoredHashes(m.n, record(i), m)
		if err != nil {
			panic(err)
		}
		m.hashes = append(m.hashes, hs...)
		m.n++
	}
	return m
})

// BenchmarkNodeVerify is what a node does per boot: parse the bundle, open
// a checkpoint with a log signature and two cosignatures, verify one
// inclusion proof in a tree of 2^20 records and one consistency proof from
// the checkpoint it kept.
func BenchmarkNodeVerify(b *testing.B) {
	f := newFixture(b)
	m := benchTree()
	const size, kept, index = benchTreeSize, benchTreeSize - 12345, 777777
	bundle, err := Prove(m, f.cosigned(b, m, size), []int64{index}, kept)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := bundle.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	old := Checkpoint{Origin: testOrigin, Size: kept, Hash: m.root(b, kept)}
	policy := f.policy(2)
	rec := record(index)
	now := testNow.Add(time.Minute)
	verify := func(b *testing.B, parse, open, proofs bool) {
		bu, err := ParseBundle(raw)
		if err != nil {
			b.Fatal(err)
		}
		c, _, err := Open(bu.Checkpoint, policy, now)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if parse {
				if bu, err = ParseBundle(raw); err != nil {
					b.Fatal(err)
				}
			}
			if open {
				if c, _, err = Open(bu.Checkpoint, policy, now); err != nil {
					b.Fatal(err)
				}
			}
			if proofs {
				if _, err := bu.Include(c, rec); err != nil {
					b.Fatal(err)
				}
				if err := bu.Consistent(old, c); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(raw)), "bundle-bytes")
	}
	b.Run("all", func(b *testing.B) { verify(b, true, true, true) })
	b.Run("parse", func(b *testing.B) { verify(b, true, false, false) })
	b.Run("open", func(b *testing.B) { verify(b, false, true, false) })
	b.Run("proofs", func(b *testing.B) { verify(b, false, false, true) })
}
