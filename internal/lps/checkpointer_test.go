package lps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/translog"
)

// logFixture is a log key, a witness serving add-checkpoint on a real
// socket, and the policy a node whose key set names both would hold.
type logFixture struct {
	signer note.Signer
	wit    Witness
	policy translog.Policy
}

func newLogFixture(t *testing.T) logFixture {
	t.Helper()
	skey, vkey, err := translog.GenerateLogKey("nodehotfix.test/log")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := translog.NewLogSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	wskey, wvkey, err := translog.GenerateWitnessKey("witness.test")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, err := translog.NewCosigner(wskey, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := translog.ParseLogKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	w, err := translog.OpenWitness(filepath.Join(t.TempDir(), "witness.json"), cosigner, []note.Verifier{logKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	policy, err := translog.NewPolicy(vkey, []string{wvkey}, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return logFixture{signer: signer, wit: Witness{URL: srv.URL, Key: cosigner.Verifier()}, policy: policy}
}

// TestCheckpointerServesProvenReleases: a published release is served,
// once a witnessed checkpoint covers it, with a bundle a node's policy
// opens and whose proof includes the envelope it was served; a node that
// declared an earlier checkpoint gets a consistency proof from it.
func TestCheckpointerServesProvenReleases(t *testing.T) {
	ctx := t.Context()
	fx := newLogFixture(t)
	st := memstore.New()
	cp, err := NewCheckpointer(st, CheckpointerConfig{Signer: fx.signer, Verifier: fx.policy.Log, Witnesses: []Witness{fx.wit}})
	if err != nil {
		t.Fatal(err)
	}
	snaps := NewSnapshotter(st, nil, nil)

	put := func(v string) rollout.Release {
		t.Helper()
		r := release(v, rollout.Rollout{State: rollout.Complete}, false)
		r.Envelope = signedVersion(t, v) // the log indexes release envelopes
		if _, err := st.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "test", Action: "publish", Target: v}, r.Envelope); err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := put("202604.01.1")
	if _, err := cp.Step(ctx, false); err != nil {
		t.Fatalf("Step = %v", err)
	}
	if err := snaps.Load(ctx); err != nil {
		t.Fatal(err)
	}
	firstCP, _, err := translog.Open(snaps.Current().log.note, fx.policy, time.Now())
	if err != nil {
		t.Fatalf("Open(kept checkpoint) = %v", err)
	}

	second := put("202604.02.1")
	// Before a checkpoint covers it the release has no proof: the node
	// must not be told it is logged.
	if err := snaps.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if p := evidence(t, snaps.Current(), second, 0); p.Log != nil {
		if b, _ := translog.ParseBundle(p.Log); len(b.Proofs) != 0 {
			t.Fatalf("a release published after the checkpoint was served with a proof")
		}
	}
	if _, err := cp.Step(ctx, false); err != nil {
		t.Fatalf("Step = %v", err)
	}
	if err := snaps.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		r    rollout.Release
		from int64
	}{{first, 0}, {second, firstCP.Size}} {
		p := evidence(t, snaps.Current(), tc.r, tc.from)
		b, err := translog.ParseBundle(p.Log)
		if err != nil {
			t.Fatalf("ParseBundle = %v", err)
		}
		c, cosigs, err := translog.Open(b.Checkpoint, fx.policy, time.Now())
		if err != nil || len(cosigs) != 1 {
			t.Fatalf("Open = %v, %d cosignatures; want the witness's", err, len(cosigs))
		}
		if _, err := b.Include(c, tc.r.Envelope); err != nil {
			t.Errorf("%s: Include = %v", tc.r.Version, err)
		}
		if tc.from > 0 {
			if err := b.Consistent(firstCP, c); err != nil {
				t.Errorf("Consistent(first checkpoint) = %v", err)
			}
		}
	}
	// Nothing new: no new checkpoint, unless a refresh is due.
	if kept, err := cp.Step(ctx, false); err != nil || kept {
		t.Errorf("Step(unchanged) = %v, %v; want nothing kept", kept, err)
	}
}

// TestCheckpointerNeedsItsQuorum: with the witness down the checkpoint is
// not replaced, so nodes keep being served the last witnessed one.
func TestCheckpointerNeedsItsQuorum(t *testing.T) {
	ctx := t.Context()
	fx := newLogFixture(t)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	st := memstore.New()
	cp, err := NewCheckpointer(st, CheckpointerConfig{Signer: fx.signer, Verifier: fx.policy.Log, Witnesses: []Witness{{URL: down.URL, Key: fx.wit.Key}}})
	if err != nil {
		t.Fatal(err)
	}
	r := release("202604.01.1", rollout.Rollout{State: rollout.Complete}, false)
	if _, err := st.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "test", Action: "publish", Target: r.Version}, r.Envelope); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Step(ctx, false); err == nil {
		t.Fatal("Step with its only witness down = nil error")
	}
	if _, _, err := st.Checkpoint(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoint after a failed Step = %v, want none kept", err)
	}
}

// evidence returns the pointer a node of r's base that declared a
// checkpoint of size from is served from snap.
func evidence(t *testing.T, snap *Snapshot, r rollout.Release, from int64) struct{ Log json.RawMessage } {
	t.Helper()
	sel := rollout.Select(snap.Releases, rollout.Node{VMID: "6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", SubscriptionID: "sub", Base: r.Base, Now: time.Now()})
	p := withEvidence(context.Background(), sel.Pointer(), snap.log, caller{base: r.Base, logSize: from})
	return struct{ Log json.RawMessage }{p.Log}
}

// badHashStore serves a stored leaf hash that is not its record's (a
// backend bug, a bad restore, a partial write).
type badHashStore struct{ *memstore.Store }

func (s badHashStore) LogHashes(ctx context.Context, idx []int64) ([]tlog.Hash, error) {
	hs, err := s.Store.LogHashes(ctx, idx)
	for i, x := range idx {
		if x == tlog.StoredHashIndex(0, 0) && err == nil {
			hs[i] = tlog.RecordHash([]byte("not the record"))
		}
	}
	return hs, err
}

// TestCheckpointerRefusesDamagedHashes: a tree whose stored leaf is not
// its stored record is never signed: once cosigned it would be permanent.
func TestCheckpointerRefusesDamagedHashes(t *testing.T) {
	ctx := t.Context()
	fx := newLogFixture(t)
	st := badHashStore{memstore.New()}
	r := release("202604.01.1", rollout.Rollout{State: rollout.Complete}, false)
	if _, err := st.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "test", Action: "publish", Target: r.Version}, r.Envelope); err != nil {
		t.Fatal(err)
	}
	cp, err := NewCheckpointer(st, CheckpointerConfig{Signer: fx.signer, Verifier: fx.policy.Log, Witnesses: []Witness{fx.wit}})
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := cp.Step(ctx, false); err == nil || kept {
		t.Errorf("Step = %v, %v; want a damaged store refused", kept, err)
	}
	if _, _, err := st.Checkpoint(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoint = %v, want none kept", err)
	}
}

// signalStore is a memstore whose Watch channel the test drives and which
// counts kept checkpoints.
type signalStore struct {
	*memstore.Store
	ch   chan struct{}
	puts atomic.Int32
}

func (s *signalStore) Watch(context.Context) <-chan struct{} { return s.ch }
func (s *signalStore) PutCheckpoint(ctx context.Context, size int64, note []byte) error {
	s.puts.Add(1)
	return s.Store.PutCheckpoint(ctx, size, note)
}

// TestCheckpointerRunRefreshes: with the log unchanged, Run cosigns the
// checkpoint again once Refresh has passed since the last one it kept,
// however many store signals (a rollout step, a served record) come in
// between, and not before.
func TestCheckpointerRunRefreshes(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fx := newLogFixture(t)
	st := &signalStore{Store: memstore.New(), ch: make(chan struct{})}
	r := release("202604.01.1", rollout.Rollout{State: rollout.Complete}, false)
	if _, err := st.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "test", Action: "publish", Target: r.Version}, r.Envelope); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	cp, err := NewCheckpointer(st, CheckpointerConfig{Signer: fx.signer, Verifier: fx.policy.Log, Witnesses: []Witness{fx.wit}, Refresh: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	go cp.Run(ctx)
	wantPuts := func(n int32) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d checkpoints kept", n), func() bool { return st.puts.Load() >= n })
	}
	wantPuts(1) // the first look keeps one
	// Signals within the hour: each is a look (Run waits on the next
	// signal only after the look), and none keeps a checkpoint.
	for range 3 {
		clock.Add(int64(10 * time.Minute))
		st.ch <- struct{}{}
	}
	st.ch <- struct{}{} // the third look has finished once this is taken
	if n := st.puts.Load(); n != 1 {
		t.Errorf("%d checkpoints kept within the refresh, want 1", n)
	}
	for i := range int32(3) {
		clock.Add(int64(time.Hour))
		st.ch <- struct{}{}
		wantPuts(2 + i)
	}
}

// TestCheckpointerLearnsTheWitnessIsAhead: a replica whose store holds
// fewer records than its witness cosigned (restored from a backup) keeps
// no checkpoint, and Floor then reports the witness's size, which the
// admin API refuses appends on; once the store holds that tree again, the
// witness cosigns and Floor follows.
func TestCheckpointerLearnsTheWitnessIsAhead(t *testing.T) {
	ctx := t.Context()
	fx := newLogFixture(t)
	put := func(st store.Store, v string) {
		t.Helper()
		r := release(v, rollout.Rollout{State: rollout.Complete}, false)
		if _, err := st.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "test", Action: "publish", Target: r.Version}, r.Envelope); err != nil {
			t.Fatal(err)
		}
	}
	served := memstore.New()
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
		put(served, v)
	}
	first, err := NewCheckpointer(served, CheckpointerConfig{Signer: fx.signer, Verifier: fx.policy.Log, Witnesses: []Witness{fx.wit}})
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := first.Step(ctx, false); err != nil || !kept {
		t.Fatalf("Step on the served log = %v, %v; want kept", kept, err)
	}
	if f := first.Floor(); !f.Verified || f.Size != 3 || f.Witness != fx.wit.URL || f.Answered != 1 {
		t.Errorf("Floor = %+v; want 3 from %s, verified", f, fx.wit.URL)
	}

	restored := memstore.New()
	put(restored, "202604.01.1")
	cp, err := NewCheckpointer(restored, CheckpointerConfig{Signer: fx.signer, Verifier: fx.policy.Log, Witnesses: []Witness{fx.wit}})
	if err != nil {
		t.Fatal(err)
	}
	if f := cp.Floor(); f.Verified || f.Size != 0 {
		t.Errorf("Floor before any answer = %+v, want unverified", f)
	}
	if kept, err := cp.Step(ctx, true); err == nil || kept {
		t.Errorf("Step on the restored log = %v, %v; want refused by the witness", kept, err)
	}
	if f := cp.Floor(); !f.Verified || f.Size != 3 || f.Witness != fx.wit.URL {
		t.Errorf("Floor after the refusal = %+v; want 3 from %s", f, fx.wit.URL)
	}
	put(restored, "202604.01.2")
	put(restored, "202604.01.3")
	if kept, err := cp.Step(ctx, false); err != nil || !kept {
		t.Errorf("Step once the log is whole = %v, %v; want kept", kept, err)
	}
	if f := cp.Floor(); f.Size != 3 {
		t.Errorf("Floor once whole = %+v, want 3", f)
	}
	if v := cp.Verifier(); v.Name() != fx.signer.Name() {
		t.Errorf("Verifier = %s, want the log key's %s", v.Name(), fx.signer.Name())
	}
	if _, err := NewCheckpointer(restored, CheckpointerConfig{Signer: fx.signer}); err == nil {
		t.Error("NewCheckpointer without the log key's verifier: accepted")
	}
}

// TestCheckpointCapsAgree: the store keeps no checkpoint larger than what
// nodes and monitors read (translog.MaxNoteSize).
func TestCheckpointCapsAgree(t *testing.T) {
	if store.MaxCheckpointBytes != translog.MaxNoteSize {
		t.Errorf("store.MaxCheckpointBytes = %d, translog.MaxNoteSize = %d: a checkpoint between them is kept and refused by every reader", store.MaxCheckpointBytes, translog.MaxNoteSize)
	}
}

// TestFloorCountsWitnessesThatDidNotAnswer: of the witnesses, those that
// did not answer may hold the largest trees, so the floor is the
// (quorum - unanswered)-th largest answer, unverified below 1; a URL's
// password never shows.
func TestFloorCountsWitnessesThatDidNotAnswer(t *testing.T) {
	ws := []Witness{{URL: "https://u:secret@w1.example"}, {URL: "https://w2.example"}, {URL: "https://w3.example"}}
	for _, tt := range []struct {
		name     string
		quorum   int
		answers  map[string]int64
		verified bool
		size     int64
	}{
		{"none answered", 2, nil, false, 0},
		{"one of three at quorum 2", 2, map[string]int64{"https://w2.example": 9}, false, 0},
		{"two of three at quorum 2", 2, map[string]int64{"https://w2.example": 9, "https://w3.example": 4}, true, 9},
		{"all at quorum 2", 2, map[string]int64{"https://u:secret@w1.example": 99, "https://w2.example": 9, "https://w3.example": 4}, true, 9},
		{"one of three at quorum 3", 3, map[string]int64{"https://w3.example": 4}, true, 4},
		{"all at quorum 3", 3, map[string]int64{"https://u:secret@w1.example": 99, "https://w2.example": 9, "https://w3.example": 4}, true, 4},
		{"two of three at quorum 1", 1, map[string]int64{"https://w2.example": 9, "https://w3.example": 4}, false, 0},
		{"all at quorum 1", 1, map[string]int64{"https://u:secret@w1.example": 99, "https://w2.example": 9, "https://w3.example": 4}, true, 99},
	} {
		c := &Checkpointer{cfg: CheckpointerConfig{Witnesses: ws, Quorum: tt.quorum}, witnesses: witnessSizes{sizes: map[string]int64{}}}
		for u, n := range tt.answers {
			c.witnesses.set(u, n)
		}
		f := c.Floor()
		if f.Verified != tt.verified || f.Size != tt.size || f.Answered != len(tt.answers) {
			t.Errorf("%s: Floor = %+v, want verified %v at %d", tt.name, f, tt.verified, tt.size)
		}
		if strings.Contains(f.Witness, "secret") {
			t.Errorf("%s: Floor names %q, with its password", tt.name, f.Witness)
		}
	}
}
