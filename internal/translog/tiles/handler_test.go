package tiles

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/translog"
)

const testOrigin = "nodehotfix.example/log"

// newLogKey returns a fresh log signer and its verifier.
func newLogKey(t *testing.T) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, testOrigin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// checkpoint returns c's checkpoint, verified now.
func checkpoint(c *Client, ctx context.Context) (translog.Checkpoint, error) {
	cp, _, err := c.Checkpoint(ctx, time.Now())
	return cp, err
}

// openCP verifies a signed checkpoint with the log key v alone.
func openCP(msg []byte, v note.Verifier) (translog.Checkpoint, error) {
	cp, _, err := translog.Open(msg, translog.Policy{Log: v}, time.Now())
	return cp, err
}

func testRecord(i int) []byte {
	return fmt.Appendf(nil, `{"type":"nodehotfix-revocation","version":"202604.01.%d","time":"2026-04-01T00:00:00Z"}`, i)
}

// newLog returns a log of n test records signed by s, or unsigned for a
// nil s.
func newLog(t *testing.T, n int, s note.Signer) *MemSource {
	t.Helper()
	src, err := NewMemSource()
	if err != nil {
		t.Fatal(err)
	}
	grow(t, src, n, s)
	return src
}

// grow appends records up to size n and signs the new tree with s.
func grow(t *testing.T, src *MemSource, n int, s note.Signer) {
	t.Helper()
	size, _ := src.LogSize(t.Context())
	for i := int(size); i < n; i++ {
		if err := src.Append(testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if s != nil {
		if err := src.Sign(s); err != nil {
			t.Fatal(err)
		}
	}
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandlerTiles(t *testing.T) {
	t.Parallel()
	s, _ := newLogKey(t)
	src := newLog(t, 600, s) // level 0: tiles 000, 001, 002.p/88; level 1: 000.p/2
	h := Handler(src)
	hr := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) { return src.LogHashes(t.Context(), ix) })
	for _, tc := range []struct {
		path  string
		tile  tlog.Tile
		cache string
	}{
		{"/tile/0/000", tlog.Tile{H: 8, L: 0, N: 0, W: 256}, cacheImmutable},
		{"/tile/0/001", tlog.Tile{H: 8, L: 0, N: 1, W: 256}, cacheImmutable},
		{"/tile/0/002.p/88", tlog.Tile{H: 8, L: 0, N: 2, W: 88}, cachePartial},
		{"/tile/0/002.p/3", tlog.Tile{H: 8, L: 0, N: 2, W: 3}, cachePartial},
		{"/tile/1/000.p/2", tlog.Tile{H: 8, L: 1, N: 0, W: 2}, cachePartial},
	} {
		resp := get(t, h, http.MethodGet, tc.path)
		got := body(t, resp)
		want, err := tlog.ReadTileData(tc.tile, hr)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
			t.Errorf("GET %s = %s, %d bytes; want 200, tlog's %d bytes", tc.path, resp.Status, len(got), len(want))
		}
		if cc := resp.Header.Get("Cache-Control"); cc != tc.cache {
			t.Errorf("GET %s: Cache-Control %q, want %q", tc.path, cc, tc.cache)
		}
	}
	// The level-1 tile's hashes are the level-0 tiles' roots.
	l1 := body(t, get(t, h, http.MethodGet, "/tile/1/000.p/2"))
	for n := range 2 {
		l0 := body(t, get(t, h, http.MethodGet, fmt.Sprintf("/tile/0/%03d", n)))
		root := merkleRoot(l0)
		if !bytes.Equal(root[:], l1[n*32:(n+1)*32]) {
			t.Errorf("level-1 hash %d is not tile 0/%03d's root", n, n)
		}
	}
}

func TestHandlerEntries(t *testing.T) {
	t.Parallel()
	s, _ := newLogKey(t)
	src := newLog(t, 600, s)
	h := Handler(src)
	for _, tc := range []struct {
		path         string
		first, count int
		cache        string
	}{
		{"/tile/entries/000", 0, 256, cacheImmutable},
		{"/tile/entries/001", 256, 256, cacheImmutable},
		{"/tile/entries/002.p/88", 512, 88, cachePartial},
		{"/tile/entries/002.p/1", 512, 1, cachePartial},
	} {
		resp := get(t, h, http.MethodGet, tc.path)
		recs, err := DecodeBundle(body(t, resp))
		if resp.StatusCode != http.StatusOK || err != nil || len(recs) != tc.count {
			t.Fatalf("GET %s = %s, %d entries, %v; want %d entries", tc.path, resp.Status, len(recs), err, tc.count)
		}
		for i, rec := range recs {
			if want := testRecord(tc.first + i); !bytes.Equal(rec, want) {
				t.Errorf("GET %s: entry %d = %q, want %q", tc.path, i, rec, want)
			}
		}
		if cc := resp.Header.Get("Cache-Control"); cc != tc.cache {
			t.Errorf("GET %s: Cache-Control %q, want %q", tc.path, cc, tc.cache)
		}
	}
}

func TestHandlerNotFound(t *testing.T) {
	t.Parallel()
	s, _ := newLogKey(t)
	h := Handler(newLog(t, 600, s))
	for _, p := range []string{
		"/tile/0/002", "/tile/0/002.p/89", "/tile/0/003.p/1", "/tile/1/000", "/tile/1/000.p/3",
		"/tile/2/000.p/1", "/tile/entries/002", "/tile/entries/002.p/89", "/tile/entries/003.p/1",
		"/tile/0/2", "/tile/0/x000/002", "/tile/0/000.p/256", "/tile/8/000.p/1", "/tile/8/0/000",
		"/tile/", "/tile/0/x999/x999/x999/x999/x999/999", "/checkpoint/x", "/",
	} {
		if resp := get(t, h, http.MethodGet, p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %s, want 404", p, resp.Status)
		}
	}
	if resp := get(t, h, http.MethodPost, "/tile/0/000"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST = %s, want 405", resp.Status)
	}
	if resp := get(t, h, http.MethodHead, "/tile/0/000"); resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Length") != "8192" {
		t.Errorf("HEAD = %s, length %q; want 200, 8192", resp.Status, resp.Header.Get("Content-Length"))
	}
	// No checkpoint yet: 404, though the tiles of the records are served.
	empty := Handler(newLog(t, 3, nil))
	if resp := get(t, empty, http.MethodGet, "/checkpoint"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /checkpoint of an unsigned log = %s, want 404", resp.Status)
	}
	if resp := get(t, empty, http.MethodGet, "/tile/0/000.p/3"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /tile/0/000.p/3 of an unsigned log = %s, want 200", resp.Status)
	}
}

func TestHandlerCheckpoint(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	src := newLog(t, 5, s)
	resp := get(t, Handler(src), http.MethodGet, "/checkpoint")
	msg := body(t, resp)
	cp, err := openCP(msg, v)
	if resp.StatusCode != http.StatusOK || err != nil || cp.Size != 5 || cp.Origin != testOrigin {
		t.Fatalf("GET /checkpoint = %s, %+v, %v", resp.Status, cp, err)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != cacheCheckpoint {
		t.Errorf("Cache-Control %q, want %q", cc, cacheCheckpoint)
	}
	want, err := tlog.TreeHash(5, tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) { return src.LogHashes(t.Context(), ix) }))
	if err != nil || cp.Hash != want {
		t.Errorf("checkpoint hash %s, want %s (%v)", cp.Hash, want, err)
	}
}

func TestBundleRoundTrip(t *testing.T) {
	t.Parallel()
	recs := [][]byte{{}, []byte("a"), bytes.Repeat([]byte{0xff}, MaxEntrySize)}
	data, err := EncodeBundle(recs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBundle(data)
	if err != nil || len(got) != 3 || !bytes.Equal(got[2], recs[2]) || len(got[0]) != 0 {
		t.Errorf("DecodeBundle(EncodeBundle) = %d entries, %v", len(got), err)
	}
	if _, err := EncodeBundle([][]byte{make([]byte, MaxEntrySize+1)}); err == nil {
		t.Error("EncodeBundle of an oversize record succeeded")
	}
	for _, bad := range [][]byte{{0}, {0, 2, 'a'}} {
		if _, err := DecodeBundle(bad); err == nil {
			t.Errorf("DecodeBundle(%x) succeeded", bad)
		}
	}
}

// merkleRoot returns the RFC 6962 root of a full tile's hashes.
func merkleRoot(data []byte) tlog.Hash {
	if len(data) == tlog.HashSize {
		return tlog.Hash(data)
	}
	half := len(data) / 2
	return tlog.NodeHash(merkleRoot(data[:half]), merkleRoot(data[half:]))
}
