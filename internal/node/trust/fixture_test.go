package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// testNow is the fixed time every evaluation runs at.
var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

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

func (m *memTree) add(t testing.TB, rec []byte) int64 {
	t.Helper()
	hs, err := tlog.StoredHashes(m.n, rec, m)
	if err != nil {
		t.Fatal(err)
	}
	m.hashes = append(m.hashes, hs...)
	m.n++
	return m.n - 1
}

func (m *memTree) root(t testing.TB, size int64) tlog.Hash {
	t.Helper()
	h, err := tlog.TreeHash(size, m)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// filler appends n records that are no release.
func (m *memTree) filler(t testing.TB, n int) {
	for range n {
		m.add(t, fmt.Appendf(nil, `{"filler":%d}`, m.n))
	}
}

// testLog is a transparency log: its key, two witnesses and its tree.
type testLog struct {
	signer note.Signer
	vkey   string
	wit    []string // witness skeys
	witV   []string // witness vkeys
	tree   *memTree
}

func newLog(t testing.TB, origin string) *testLog {
	t.Helper()
	skey, vkey, err := translog.GenerateLogKey(origin)
	if err != nil {
		t.Fatal(err)
	}
	l := &testLog{vkey: vkey, tree: &memTree{}}
	if l.signer, err = translog.NewLogSigner(skey); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		s, v, err := translog.GenerateWitnessKey(fmt.Sprintf("witness%d.%s", i, origin))
		if err != nil {
			t.Fatal(err)
		}
		l.wit, l.witV = append(l.wit, s), append(l.witV, v)
	}
	return l
}

// policy is l's log policy: both witnesses, a 24h maximum age.
func (l *testLog) policy(required bool) release.LogPolicy {
	return release.LogPolicy{Key: l.vkey, Witnesses: l.witV, Quorum: 2, MaxCheckpointAge: 24 * time.Hour, Required: required}
}

// checkpoint returns the checkpoint of the first size records, signed by
// the log and cosigned at time at by the first witnesses of l.
func (l *testLog) checkpoint(t testing.TB, size int64, at time.Time, witnesses int) []byte {
	t.Helper()
	return l.signedCheckpoint(t, translog.Checkpoint{Origin: l.signer.Name(), Size: size, Hash: l.tree.root(t, size)}, at, witnesses)
}

func (l *testLog) signedCheckpoint(t testing.TB, c translog.Checkpoint, at time.Time, witnesses int) []byte {
	t.Helper()
	text, err := c.Format()
	if err != nil {
		t.Fatal(err)
	}
	signers := []note.Signer{l.signer}
	for i := range witnesses {
		cs, err := translog.NewCosigner(l.wit[i], func() time.Time { return at })
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, cs)
	}
	msg, err := note.Sign(&note.Note{Text: string(text)}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// bundle proves the records at indexes under the signed checkpoint cp and,
// when from > 0, consistency from size from.
func (l *testLog) bundle(t testing.TB, cp []byte, indexes []int64, from int64) json.RawMessage {
	t.Helper()
	b, err := translog.Prove(l.tree, cp, indexes, from)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// keys returns n fresh release keys.
func keys(t testing.TB, n int) []ed25519.PrivateKey {
	t.Helper()
	out := make([]ed25519.PrivateKey, n)
	for i := range out {
		_, priv, err := release.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = priv
	}
	return out
}

func pubs(privs []ed25519.PrivateKey) []ed25519.PublicKey {
	out := make([]ed25519.PublicKey, len(privs))
	for i, p := range privs {
		out[i] = p.Public().(ed25519.PublicKey)
	}
	return out
}

// chain is a history of key sets: set[v] are the 3 keys of version v, 2
// of which sign.
type chain struct {
	t   testing.TB
	set map[int64][]ed25519.PrivateKey
	log map[int64]release.LogPolicy
}

func newChain(t testing.TB) *chain {
	return &chain{t: t, set: map[int64][]ed25519.PrivateKey{1: keys(t, 3)}, log: map[int64]release.LogPolicy{}}
}

// root is the baked key set, version 1, 2 of 3.
func (c *chain) root() release.KeySet {
	c.t.Helper()
	ks, err := release.KeySetDocument{Version: 1, Threshold: 2, Keys: pubs(c.set[1]), Log: c.log[1]}.KeySet()
	if err != nil {
		c.t.Fatal(err)
	}
	return ks
}

// rootFile is root as the baked key file.
func (c *chain) rootFile() []byte {
	c.t.Helper()
	data, err := release.MarshalKeySetFile(release.KeySetDocument{Version: 1, Threshold: 2, Keys: pubs(c.set[1]), Log: c.log[1]})
	if err != nil {
		c.t.Fatal(err)
	}
	return data
}

// doc returns the document of version v with fresh keys (or the ones
// already made for v), expiring in a week.
func (c *chain) doc(v int64) release.KeySetDocument {
	if c.set[v] == nil {
		c.set[v] = keys(c.t, 3)
	}
	return release.KeySetDocument{Version: v, Expires: testNow.Add(7 * 24 * time.Hour), Threshold: 2, Keys: pubs(c.set[v]), Log: c.log[v]}
}

// link returns link v, signed by 2 keys of v-1 and 2 of its own.
func (c *chain) link(v int64) json.RawMessage {
	d := c.doc(v)
	return sign(c.t, d, c.set[v-1][0], c.set[v-1][1], c.set[v][0], c.set[v][1])
}

// links returns links from..to.
func (c *chain) links(from, to int64) []json.RawMessage {
	var out []json.RawMessage
	for v := from; v <= to; v++ {
		out = append(out, c.link(v))
	}
	return out
}

// sign signs d with every key of by.
func sign(t testing.TB, d release.KeySetDocument, by ...ed25519.PrivateKey) json.RawMessage {
	t.Helper()
	env, err := release.SignKeySet(d, by[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range by[1:] {
		if env, err = release.AddSignature(env, k); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// releaseOf returns a release envelope of version signed by by.
func releaseOf(t testing.TB, version string, by ...ed25519.PrivateKey) []byte {
	t.Helper()
	env, err := release.Sign(release.Release{
		Base: version[:len("202604.01")], Version: version, NotAfter: testNow.Add(24 * time.Hour),
		Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://example.com/a", SHA256: fmt.Sprintf("%064x", 1), Size: 1}},
	}, by[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range by[1:] {
		if env, err = release.AddSignature(env, k); err != nil {
			t.Fatal(err)
		}
	}
	return env
}
