package tiles

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/translog"
)

// serve starts an HTTP server for h and returns a Client of it.
func serve(t *testing.T, h http.Handler, v note.Verifier) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f, err := NewHTTPFetcher(srv.URL+"/", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(f, translog.Policy{Log: v})
}

// records returns every record of cp's tree through c.
func records(t *testing.T, c *Client, cp translog.Checkpoint, start int64) ([][]byte, error) {
	t.Helper()
	var out [][]byte
	err := c.Records(t.Context(), cp, start, func(i int64, rec []byte) error {
		if want := start + int64(len(out)); i != want {
			t.Fatalf("Records gave index %d, want %d", i, want)
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

func checkRecords(t *testing.T, got [][]byte, err error, start, end int) {
	t.Helper()
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	if len(got) != end-start {
		t.Fatalf("Records gave %d records, want %d", len(got), end-start)
	}
	for i, rec := range got {
		if want := testRecord(start + i); !bytes.Equal(rec, want) {
			t.Fatalf("record %d = %q, want %q", start+i, rec, want)
		}
	}
}

func TestClient(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	src := newLog(t, 0, s)
	c := serve(t, Handler(src), v)
	ctx := t.Context()
	var kept translog.Checkpoint
	// Sizes across tile edges at levels 0 and 1 (65536 needs a full level-1 tile).
	for _, size := range []int{0, 1, 255, 256, 257, 600, 66000} {
		grow(t, src, size, s)
		cp, err := checkpoint(c, ctx)
		if err != nil || cp.Size != int64(size) {
			t.Fatalf("Checkpoint at %d = %+v, %v", size, cp, err)
		}
		if kept.Origin != "" {
			if err := c.CheckConsistent(ctx, kept, cp); err != nil {
				t.Errorf("CheckConsistent(%d, %d): %v", kept.Size, cp.Size, err)
			}
		}
		start := max(0, size-300)
		got, err := records(t, c, cp, int64(start))
		checkRecords(t, got, err, start, size)
		kept = cp
	}
	// Every kept size against the largest tree.
	for _, k := range []int64{1, 7, 256, 511, 513, 65535, 65536, 65537} {
		old := newLog(t, int(k), s)
		oldCP, err := NewClient(nil, translog.Policy{Log: v}).openNote(t, old)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckConsistent(ctx, oldCP, kept); err != nil {
			t.Errorf("CheckConsistent(%d, %d): %v", k, kept.Size, err)
		}
	}
}

// openNote returns src's verified checkpoint.
func (c *Client) openNote(t *testing.T, src *MemSource) (translog.Checkpoint, error) {
	t.Helper()
	_, msg, _ := src.Checkpoint(t.Context())
	return openCP(msg, c.policy.Log)
}

func TestClientFork(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	ctx := t.Context()
	a := newLog(t, 300, s)
	keptA, err := NewClient(nil, translog.Policy{Log: v}).openNote(t, a)
	if err != nil {
		t.Fatal(err)
	}
	// b rewrites record 150 and keeps growing: signed by the same log key.
	b := newLog(t, 150, nil)
	if err := b.Append([]byte("another history")); err != nil {
		t.Fatal(err)
	}
	grow(t, b, 300, s)
	cb := serve(t, Handler(b), v)
	cpB, err := checkpoint(cb, ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fe *ForkError
	if err := cb.CheckConsistent(ctx, keptA, cpB); !errors.As(err, &fe) || fe.Kept.Hash != keptA.Hash || fe.Got.Hash != cpB.Hash {
		t.Errorf("same size, other hash: %v, want a *ForkError", err)
	}
	grow(t, b, 700, s)
	cpB, err = checkpoint(cb, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.CheckConsistent(ctx, keptA, cpB); !errors.As(err, &fe) || !strings.Contains(fe.Reason, "prefix") {
		t.Errorf("larger inconsistent tree: %v, want a *ForkError", err)
	}
	// The honest log is not a fork, and a smaller checkpoint is stale.
	ca := serve(t, Handler(a), v)
	grow(t, a, 700, s)
	cpA, err := checkpoint(ca, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.CheckConsistent(ctx, keptA, cpA); err != nil {
		t.Errorf("honest growth: %v", err)
	}
	var se *StaleError
	if err := ca.CheckConsistent(ctx, cpA, keptA); !errors.As(err, &se) {
		t.Errorf("smaller checkpoint: %v, want a *StaleError", err)
	}
}

// lyingSource serves a log with one thing changed.
type lyingSource struct {
	*MemSource
	record func(i int64, rec []byte) []byte
	hash   func(x int64, h tlog.Hash) tlog.Hash
}

func (l *lyingSource) LogRecords(ctx context.Context, start, end int64) ([][]byte, error) {
	recs, err := l.MemSource.LogRecords(ctx, start, end)
	if l.record != nil {
		for i := range recs {
			recs[i] = l.record(start+int64(i), recs[i])
		}
	}
	return recs, err
}

func (l *lyingSource) LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	hs, err := l.MemSource.LogHashes(ctx, indexes)
	if l.hash != nil {
		for i := range hs {
			hs[i] = l.hash(indexes[i], hs[i])
		}
	}
	return hs, err
}

// mangle serves h with the body of each path for which f returns true
// replaced by change's result.
func mangle(h http.Handler, match func(path string) bool, change func([]byte) []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !match(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		w.WriteHeader(rec.Code)
		w.Write(change(rec.Body.Bytes()))
	})
}

func TestClientDetectsLies(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	otherSigner, _ := newLogKey(t)
	src := newLog(t, 600, s)
	forged := newLog(t, 600, otherSigner)
	_, forgedNote, _ := forged.Checkpoint(t.Context())
	is := func(p string) func(string) bool { return func(q string) bool { return q == p } }
	for _, tc := range []struct {
		name   string
		h      http.Handler
		reason Reason
	}{
		{"wrong-entry", Handler(&lyingSource{MemSource: src, record: func(i int64, rec []byte) []byte {
			if i == 300 {
				return []byte(`{"type":"nodehotfix-revocation","version":"202604.01.1","time":"2026-04-01T00:00:00Z"}`)
			}
			return rec
		}}), ReasonEntries},
		{"dropped-entry", mangle(Handler(src), is("/tile/entries/001"), func(b []byte) []byte {
			recs, _ := DecodeBundle(b)
			out, _ := EncodeBundle(recs[:255])
			return out
		}), ReasonEntries},
		{"wrong-leaf-hash", Handler(&lyingSource{MemSource: src, hash: func(x int64, h tlog.Hash) tlog.Hash {
			if x == tlog.StoredHashIndex(0, 300) {
				h[0] ^= 1
			}
			return h
		}}), ReasonTile},
		{"wrong-upper-hash", Handler(&lyingSource{MemSource: src, hash: func(x int64, h tlog.Hash) tlog.Hash {
			if x == tlog.StoredHashIndex(8, 1) {
				h[0] ^= 1
			}
			return h
		}}), ReasonTile},
		{"short-tile", mangle(Handler(src), is("/tile/0/002.p/88"), func(b []byte) []byte { return b[:len(b)-32] }), ReasonTile},
		{"oversize-tile", mangle(Handler(src), is("/tile/0/001"), func(b []byte) []byte { return append(b, b...) }), ReasonTooLarge},
		{"oversize-checkpoint", mangle(Handler(src), is("/checkpoint"), func(b []byte) []byte {
			return append(bytes.Repeat([]byte("x"), translog.MaxNoteSize), b...)
		}), ReasonTooLarge},
		{"oversize-bundle", mangle(Handler(src), is("/tile/entries/000"), func(b []byte) []byte {
			return append(b, make([]byte, MaxBundleSize)...)
		}), ReasonTooLarge},
		{"other-log-key", mangle(Handler(src), is("/checkpoint"), func([]byte) []byte { return forgedNote }), ReasonCheckpoint},
		{"altered-checkpoint", mangle(Handler(src), is("/checkpoint"), func(b []byte) []byte {
			return bytes.Replace(b, []byte("\n600\n"), []byte("\n601\n"), 1)
		}), ReasonCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := serve(t, tc.h, v)
			cp, err := checkpoint(c, t.Context())
			if err == nil {
				_, err = records(t, c, cp, 0)
			}
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Reason != tc.reason {
				t.Errorf("reading the log: %v, want a *VerifyError %s", err, tc.reason)
			}
		})
	}
}

// TestClientPartialGone: a reader of a checkpoint older than the log
// reads the full level-0 tile or bundle when the partial one it needs is
// gone.
func TestClientPartialGone(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	src := newLog(t, 300, s)
	_, oldNote, _ := src.Checkpoint(t.Context())
	grow(t, src, 600, nil)
	src.SetCheckpoint(300, oldNote)
	var partials int
	noPartials := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if level0 := strings.HasPrefix(r.URL.Path, "/tile/0/") || strings.HasPrefix(r.URL.Path, "/tile/entries/"); level0 && strings.Contains(r.URL.Path, ".p/") {
			partials++
			http.NotFound(w, r)
			return
		}
		Handler(src).ServeHTTP(w, r)
	})
	c := serve(t, noPartials, v)
	cp, err := checkpoint(c, t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got, err := records(t, c, cp, 0)
	checkRecords(t, got, err, 0, 300)
	if partials == 0 {
		t.Error("the client asked for no partial tile; the test tests nothing")
	}
}

func TestNewHTTPFetcherRefuses(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "ftp://x/", "file:///tmp", "https://", "https://h/?q=1", "/tmp/dir"} {
		if _, err := NewHTTPFetcher(u, nil); err == nil {
			t.Errorf("NewHTTPFetcher(%q) succeeded", u)
		}
	}
}

// TestClientTreeProof: the proof from the served tiles that a tree of
// 600 extends its first n records checks against both roots, and sizes
// outside the tree are refused.
func TestClientTreeProof(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	src := newLog(t, 600, s)
	c := serve(t, Handler(src), v)
	ctx := t.Context()
	cp, err := checkpoint(c, ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{1, 255, 256, 257, 599, 600} {
		proof, err := c.TreeProof(ctx, cp, n)
		if err != nil {
			t.Fatalf("TreeProof(%d): %v", n, err)
		}
		old, err := tlog.TreeHash(n, tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) { return src.readHashes(idx) }))
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckTree(proof, cp.Size, cp.Hash, n, old); err != nil {
			t.Errorf("TreeProof(%d) does not check: %v", n, err)
		}
	}
	for _, n := range []int64{0, -1, 601} {
		if _, err := c.TreeProof(ctx, cp, n); err == nil {
			t.Errorf("TreeProof(%d) of a tree of 600: accepted", n)
		}
	}
}
