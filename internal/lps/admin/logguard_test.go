package admin

// The guard against forking the transparency log (checkAppend) and
// RestoreLog against a served log, real witnesses and checkpointers.

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc/codes"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/translog"
)

// guardLog is the served log of TestRestoreLog: 7 records (releases 1-4,
// the revocation of 2, key set 2, release 5), a log key, and a witness.
type guardLog struct {
	served   *harness
	all      [][]byte
	envs     map[string]string
	priv     ed25519.PrivateKey
	root     release.KeySet
	link     []byte
	signer   note.Signer
	verifier note.Verifier
	origin   string
}

func newGuardLog(t *testing.T) *guardLog {
	t.Helper()
	ctx := t.Context()
	pub, priv := newKey(t)
	root, err := release.NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	origin := "guard.example/log"
	skey, vkey, err := translog.GenerateLogKey(origin)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := translog.NewLogSigner(skey)
	verifier, _ := translog.ParseLogKey(vkey)
	rl := &guardLog{envs: map[string]string{}, priv: priv, root: root, signer: signer, verifier: verifier, origin: origin}
	rl.served = newHarness(t, harnessOpts{keys: &root})
	sc := rl.served.ops(t)
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4", "202604.01.5", "202604.01.8", "202604.01.9"} {
		rl.envs[v] = signed(t, priv, v)
	}
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4"} {
		publish(t, sc, rl.envs[v])
	}
	if _, err := sc.Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.2", Reason: "bad"}); err != nil {
		t.Fatal(err)
	}
	rl.link, err = release.SignKeySet(release.KeySetDocument{Version: 2, Threshold: 1, Keys: []ed25519.PublicKey{pub}, Expires: testNow.Add(365 * 24 * time.Hour)}, priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(rl.link), Reason: "rotate"}); err != nil {
		t.Fatal(err)
	}
	publish(t, sc, rl.envs["202604.01.5"])
	rl.all, err = rl.served.store.LogRecords(ctx, 0, 7)
	if err != nil || len(rl.all) != 7 {
		t.Fatalf("served log: %d records, %v", len(rl.all), err)
	}
	return rl
}

// checkpoint is the log key's checkpoint of the served log's first n.
func (rl *guardLog) checkpoint(t *testing.T, n int64) []byte {
	t.Helper()
	h, err := tlog.TreeHash(n, store.HashReader(t.Context(), rl.served.store))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := translog.Checkpoint{Origin: rl.origin, Size: n, Hash: h}.Sign(rl.signer)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

func (rl *guardLog) proof(t *testing.T, size, n int64) [][]byte {
	t.Helper()
	p, err := tlog.ProveTree(size, n, store.HashReader(t.Context(), rl.served.store))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, h := range p {
		out = append(out, h[:])
	}
	return out
}

// restored is a replica on a store holding the served log's first n
// records (a backup), with logs as its LogKeeper.
func (rl *guardLog) restored(t *testing.T, n int, logs LogKeeper, st store.Store) (*harness, adminv1.AdminServiceClient) {
	t.Helper()
	h := newHarness(t, harnessOpts{keys: &rl.root, logs: logs, store: st})
	c := h.ops(t)
	if st == nil {
		st = h.store
	}
	order := []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4"}
	for i := 0; i < n; i++ {
		switch i {
		case 0, 1, 2, 3:
			publish(t, c, rl.envs[order[i]])
		case 4:
			if _, err := c.Revoke(t.Context(), &adminv1.RevokeRequest{Version: "202604.01.2", Reason: "bad"}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("restored: %d records not supported", n)
		}
	}
	return h, c
}

func restoreReq(from int64, recs [][]byte, cp []byte, proof [][]byte) *adminv1.RestoreLogRequest {
	return &adminv1.RestoreLogRequest{From: from, Records: recs, Checkpoint: string(cp), Reason: "restore", Proof: proof}
}

// newGuardWitness is a real C2SP witness of rl's log on a socket.
func newGuardWitness(t *testing.T, rl *guardLog, name string) lps.Witness {
	t.Helper()
	wskey, _, err := translog.GenerateWitnessKey(name)
	if err != nil {
		t.Fatal(err)
	}
	cosigner, err := translog.NewCosigner(wskey, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	w, err := translog.OpenWitness(filepath.Join(t.TempDir(), "witness.json"), cosigner, []note.Verifier{rl.verifier}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	return lps.Witness{URL: srv.URL, Key: cosigner.Verifier()}
}

func newGuardCheckpointer(t *testing.T, rl *guardLog, st store.Store, quorum int, ws ...lps.Witness) *lps.Checkpointer {
	t.Helper()
	cp, err := lps.NewCheckpointer(st, lps.CheckpointerConfig{Signer: rl.signer, Verifier: rl.verifier, Witnesses: ws, Quorum: quorum})
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// F1: the guard lifts as soon as the store reaches the largest size a
// witness *that answered* reported, although RestoreLog has just been
// handed (and verified) a checkpoint the log key signed of a larger tree:
// any append then lands inside that signed tree with another record: a

// TestGuardRestoredCheckpointIsAFloor: a restore cut short (or between two
// calls) has shown lpsd a checkpoint of the log's key of a larger tree
// than its store holds: no append may land below it, whatever the
// witness that answered said; once the rest is restored, publishing goes
// on.
func TestGuardRestoredCheckpointIsAFloor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	cp7 := rl.checkpoint(t, 7)
	logs := &witnessedLog{v: rl.verifier}
	_, c := rl.restored(t, 3, logs, nil)
	logs.size.Store(5) // the witness that answered lags at 5
	if _, err := c.RestoreLog(ctx, restoreReq(3, rl.all[3:5], cp7, rl.proof(t, 7, 5))); err != nil {
		t.Fatalf("restore [3,5) of the 7-tree: %v", err)
	}
	_, err := c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: rl.envs["202604.01.9"], Reason: "ci"})
	wantCode(t, "publish between two restore calls", err, codes.FailedPrecondition)
	if info := errorInfo(err); info.GetReason() != ReasonLogBehind || info.GetMetadata()["witnessed_size"] != "7" {
		t.Errorf("refusal's ErrorInfo = %v, want %s at 7 (the restore's checkpoint)", info, ReasonLogBehind)
	}
	if _, err := c.RestoreLog(ctx, restoreReq(5, rl.all[5:7], cp7, nil)); err != nil {
		t.Fatalf("restore [5,7): %v", err)
	}
	publish(t, c, rl.envs["202604.01.9"])
}

// TestGuardWaitsForItsWitnesses: a replica whose witness has not answered
// since it started cannot tell whether its store is behind: an append
// waits for the answer, then is refused (LOG_UNVERIFIED); with the witness
// back, its answer shows the store behind (LOG_BEHIND), and nothing was
// appended meanwhile.
func TestGuardWaitsForItsWitnesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	w := newGuardWitness(t, rl, "witness.guard")
	if kept, err := newGuardCheckpointer(t, rl, rl.served.store, 1, w).Step(ctx, true); err != nil || !kept {
		t.Fatalf("served Step: %v %v", kept, err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	// The backup of 3: published before lpsd knew of any witness.
	rl.restored(t, 3, nil, st)
	cp := newGuardCheckpointer(t, rl, st, 1, lps.Witness{URL: down.URL, Key: w.Key})
	h := newHarness(t, harnessOpts{keys: &rl.root, logs: cp, store: st})
	c := h.ops(t)
	if _, err := cp.Step(ctx, true); err == nil {
		t.Fatal("Step with the witness down succeeded")
	}
	_, err := c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: rl.envs["202604.01.9"], Reason: "ci"})
	wantCode(t, "publish before any witness answered", err, codes.FailedPrecondition)
	if info := errorInfo(err); info.GetReason() != ReasonLogUnverified {
		t.Errorf("refusal's ErrorInfo = %v, want %s", info, ReasonLogUnverified)
	}
	if got, err := c.GetLog(ctx, &adminv1.GetLogRequest{}); err != nil || got.GetVerified() || !got.GetAppendsRefused() || got.GetWitnessesAnswered() != 0 {
		t.Errorf("GetLog = %v, %v; want unverified, 0 answered, appends refused", got, err)
	}
	back := newGuardCheckpointer(t, rl, st, 1, w)
	hb := newHarness(t, harnessOpts{keys: &rl.root, logs: back, store: st})
	if _, err := back.Step(ctx, true); err == nil {
		t.Error("Step on the store of 3 the witness knows at 7: cosigned")
	}
	_, err = hb.ops(t).PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: rl.envs["202604.01.9"], Reason: "ci"})
	if info := errorInfo(err); info.GetReason() != ReasonLogBehind || info.GetMetadata()["witnessed_size"] != "7" {
		t.Errorf("publish with the witness back: %v (ErrorInfo %v), want %s at 7", err, info, ReasonLogBehind)
	}
	if n, _ := st.LogSize(ctx); n != 3 {
		t.Errorf("log size %d, want the backup's 3: nothing appended", n)
	}
}

// liar is a witness that answers every add-checkpoint with a 409 naming
// the largest size there is.
func liar(t *testing.T) lps.Witness {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", translog.ContentTypeTreeSize)
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintln(w, int64(math.MaxInt64))
	}))
	t.Cleanup(srv.Close)
	_, vkey, _ := translog.GenerateWitnessKey("witness.liar")
	v, err := translog.ParseWitnessKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return lps.Witness{URL: srv.URL, Key: v}
}

// TestGuardOneLiarCannotWedge: with a quorum of 2 of 3, one witness that
// lies about its size does not stop a revoke on a healthy log (the
// quorum-th largest answer counts); with a quorum of 1 it does, as it
// could show nodes a fork anyway (documented: run a quorum of 2 or more).
func TestGuardOneLiarCannotWedge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	a, b := newGuardWitness(t, rl, "witness.a"), newGuardWitness(t, rl, "witness.b")
	cp := newGuardCheckpointer(t, rl, rl.served.store, 2, a, b, liar(t))
	if kept, err := cp.Step(ctx, true); err != nil || !kept {
		t.Fatalf("Step with quorum 2 of 3 = %v, %v; want kept", kept, err)
	}
	h := newHarness(t, harnessOpts{keys: &rl.root, logs: cp, store: rl.served.store})
	if _, err := h.ops(t).Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.3", Reason: "urgent"}); err != nil {
		t.Errorf("revoke with one lying witness of 3 (quorum 2): %v (Floor %+v)", err, cp.Floor())
	}
	one := newGuardCheckpointer(t, rl, rl.served.store, 1, a, liar(t))
	one.Step(ctx, true)
	if f := one.Floor(); !f.Verified || f.Size != math.MaxInt64 {
		t.Errorf("Floor at quorum 1 of 2 with a liar = %+v, want the liar's size (any one witness's word counts)", f)
	}
}

// blockingStore blocks LogRecords until release is closed, once armed.
type blockingStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingStore) LogRecords(ctx context.Context, start, end int64) ([][]byte, error) {
	if b.armed.Load() {
		b.once.Do(func() { close(b.entered) })
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Store.LogRecords(ctx, start, end)
}

// TestGuardDoesNotWaitForVerify: the checkpointer's first pass over a
// large log (store reads under its lock) never holds up GetLog or an
// append.
func TestGuardDoesNotWaitForVerify(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	bs := &blockingStore{Store: rl.served.store, entered: make(chan struct{}), release: make(chan struct{})}
	cp := newGuardCheckpointer(t, rl, bs, 0)
	h := newHarness(t, harnessOpts{keys: &rl.root, logs: cp, store: bs})
	c := h.ops(t)
	bs.armed.Store(true)
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go cp.Step(stepCtx, true)
	<-bs.entered
	defer close(bs.release)
	callCtx, done := context.WithTimeout(ctx, 2*time.Second)
	defer done()
	if _, err := c.GetLog(callCtx, &adminv1.GetLogRequest{}); err != nil {
		t.Errorf("GetLog while the checkpointer verifies the log: %v", err)
	}
	if _, err := c.Revoke(callCtx, &adminv1.RevokeRequest{Version: "202604.01.3", Reason: "urgent"}); err != nil {
		t.Errorf("revoke while the checkpointer verifies the log: %v", err)
	}
}

// TestRestoreRefusesAnUnknownKindWhole: a batch holding a record lpsd
// does not append (a newer lpsd's, restored with an older binary) is
// refused before anything is appended.
func TestRestoreRefusesAnUnknownKindWhole(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, priv := newKey(t)
	root, _ := release.NewKeySet(priv.Public().(ed25519.PublicKey))
	origin := "guard.example/log"
	skey, vkey, _ := translog.GenerateLogKey(origin)
	signer, _ := translog.NewLogSigner(skey)
	verifier, _ := translog.ParseLogKey(vkey)
	served := memstore.New()
	t.Cleanup(func() { served.Close() })
	put := func(v string, rec []byte) {
		r := rollout.Release{Version: v, Base: "202604.01", Envelope: []byte(signed(t, priv, v)), Rollout: rollout.Rollout{State: rollout.Draft}, PublishedAt: testNow, UpdatedAt: testNow}
		if rec == nil {
			rec = r.Envelope
		}
		if _, err := served.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "t", Action: "publish", Target: v}, rec); err != nil {
			t.Fatal(err)
		}
	}
	put("202604.01.1", nil)
	put("202604.01.2", []byte(`{"type":"nodehotfix.dev/component-revocation/v1","component":"x"}`))
	put("202604.01.3", nil)
	all, _ := served.LogRecords(ctx, 0, 3)
	th, _ := tlog.TreeHash(3, store.HashReader(ctx, served))
	cp, _ := translog.Checkpoint{Origin: origin, Size: 3, Hash: th}.Sign(signer)
	h := newHarness(t, harnessOpts{keys: &root, logs: &witnessedLog{v: verifier}})
	_, err := h.ops(t).RestoreLog(ctx, restoreReq(0, all, cp, nil))
	wantCode(t, "a batch with an unknown kind", err, codes.FailedPrecondition)
	if n, _ := h.store.LogSize(ctx); n != 0 {
		t.Errorf("log size %d after the refusal, want 0: nothing appended", n)
	}
}

// appendAfter appends, through inject, after the second LogSize read.
type appendAfter struct {
	store.Store
	calls  atomic.Int64
	inject func()
}

func (a *appendAfter) LogSize(ctx context.Context) (int64, error) {
	if a.calls.Add(1) == 2 && a.inject != nil {
		a.inject()
	}
	return a.Store.LogSize(ctx)
}

// TestRestoreAnAppendAfterIsNoAlarm: another operator's publish right
// after the restore's last record (the guard lifted) is no data loss: the
// tree the records make is checked where they end.
func TestRestoreAnAppendAfterIsNoAlarm(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	logs := &witnessedLog{v: rl.verifier}
	base := memstore.New()
	t.Cleanup(func() { base.Close() })
	rl.restored(t, 3, logs, base)
	wrapped := &appendAfter{Store: base}
	c := newHarness(t, harnessOpts{keys: &rl.root, logs: logs, store: wrapped}).ops(t)
	wrapped.inject = func() {
		r := rollout.Release{Version: "202604.01.9", Base: "202604.01", Envelope: []byte(rl.envs["202604.01.9"]), Rollout: rollout.Rollout{State: rollout.Draft}}
		if _, err := base.PutRelease(ctx, r, 0, store.AuditEntry{Actor: "other", Action: "publish", Target: r.Version}, r.Envelope); err != nil {
			t.Error(err)
		}
	}
	logs.size.Store(7)
	if _, err := c.RestoreLog(ctx, restoreReq(3, rl.all[3:7], rl.checkpoint(t, 7), nil)); err != nil {
		t.Errorf("RestoreLog followed by another append: %v, want done", err)
	}
}

// TestGuardForgetsAWitnessReset: a witness whose operator reset the log's
// state (accepting the restored history) is asked from nothing again, so
// its new size replaces the one it said before.
func TestGuardForgetsAWitnessReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	var cur atomic.Pointer[http.Handler]
	wskey, _, err := translog.GenerateWitnessKey("witness.reset")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, _ := translog.NewCosigner(wskey, time.Now)
	open := func() {
		w, err := translog.OpenWitness(filepath.Join(t.TempDir(), "witness.json"), cosigner, []note.Verifier{rl.verifier}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := w.Handler()
		cur.Store(&h)
	}
	open()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*cur.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	wit := lps.Witness{URL: srv.URL, Key: cosigner.Verifier()}
	if kept, err := newGuardCheckpointer(t, rl, rl.served.store, 1, wit).Step(ctx, true); err != nil || !kept {
		t.Fatalf("served Step: %v %v", kept, err)
	}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	rl.restored(t, 3, nil, st)
	cp := newGuardCheckpointer(t, rl, st, 1, wit)
	cp.Step(ctx, true)
	if f := cp.Floor(); f.Size != 7 {
		t.Fatalf("Floor on the restored store = %+v, want the witness's 7", f)
	}
	open() // reset
	if kept, err := cp.Step(ctx, true); err != nil || !kept {
		t.Errorf("Step after the witness reset = %v, %v; want cosigned", kept, err)
	}
	if f := cp.Floor(); f.Size != 3 {
		t.Errorf("Floor after the witness reset = %+v, want 3", f)
	}
}

// TestGetLogNotRefusedByAnOutage: one witness of two down, the other
// cosigning a tree the quorum did not: appends are not refused (nothing
// is behind), and GetLog says so.
func TestGetLogNotRefusedByAnOutage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rl := newGuardLog(t)
	a, b := newGuardWitness(t, rl, "witness.a"), newGuardWitness(t, rl, "witness.b")
	if kept, err := newGuardCheckpointer(t, rl, rl.served.store, 2, a, b).Step(ctx, true); err != nil || !kept {
		t.Fatalf("Step: %v %v", kept, err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	cp := newGuardCheckpointer(t, rl, rl.served.store, 2, a, lps.Witness{URL: down.URL, Key: b.Key})
	h := newHarness(t, harnessOpts{keys: &rl.root, logs: cp, store: rl.served.store})
	cp.Step(ctx, true) // a answers; b is down
	publish(t, h.ops(t), rl.envs["202604.01.8"])
	cp.Step(ctx, true)
	if st, err := h.ops(t).GetLog(ctx, &adminv1.GetLogRequest{}); err != nil || st.GetAppendsRefused() || !st.GetVerified() {
		t.Errorf("GetLog with a witness down = %v, %v; want verified, appends allowed", st, err)
	}
}
