package fetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/atomicfile"
)

// artifact is the test release's binary: a few copy buffers long, so that
// the body arrives in several reads.
var artifact = bytes.Repeat([]byte("hotfix-binary\x00\x01\x02"), 10_000)

func wantFor(b []byte) Want {
	sum := sha256.Sum256(b)
	return Want{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b))}
}

// newTLSServer starts an in-process https server and a Client that trusts it
// through ExtraRootsPEM, as --artifact-ca would.
func newTLSServer(t *testing.T, h http.Handler, cfg Config) (*httptest.Server, *Client) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	cfg.ExtraRootsPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv, c
}

// staged is a destination with old content and an atomicfile writing over it.
type staged struct {
	dir, path string
	f         *atomicfile.File
}

func stage(t *testing.T) staged {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "aks-node-controller-hotfix")
	if err := os.WriteFile(path, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := atomicfile.Create(path, 0o755)
	if err != nil {
		t.Fatalf("atomicfile.Create: %v", err)
	}
	t.Cleanup(func() { f.Abort() })
	return staged{dir: dir, path: path, f: f}
}

// assertUntouched aborts the staged file, then checks that no temp file is
// left and the destination still has its old content.
func (s staged) assertUntouched(t *testing.T) {
	t.Helper()
	if err := s.f.Abort(); err != nil {
		t.Errorf("Abort: %v", err)
	}
	var names []string
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{filepath.Base(s.path)}, names); diff != "" {
		t.Errorf("files after Abort (-want +got):\n%s", diff)
	}
	if got, err := os.ReadFile(s.path); err != nil || string(got) != "old" {
		t.Errorf("destination = %q, %v; want %q", got, err, "old")
	}
}

func serveBytes(b []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}
}

func TestDownload(t *testing.T) {
	t.Parallel()
	srv, c := newTLSServer(t, serveBytes(artifact), Config{})
	s := stage(t)
	if err := c.Download(t.Context(), srv.URL+"/anc?sig=secret", wantFor(artifact), s.f); err != nil {
		t.Fatalf("Download: %v", err)
	}
	if err := s.f.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	got, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, artifact) {
		t.Errorf("destination has %d bytes, want the %d artifact bytes", len(got), len(artifact))
	}
}

func TestDownloadChunked(t *testing.T) {
	t.Parallel()
	// No Content-Length: the count of body bytes alone decides.
	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for b := artifact; len(b) > 0; {
			n := min(len(b), 1000)
			w.Write(b[:n])
			http.NewResponseController(w).Flush()
			b = b[n:]
		}
	}), Config{})
	var buf bytes.Buffer
	if err := c.Download(t.Context(), srv.URL, wantFor(artifact), &buf); err != nil {
		t.Fatalf("Download: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), artifact) {
		t.Errorf("got %d bytes, want the %d artifact bytes", buf.Len(), len(artifact))
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDownloadRejects(t *testing.T) {
	t.Parallel()
	html := []byte("<html><body>Please sign in to the hotel Wi-Fi</body></html>")
	wrong := bytes.Clone(artifact)
	wrong[len(wrong)/2] ^= 0xff
	gz := gzipped(t, artifact)

	tests := []struct {
		name    string
		handler func(t *testing.T) http.HandlerFunc
		// reason is the VerifyError reason, or "" for a transport error.
		reason Reason
	}{
		{
			name:    "wrong-hash",
			handler: func(*testing.T) http.HandlerFunc { return serveBytes(wrong) },
			reason:  ReasonDigest,
		},
		{
			name:    "captive-portal",
			handler: func(*testing.T) http.HandlerFunc { return serveBytes(html) },
			reason:  ReasonSize,
		},
		{
			name: "captive-portal-chunked",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.Write(html)
					http.NewResponseController(w).Flush()
				}
			},
			reason: ReasonSize,
		},
		{
			name: "content-length-too-long",
			handler: func(*testing.T) http.HandlerFunc {
				return serveBytes(append(bytes.Clone(artifact), "trailer"...))
			},
			reason: ReasonSize,
		},
		{
			name: "endless",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					chunk := bytes.Repeat([]byte{'x'}, 4096)
					for {
						if _, err := w.Write(chunk); err != nil {
							return
						}
					}
				}
			},
			reason: ReasonSize,
		},
		{
			name: "short-body",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.Write(artifact[:len(artifact)/2])
					http.NewResponseController(w).Flush()
				}
			},
			reason: ReasonSize,
		},
		{
			name: "content-length-lies-short",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", strconv.Itoa(len(artifact)))
					w.Write(artifact[:len(artifact)/2])
				}
			},
			reason: "", // io.ErrUnexpectedEOF: the connection ends early
		},
		{
			name: "reset-mid-body",
			handler: func(t *testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", strconv.Itoa(len(artifact)))
					w.Write(artifact[:len(artifact)/2])
					rc := http.NewResponseController(w)
					rc.Flush()
					conn, _, err := rc.Hijack()
					if err != nil {
						t.Errorf("Hijack: %v", err)
						return
					}
					// SO_LINGER 0 makes Close send a TCP RST.
					if tc, ok := conn.(*tls.Conn).NetConn().(*net.TCPConn); ok {
						tc.SetLinger(0)
					}
					conn.Close()
				}
			},
			reason: "",
		},
		{
			name: "gzip-encoding",
			handler: func(*testing.T) http.HandlerFunc {
				// Inflated, these bytes are exactly the artifact: the
				// client must refuse rather than decompress.
				return func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Encoding", "gzip")
					w.Header().Set("Content-Length", strconv.Itoa(len(gz)))
					w.Write(gz)
				}
			},
			reason: ReasonEncoding,
		},
		{
			name: "not-found",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }
			},
			reason: "",
		},
		{
			name: "server-error",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "boom", http.StatusInternalServerError)
				}
			},
			reason: "",
		},
		{
			name: "partial-content",
			handler: func(*testing.T) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusPartialContent)
					w.Write(artifact)
				}
			},
			reason: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, c := newTLSServer(t, tt.handler(t), Config{})
			s := stage(t)
			err := c.Download(t.Context(), srv.URL+"/anc", wantFor(artifact), s.f)
			checkReason(t, err, tt.reason)
			s.assertUntouched(t)
		})
	}
}

// checkReason checks that err is a *VerifyError with reason, or, for an
// empty reason, a non-nil error that is not a *VerifyError.
func checkReason(t *testing.T, err error, reason Reason) {
	t.Helper()
	if err == nil {
		t.Fatal("Download = nil, want error")
	}
	var ve *VerifyError
	switch isVE := errors.As(err, &ve); {
	case reason == "" && isVE:
		t.Errorf("Download = %v, want a transport error, not a VerifyError", err)
	case reason != "" && !isVE:
		t.Errorf("Download = %v, want a VerifyError %q", err, reason)
	case reason != "" && ve.Reason != reason:
		t.Errorf("Download = %v, reason %q, want %q", err, ve.Reason, reason)
	}
}

func TestDownloadReadErrors(t *testing.T) {
	t.Parallel()
	// The early end of a declared-length body is a transport error that
	// keeps its cause, so that the caller can tell it from a bad artifact.
	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(artifact)))
		w.Write(artifact[:10])
	}), Config{})
	err := c.Download(t.Context(), srv.URL, wantFor(artifact), io.Discard)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Download = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestDownloadTrickleBoundedByContext(t *testing.T) {
	t.Parallel()
	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(artifact)))
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		rc := http.NewResponseController(w)
		for _, b := range artifact {
			if _, err := w.Write([]byte{b}); err != nil {
				return
			}
			rc.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}), Config{})
	s := stage(t)
	// The trickle never stalls, so only the caller's deadline ends it.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := c.Download(ctx, srv.URL, wantFor(artifact), s.f)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Download = %v, want context.DeadlineExceeded", err)
	}
	checkReason(t, err, "")
	s.assertUntouched(t)
}

func TestDownloadStall(t *testing.T) {
	t.Parallel()
	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(artifact)))
		w.Write(artifact[:100])
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}), Config{StallTimeout: 20 * time.Millisecond})
	s := stage(t)
	err := c.Download(t.Context(), srv.URL, wantFor(artifact), s.f)
	if !errors.Is(err, ErrStalled) {
		t.Errorf("Download = %v, want ErrStalled", err)
	}
	checkReason(t, err, "")
	s.assertUntouched(t)
}

func TestDownloadInvalidWant(t *testing.T) {
	t.Parallel()
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	good := wantFor(artifact)
	for _, w := range []Want{
		{SHA256: "", Size: good.Size},
		{SHA256: "zz" + good.SHA256[2:], Size: good.Size},
		{SHA256: good.SHA256[:62], Size: good.Size},
		{SHA256: good.SHA256, Size: 0},
		{SHA256: good.SHA256, Size: -1},
	} {
		err := c.Download(t.Context(), "https://example.invalid/anc", w, io.Discard)
		if err == nil || errors.As(err, new(*VerifyError)) {
			t.Errorf("Download(want %+v) = %v, want a non-verify error", w, err)
		}
	}
}

// TestDownloadMemoryDoesNotGrowWithSize downloads a small and a large
// artifact and checks that the large one allocates about as much: the body
// goes through a fixed buffer, never into memory as a whole.
func TestDownloadMemoryDoesNotGrowWithSize(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads 32 MiB")
	}
	const small, large = 1 << 20, 32 << 20
	block := bytes.Repeat([]byte{0x5a}, 1<<20)
	h := sha256.New()
	for range large / len(block) {
		h.Write(block)
	}
	largeWant := Want{SHA256: hex.EncodeToString(h.Sum(nil)), Size: large}
	smallWant := wantFor(block)

	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for range n / len(block) {
			if _, err := w.Write(block); err != nil {
				return
			}
		}
	}), Config{})
	allocated := func(n int, want Want) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := c.Download(t.Context(), fmt.Sprintf("%s/?n=%d", srv.URL, n), want, io.Discard); err != nil {
			t.Fatalf("Download(%d bytes): %v", n, err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	allocated(small, smallWant) // warm up connection and TLS state
	a, b := allocated(small, smallWant), allocated(large, largeWant)
	// Both sides of the connection are in this process; 8 MiB is slack for
	// their per-record garbage and still far below the 31 MiB difference.
	if b > a+8<<20 {
		t.Errorf("download of %d bytes allocated %d bytes, of %d bytes %d: grows with size", large, b, small, a)
	}
}
