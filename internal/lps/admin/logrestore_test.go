package admin

import (
	"crypto/ed25519"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
)

// witnessedLog is the LogKeeper of a replica whose witnesses said they
// cosigned a tree of size (what lps.Checkpointer learns from a 409).
type witnessedLog struct {
	v    note.Verifier
	size atomic.Int64
}

func (w *witnessedLog) Verifier() note.Verifier { return w.v }
func (w *witnessedLog) Floor() lps.LogFloor {
	return lps.LogFloor{Verified: true, Answered: 1, Witnesses: 1, Quorum: 1, Size: w.size.Load(), Witness: "https://witness.example"}
}

// TestRestoreLog: a store restored from a backup taken at 3 records, while
// the served log grew to 7 (a release, a revocation, a key set, a
// release), refuses every append while a witness has cosigned the 7; the
// records from a monitor's export are re-appended only when they extend
// the log to a checkpoint lpsd's log key signed, in calls of any size,
// each with its change; then the log is the tree served and appends go on.
func TestRestoreLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pub, priv := newKey(t)
	root, err := release.NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	skey, vkey, err := translog.GenerateLogKey("restore.example/log")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := translog.NewLogSigner(skey)
	verifier, _ := translog.ParseLogKey(vkey)

	// The log as served: 7 records.
	served := newHarness(t, harnessOpts{keys: &root})
	sc := served.ops(t)
	envs := make(map[string]string)
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4", "202604.01.5"} {
		envs[v] = signed(t, priv, v)
	}
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4"} {
		publish(t, sc, envs[v])
	}
	if _, err := sc.Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.2", Reason: "bad"}); err != nil {
		t.Fatal(err)
	}
	link, err := release.SignKeySet(release.KeySetDocument{Version: 2, Threshold: 1, Keys: []ed25519.PublicKey{pub}, Expires: testNow.Add(365 * 24 * time.Hour)}, priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(link), Reason: "rotate"}); err != nil {
		t.Fatal(err)
	}
	publish(t, sc, envs["202604.01.5"])
	all, err := served.store.LogRecords(ctx, 0, 7)
	if err != nil || len(all) != 7 {
		t.Fatalf("served log: %d records, %v; want 7", len(all), err)
	}
	servedHash, err := tlog.TreeHash(7, store.HashReader(ctx, served.store))
	if err != nil {
		t.Fatal(err)
	}
	cp7, err := translog.Checkpoint{Origin: "restore.example/log", Size: 7, Hash: servedHash}.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}

	// The restored store: the first 3 records (the backup).
	logs := &witnessedLog{v: verifier}
	h := newHarness(t, harnessOpts{keys: &root, logs: logs})
	c := h.ops(t)
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
		publish(t, c, envs[v])
	}
	// lpsd restarted on the backup: its checkpointer hears from the
	// witness that it cosigned 7.
	logs.size.Store(7)

	t.Run("appends-refused-while-behind", func(t *testing.T) {
		_, err := c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: signed(t, priv, "202604.01.9")})
		wantCode(t, "publish on a log behind its witness", err, codes.FailedPrecondition)
		if info := errorInfo(err); info.GetReason() != ReasonLogBehind || info.GetMetadata()["size"] != "3" || info.GetMetadata()["witnessed_size"] != "7" {
			t.Errorf("publish refusal's ErrorInfo = %v, want %s with size 3 and witnessed_size 7", info, ReasonLogBehind)
		}
		_, err = c.Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.1", Reason: "bad"})
		wantCode(t, "revoke on a log behind its witness", err, codes.FailedPrecondition)
		if err := setPct(ctx, c, "202604.01.1", 10, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.1", Action: adminv1.Action_ACTION_HALT, Reason: "stop serving it"}); err != nil {
			t.Errorf("halt (which appends nothing) on a log behind its witness = %v, want done", err)
		}
		_, err = c.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(link), Reason: "rotate"})
		wantCode(t, "key-set publish on a log behind its witness", err, codes.FailedPrecondition)
		if n, _ := h.store.LogSize(ctx); n != 3 {
			t.Errorf("log size %d after refused appends, want 3", n)
		}
		got, err := h.client(t, cred{token: "Bearer " + readerToken}).GetLog(ctx, &adminv1.GetLogRequest{})
		if err != nil || got.GetSize() != 3 || got.GetWitnessedSize() != 7 || !got.GetAppendsRefused() || got.GetOrigin() != "restore.example/log" {
			t.Errorf("GetLog (reader) = %v, %v; want size 3, witnessed 7, appends refused", got, err)
		}
	})

	restore := func(from int64, recs [][]byte, cp []byte, proof tlog.TreeProof) (*adminv1.RestoreLogResponse, error) {
		req := &adminv1.RestoreLogRequest{From: from, Records: recs, Checkpoint: string(cp), Reason: "restore from the export"}
		for _, p := range proof {
			req.Proof = append(req.Proof, p[:])
		}
		return c.RestoreLog(ctx, req)
	}
	proof5, err := tlog.ProveTree(7, 5, store.HashReader(ctx, served.store))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("refused", func(t *testing.T) {
		otherSKey, _, _ := translog.GenerateLogKey("restore.example/log")
		otherSigner, _ := translog.NewLogSigner(otherSKey)
		forged, _ := translog.Checkpoint{Origin: "restore.example/log", Size: 7, Hash: servedHash}.Sign(otherSigner)
		_, err := restore(3, all[3:7], forged, nil)
		wantCode(t, "a checkpoint another key signed", err, codes.InvalidArgument)
		_, err = restore(2, all[2:7], cp7, nil)
		wantCode(t, "records from another size than the log's", err, codes.FailedPrecondition)
		other := [][]byte{[]byte(signed(t, priv, "202604.01.8")), all[4], all[5], all[6]}
		_, err = restore(3, other, cp7, nil)
		wantCode(t, "records the checkpoint's tree does not hold", err, codes.FailedPrecondition)
		_, err = restore(3, all[3:5], cp7, nil)
		wantCode(t, "a batch short of the checkpoint without a proof", err, codes.FailedPrecondition)
		_, err = restore(3, nil, cp7, nil)
		wantCode(t, "no records", err, codes.InvalidArgument)
		if n, _ := h.store.LogSize(ctx); n != 3 {
			t.Errorf("log size %d after refused restores, want 3: nothing may be appended", n)
		}
	})
	t.Run("re-appended", func(t *testing.T) {
		first, err := restore(3, all[3:5], cp7, proof5)
		if err != nil || first.GetSize() != 5 || len(first.GetRestored()) != 2 {
			t.Fatalf("RestoreLog [3,5) = %v, %v; want size 5, 2 restored", first, err)
		}
		if got := first.GetRestored()[1]; got.GetKind() != "revocation" || got.GetTarget() != "202604.01.2" || got.GetIndex() != 4 {
			t.Errorf("record 4 restored as %v, want the revocation of 202604.01.2", got)
		}
		rest, err := restore(5, all[5:7], cp7, nil)
		if err != nil || rest.GetSize() != 7 {
			t.Fatalf("RestoreLog [5,7) = %v, %v; want size 7", rest, err)
		}
		if got := rest.GetRestored()[0]; got.GetKind() != "keyset" || got.GetTarget() != "keyset@2" {
			t.Errorf("record 5 restored as %v, want keyset@2", got)
		}
		th, err := tlog.TreeHash(7, store.HashReader(ctx, h.store))
		if err != nil || th != servedHash {
			t.Errorf("restored tree hash %v, %v; want the served %v", th, err, servedHash)
		}
		r4, _, err := h.store.Release(ctx, "202604.01.4")
		if err != nil || r4.Rollout.State != rollout.Draft || r4.Revoked {
			t.Errorf("re-appended 202604.01.4 = %+v, %v; want a draft", r4.Rollout, err)
		}
		r2, _, err := h.store.Release(ctx, "202604.01.2")
		if err != nil || !r2.Revoked {
			t.Errorf("202604.01.2 after its revocation was re-appended: revoked %v, %v; want revoked", r2.Revoked, err)
		}
		links, err := h.store.KeySets(ctx)
		if err != nil || len(links) != 1 || links[0].Version != 2 {
			t.Errorf("key sets after the restore = %v, %v; want version 2", links, err)
		}
		audit, err := c.ListAudit(ctx, &adminv1.ListAuditRequest{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range audit.GetEntries() {
			if e.GetAction() == ActionRestoreLog {
				n++
			}
		}
		if n != 4 {
			t.Errorf("%d %s audit entries, want 4 (one a record)", n, ActionRestoreLog)
		}
		_, err = restore(7, all[6:7], cp7, nil)
		wantCode(t, "restoring again past the checkpoint", err, codes.InvalidArgument)
		got, err := c.GetLog(ctx, &adminv1.GetLogRequest{})
		if err != nil || got.GetSize() != 7 || got.GetAppendsRefused() {
			t.Errorf("GetLog after the restore = %v, %v; want size 7, appends allowed", got, err)
		}
		publish(t, c, signed(t, priv, "202604.01.6"))
	})
}

// TestRestoreLogNeedsTheLogKey: without a log key lpsd cannot check the
// records against its log, so it re-appends none.
func TestRestoreLogNeedsTheLogKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	_, err := h.ops(t).RestoreLog(t.Context(), &adminv1.RestoreLogRequest{Records: [][]byte{[]byte("x")}, Checkpoint: "x"})
	wantCode(t, "RestoreLog without a log key", err, codes.FailedPrecondition)
}

// errorInfo returns err's ErrorInfo detail, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}
