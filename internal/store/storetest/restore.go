package storetest

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
)

// Backup takes a backup of s as an operator would (a file copy with the
// store closed, an etcd snapshot) and returns the store to go on writing
// to, and restore, which replaces the store current with one restored from
// that backup (closing current first if it must) and may be called more
// than once.
type Backup func(t *testing.T, s store.Store) (live store.Store, restore func(t *testing.T, current store.Store) store.Store)

// restoreOrigin is the origin of RunRestore's log.
const restoreOrigin = "nodehotfix.example/restore-test"

// RunRestore checks, on the backend open and backup make, what
// docs/transparency-log.md says of backup and restore: a store restored
// from a backup holds a log that is a prefix of the one served since
// (consistent with it), so lpsd signs a smaller tree, which a witness that
// cosigned the larger one refuses (409 with its size), and once the
// restored log grows with other records, a tree of the same size that the
// witness refuses as a fork (409) and a node's kept checkpoint as
// inconsistent; re-appending the missing records, exactly as a monitor's
// export (tiles.Export) holds them, brings back the tree the witness
// cosigned, which it then cosigns again.
func RunRestore(t *testing.T, open func(t *testing.T) store.Store, backup Backup) {
	t.Helper()
	ctx := t.Context()
	l := newRestoreLog(t)
	s := open(t)
	versions := []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.01.4", "202604.01.5", "202604.01.6"}
	var records [][]byte
	for _, v := range versions[:3] {
		MustPutLogged(t, s, Release(v), 0, Record(v))
		records = append(records, Record(v))
	}
	cp3 := l.checkpoint(t, s, 3)
	l.mustCosign(t, 0, cp3)

	s, restore := backup(t, s)
	for _, v := range versions[3:] {
		MustPutLogged(t, s, Release(v), 0, Record(v))
		records = append(records, Record(v))
	}
	cp6 := l.checkpoint(t, s, 6)
	proof, err := tlog.ProveTree(6, 3, store.HashReader(ctx, s))
	if err != nil {
		t.Fatal(err)
	}
	l.mustCosign(t, 3, cp6, proof...)
	// A monitor exports what lpsd served, as lpsctl log export does.
	exportDir := t.TempDir()
	l.export(t, s, exportDir)

	s = restore(t, s)
	t.Run("restored-log-is-a-prefix", func(t *testing.T) {
		CheckLog(t, s, records[:3])
		restored := l.checkpoint(t, s, 3)
		if err := translog.VerifyConsistency(restored.cp, cp6.cp, proof); err != nil {
			t.Errorf("restored log of 3 against the served 6: %v, want consistent", err)
		}
	})
	t.Run("smaller-tree-refused", func(t *testing.T) {
		restored := l.checkpoint(t, s, 3)
		var we *translog.WitnessError
		for _, old := range []int64{0, 3} {
			if _, err := l.cosign(t, old, restored); !errors.As(err, &we) || we.StatusCode != http.StatusConflict || we.Size != 6 {
				t.Errorf("witness given the restored tree of 3 (old %d): %v, want 409 at size 6", old, err)
			}
		}
		// A node that kept the served checkpoint sees a rollback.
		if err := translog.VerifyConsistency(cp6.cp, restored.cp, nil); !hasReason(err, translog.ReasonRollback) {
			t.Errorf("node with checkpoint 6 given the restored 3: %v, want rollback", err)
		}
	})
	t.Run("regrown-tree-is-a-fork", func(t *testing.T) {
		for _, v := range []string{"202604.02.1", "202604.02.2", "202604.02.3"} {
			MustPutLogged(t, s, Release(v), 0, Record(v))
		}
		forked := l.checkpoint(t, s, 6)
		if forked.cp.Hash == cp6.cp.Hash {
			t.Fatal("a log of other records has the served root")
		}
		var we *translog.WitnessError
		if _, err := l.cosign(t, 6, forked); !errors.As(err, &we) || we.StatusCode != http.StatusConflict {
			t.Errorf("witness given another tree of 6: %v, want 409 (fork)", err)
		}
		if err := translog.VerifyConsistency(cp6.cp, forked.cp, nil); !hasReason(err, translog.ReasonInconsistent) {
			t.Errorf("node with checkpoint 6 given another tree of 6: %v, want inconsistent", err)
		}
	})
	t.Run("recover-from-export", func(t *testing.T) {
		s := restore(t, s)
		CheckLog(t, s, records[:3])
		size, err := s.LogSize(ctx)
		if err != nil {
			t.Fatal(err)
		}
		missing := l.exported(t, exportDir, size)
		if diff := cmp.Diff(records[3:], missing); diff != "" {
			t.Fatalf("records missing from the restored log, per the export (-want +got):\n%s", diff)
		}
		for i, rec := range missing {
			// The release a record logs is restored with it, and the
			// record appended exactly as exported.
			MustPutLogged(t, s, Release(versions[3+i]), 0, rec)
		}
		CheckLog(t, s, records)
		recovered := l.checkpoint(t, s, 6)
		if recovered.cp.Hash != cp6.cp.Hash {
			t.Fatalf("recovered root %s, served %s", recovered.cp.Hash, cp6.cp.Hash)
		}
		l.mustCosign(t, 6, recovered)
	})
}

func hasReason(err error, r translog.Reason) bool {
	var ve *translog.VerifyError
	return errors.As(err, &ve) && ve.Reason == r
}

// restoreLog is a log key and one witness, serving add-checkpoint.
type restoreLog struct {
	signer  note.Signer
	logKey  *translog.LogVerifier
	witness *translog.CosignatureVerifier
	url     string
}

// signedCheckpoint is a checkpoint and its signed note.
type signedCheckpoint struct {
	cp   translog.Checkpoint
	note []byte
}

func newRestoreLog(t *testing.T) *restoreLog {
	t.Helper()
	skey, vkey, err := translog.GenerateLogKey(restoreOrigin)
	if err != nil {
		t.Fatal(err)
	}
	l := &restoreLog{}
	if l.signer, err = translog.NewLogSigner(skey); err != nil {
		t.Fatal(err)
	}
	if l.logKey, err = translog.ParseLogKey(vkey); err != nil {
		t.Fatal(err)
	}
	wskey, _, err := translog.GenerateWitnessKey("witness.example")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, err := translog.NewCosigner(wskey, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.witness = cosigner.Verifier()
	w, err := translog.OpenWitness(filepath.Join(t.TempDir(), "witness.json"), cosigner, []note.Verifier{l.logKey}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	l.url = srv.URL
	return l
}

// checkpoint signs s's tree, which must hold size records, and keeps it in
// s, as lpsd's checkpointer does.
func (l *restoreLog) checkpoint(t *testing.T, s store.Store, size int64) signedCheckpoint {
	t.Helper()
	ctx := t.Context()
	if n, err := s.LogSize(ctx); err != nil || n != size {
		t.Fatalf("LogSize = %d, %v; want %d", n, err, size)
	}
	hash, err := tlog.TreeHash(size, store.HashReader(ctx, s))
	if err != nil {
		t.Fatal(err)
	}
	cp := translog.Checkpoint{Origin: restoreOrigin, Size: size, Hash: hash}
	msg, err := cp.Sign(l.signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutCheckpoint(ctx, size, msg); err != nil {
		t.Fatal(err)
	}
	return signedCheckpoint{cp, msg}
}

func (l *restoreLog) cosign(t *testing.T, old int64, c signedCheckpoint, proof ...tlog.Hash) ([]byte, error) {
	t.Helper()
	return translog.AddCheckpoint(t.Context(), nil, l.url, l.witness, old, proof, c.note)
}

func (l *restoreLog) mustCosign(t *testing.T, old int64, c signedCheckpoint, proof ...tlog.Hash) {
	t.Helper()
	if _, err := l.cosign(t, old, c, proof...); err != nil {
		t.Fatalf("witness refused checkpoint %d (old %d): %v", c.cp.Size, old, err)
	}
}

// export writes s's log to dir as tiles.Export does from lpsd's /log/.
func (l *restoreLog) export(t *testing.T, s store.Store, dir string) {
	t.Helper()
	srv := httptest.NewServer(tiles.Handler(store.TileSource{Log: s}))
	t.Cleanup(srv.Close)
	f, err := tiles.NewHTTPFetcher(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tiles.Export(t.Context(), tiles.NewClient(f, translog.Policy{Log: l.logKey}), dir, time.Now()); err != nil {
		t.Fatalf("Export: %v", err)
	}
}

// exported returns the records of the export in dir from index start on,
// each verified against its checkpoint.
func (l *restoreLog) exported(t *testing.T, dir string, start int64) [][]byte {
	t.Helper()
	f, err := tiles.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := tiles.NewClient(f, translog.Policy{Log: l.logKey})
	cp, _, err := c.Checkpoint(t.Context(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	err = c.Records(t.Context(), cp, start, func(_ int64, rec []byte) error {
		out = append(out, rec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
