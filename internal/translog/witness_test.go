package translog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type witnessEnv struct {
	f     *fixture
	w     *Witness
	wv    *CosignatureVerifier
	url   string
	state string
	tree  *memTree
}

func newWitnessEnv(t *testing.T) *witnessEnv {
	t.Helper()
	f := newFixture(t)
	e := &witnessEnv{f: f, wv: f.witV[0], state: filepath.Join(t.TempDir(), "witness.json"), tree: newTree(t, 40)}
	e.open(t)
	return e
}

// open (re)starts the witness from its state file.
func (e *witnessEnv) open(t *testing.T) {
	t.Helper()
	w, err := OpenWitness(e.state, e.f.cosigner(t, 0, testNow), []note.Verifier{e.f.logV}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	e.w, e.url = w, srv.URL
}

// add submits the tree at size with a proof from old.
func (e *witnessEnv) add(t *testing.T, tree *memTree, old, size int64) ([]byte, error) {
	t.Helper()
	var proof tlog.TreeProof
	if old > 0 && old < size {
		var err error
		if proof, err = tlog.ProveTree(size, old, tree); err != nil {
			t.Fatal(err)
		}
	}
	return e.addProof(t, old, proof, e.f.signed(t, size, tree.root(t, size)))
}

func (e *witnessEnv) addProof(t *testing.T, old int64, proof tlog.TreeProof, signed []byte) ([]byte, error) {
	t.Helper()
	return AddCheckpoint(t.Context(), nil, e.url, e.wv, old, proof, signed)
}

func wantStatus(t *testing.T, what string, err error, status int) *WitnessError {
	t.Helper()
	var we *WitnessError
	if !errors.As(err, &we) || we.StatusCode != status {
		t.Fatalf("%s: error %v, want a *WitnessError %d", what, err, status)
	}
	return we
}

func TestWitness(t *testing.T) {
	t.Parallel()
	e := newWitnessEnv(t)
	if _, err := os.Stat(e.state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state file before the first checkpoint: %v", err)
	}
	// Trust on first use: no state, old 0, any size.
	line, err := e.add(t, e.tree, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	msg := append(e.f.signed(t, 10, e.tree.root(t, 10)), line...)
	p := Policy{Log: e.f.logV, Witnesses: []note.Verifier{e.wv}, Quorum: 1}
	if _, cosigs, err := Open(msg, p, testNow); err != nil || len(cosigs) != 1 || !cosigs[0].Time.Equal(testNow) {
		t.Fatalf("Open(cosigned) = %v, %v", cosigs, err)
	}
	if _, err := e.add(t, e.tree, 10, 25); err != nil {
		t.Fatalf("10 → 25: %v", err)
	}
	// The same checkpoint again: a fresh cosignature, nothing to prove.
	if _, err := e.add(t, e.tree, 25, 25); err != nil {
		t.Fatalf("25 → 25: %v", err)
	}
	// Restarted from its file, the witness remembers 25.
	e.open(t)
	if n, ok := e.w.Size(testOrigin); !ok || n != 25 {
		t.Fatalf("Size after reopen = %d, %v, want 25", n, ok)
	}
	we := wantStatus(t, "old 10 after 25", func() error { _, err := e.add(t, e.tree, 10, 30); return err }(), http.StatusConflict)
	if we.Size != 25 {
		t.Errorf("409 size = %d, want 25", we.Size)
	}
	we = wantStatus(t, "old 0 after 25", func() error { _, err := e.add(t, e.tree, 0, 30); return err }(), http.StatusConflict)
	if we.Size != 25 {
		t.Errorf("409 size = %d, want 25", we.Size)
	}
	if _, err := e.add(t, e.tree, we.Size, 40); err != nil {
		t.Fatalf("retry from the 409's size: %v", err)
	}
}

func TestWitnessRefusesForks(t *testing.T) {
	t.Parallel()
	e := newWitnessEnv(t)
	if _, err := e.add(t, e.tree, 0, 20); err != nil {
		t.Fatal(err)
	}
	fork := newTree(t, 15)
	for i := int64(15); i < 40; i++ {
		fork.appendRecord(t, []byte(fmt.Sprintf("forked %d", i)))
	}
	// Same size, other hash.
	_, err := e.add(t, fork, 20, 20)
	wantStatus(t, "fork at the cosigned size", err, http.StatusConflict)
	// A larger tree that does not extend the cosigned one, with its own
	// (valid for the fork) proof.
	_, err = e.add(t, fork, 20, 30)
	wantStatus(t, "fork at a larger size", err, http.StatusUnprocessableEntity)
	// The real tree with a truncated or wrong proof.
	proof, _ := tlog.ProveTree(30, 20, e.tree)
	_, err = e.addProof(t, 20, proof[:len(proof)-1], e.f.signed(t, 30, e.tree.root(t, 30)))
	wantStatus(t, "truncated proof", err, http.StatusUnprocessableEntity)
	_, err = e.addProof(t, 20, proof, e.f.signed(t, 31, e.tree.root(t, 31)))
	wantStatus(t, "proof for another size", err, http.StatusUnprocessableEntity)
	if n, _ := e.w.Size(testOrigin); n != 20 {
		t.Errorf("after refusals the witness is at size %d, want 20", n)
	}
	if _, err := e.add(t, e.tree, 20, 30); err != nil {
		t.Errorf("the real extension after refusals: %v", err)
	}
}

func TestWitnessRefusesRequests(t *testing.T) {
	t.Parallel()
	e := newWitnessEnv(t)
	signed := e.f.signed(t, 10, e.tree.root(t, 10))
	otherSKey, _, _ := GenerateLogKey(testOrigin)
	impostor, _ := NewLogSigner(otherSKey)
	byImpostor, _ := Checkpoint{Origin: testOrigin, Size: 10, Hash: e.tree.root(t, 10)}.Sign(impostor)
	strangerSKey, _, _ := GenerateLogKey("stranger.example")
	stranger, _ := NewLogSigner(strangerSKey)
	byStranger, _ := Checkpoint{Origin: "stranger.example", Size: 10, Hash: e.tree.root(t, 10)}.Sign(stranger)
	h := someHash.String()
	tests := []struct {
		name string
		body string
		want int
	}{
		{"unknown-origin", "old 0\n\n" + string(byStranger), http.StatusNotFound},
		{"other-key-same-name", "old 0\n\n" + string(byImpostor), http.StatusForbidden},
		{"unsigned", "old 0\n\n" + string(mustText(t, signed)) + "\n", http.StatusBadRequest},
		{"tampered", "old 0\n\n" + strings.Replace(string(signed), "\n10\n", "\n11\n", 1), http.StatusForbidden},
		{"no-old-line", "\n" + string(signed), http.StatusBadRequest},
		{"old-leading-zero", "old 00\n\n" + string(signed), http.StatusBadRequest},
		{"old-above-size", "old 11\n" + h + "\n\n" + string(signed), http.StatusBadRequest},
		{"proof-from-zero", "old 0\n" + h + "\n\n" + string(signed), http.StatusBadRequest},
		{"bad-proof-line", "old 5\nAAAA\n\n" + string(signed), http.StatusBadRequest},
		{"64-proof-lines", "old 5\n" + strings.Repeat(h+"\n", 64) + "\n" + string(signed), http.StatusBadRequest},
		{"no-blank-line", "old 0\n" + string(signed), http.StatusBadRequest},
		{"oversize", "old 0\n\n" + strings.Repeat("x", MaxAddCheckpointSize), http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(e.url+"/add-checkpoint", "text/plain", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	resp, err := http.Get(e.url + "/add-checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
	if _, ok := e.w.Size(testOrigin); ok {
		t.Error("a refused request changed the witness's state")
	}
}

// TestWitnessSerialises: two extensions from the same old size race; the
// check and the update are one step, so exactly one wins (the spec's
// rollback race).
func TestWitnessSerialises(t *testing.T) {
	t.Parallel()
	e := newWitnessEnv(t)
	if _, err := e.add(t, e.tree, 0, 10); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = e.add(t, e.tree, 10, int64(20+i)) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			wantStatus(t, "racing add", err, http.StatusConflict)
		}
	}
	if ok != 1 {
		t.Errorf("%d racing extensions from one size succeeded, want 1", ok)
	}
}

func TestOpenWitnessState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	signer := f.cosigner(t, 0, testNow)
	logs := []note.Verifier{f.logV}
	dir := t.TempDir()
	valid := `{"schema":1,"logs":{"` + testOrigin + `":{"size":3,"hash":"` + someHash.String() + `"}}}`
	for _, tt := range []struct{ name, content string }{
		{"empty", ""},
		{"truncated", valid[:len(valid)/2]},
		{"not-json", "garbage"},
		{"schema-2", strings.Replace(valid, `"schema":1`, `"schema":2`, 1)},
		{"unknown-key", strings.Replace(valid, `"schema":1`, `"schema":1,"x":0`, 1)},
		{"duplicate-log", strings.Replace(valid, `}}}`, `},"`+testOrigin+`":{"size":3,"hash":"`+someHash.String()+`"}}}`, 1)},
		{"negative-size", strings.Replace(valid, `"size":3`, `"size":-3`, 1)},
		{"bad-hash", strings.Replace(valid, someHash.String(), "AAAA", 1)},
		{"null-logs", `{"schema":1,"logs":null}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenWitness(path, signer, logs, nil); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("OpenWitness(%s) = %v, want an error naming the file", tt.content, err)
			}
		})
	}
	path := filepath.Join(dir, "valid.json")
	if err := os.WriteFile(path, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWitness(path, signer, logs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := w.Size(testOrigin); !ok || n != 3 {
		t.Errorf("Size = %d, %v, want 3", n, ok)
	}
	if _, err := OpenWitness(path, signer, nil, nil); err == nil {
		t.Error("OpenWitness without log keys succeeded")
	}
}

func TestAddCheckpointRefusesResponses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	signed := f.signed(t, 10, someHash)
	good, err := cosignLine(mustText(t, signed), f.cosigner(t, 0, testNow))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := cosignLine(mustText(t, signed), f.cosigner(t, 1, testNow))
	otherText, _ := cosignLine([]byte(testOrigin+"\n11\n"+someHash.String()+"\n"), f.cosigner(t, 0, testNow))
	for _, tt := range []struct {
		name   string
		status int
		ctype  string
		body   string
	}{
		{"other-witness", 200, "", string(other)},
		{"other-checkpoint", 200, "", string(otherText)},
		{"empty", 200, "", ""},
		{"not-signature-lines", 200, "", "hello\n"},
		{"oversize", 200, "", string(good) + strings.Repeat(string(other), maxWitnessResponse/len(other))},
		{"conflict-without-size", 409, "text/plain", "25\n"},
		{"server-error", 500, "", "oops"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				if tt.ctype != "" {
					rw.Header().Set("Content-Type", tt.ctype)
				}
				rw.WriteHeader(tt.status)
				fmt.Fprint(rw, tt.body)
			}))
			defer srv.Close()
			line, err := AddCheckpoint(t.Context(), srv.Client(), srv.URL, f.witV[0], 0, nil, signed)
			if err == nil {
				t.Fatalf("AddCheckpoint = %q, nil error", line)
			}
			var we *WitnessError
			if errors.As(err, &we) && we.Size != -1 {
				t.Errorf("Size = %d from a response without text/x.tlog.size", we.Size)
			}
		})
	}
	// A witness that never answers is bounded by the caller's ctx.
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := AddCheckpoint(ctx, srv.Client(), srv.URL, f.witV[0], 0, nil, signed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AddCheckpoint to a silent witness: %v, want a deadline error", err)
	}
}
