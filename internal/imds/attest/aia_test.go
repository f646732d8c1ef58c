package attest

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodehotfix/internal/imds/imdssign"
)

// stubTransport answers AIA fetches from handle and records every URL it
// was asked for.
type stubTransport struct {
	mu     sync.Mutex
	urls   []string
	handle func(*http.Request) (*http.Response, error)
}

func (s *stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.urls = append(s.urls, r.URL.String())
	handle := s.handle
	s.mu.Unlock()
	return handle(r)
}

func (s *stubTransport) requested() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.urls)
}

func (s *stubTransport) setHandler(h func(*http.Request) (*http.Response, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle = h
}

func response(r *http.Request, status int, body io.Reader, length int64) *http.Response {
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{},
		Body:          io.NopCloser(body),
		ContentLength: length,
		Request:       r,
	}
}

// serve answers url with body and everything else with 404.
func serve(url string, body []byte) func(*http.Request) (*http.Response, error) {
	return func(r *http.Request) (*http.Response, error) {
		if r.URL.String() != url {
			return response(r, http.StatusNotFound, strings.NewReader(""), 0), nil
		}
		return response(r, http.StatusOK, strings.NewReader(string(body)), int64(len(body))), nil
	}
}

// endless is a body that never ends and counts what was read from it.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'A'
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// aiaConfig fetches intermediates through rt and preloads none.
func aiaConfig(fx fixture, rt http.RoundTripper) Config {
	cfg := baseConfig(fx)
	cfg.Intermediates = nil
	cfg.DisableAIA = false
	cfg.AIATransport = rt
	return cfg
}

func TestAIAFetchThenCache(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	pemBody := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fx.ca.Intermediate.Raw})
	for name, body := range map[string][]byte{"der": fx.ca.Intermediate.Raw, "pem": pemBody} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := &stubTransport{handle: serve(imdssign.DefaultAIAURL, body)}
			v := mustNew(t, aiaConfig(fx, rt))
			for i, nonce := range []string{"first", "second"} {
				tok := mustSign(t, content(t, func(d *imdssign.Document) { d.Nonce = nonce }), fx.ca.Leaf, fx.ca.LeafKey)
				if _, err := v.Verify(t.Context(), tok); err != nil {
					t.Fatalf("Verify #%d: %v", i+1, err)
				}
			}
			if got, want := rt.requested(), []string{imdssign.DefaultAIAURL}; !slices.Equal(got, want) {
				t.Errorf("AIA requests = %q, want %q (one fetch, then the cache)", got, want)
			}
		})
	}
}

func TestAIACachedSurvivesStall(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	rt := &stubTransport{handle: serve(imdssign.DefaultAIAURL, fx.ca.Intermediate.Raw)}
	v := mustNew(t, aiaConfig(fx, rt))
	tok := mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey)
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	rt.setHandler(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	tok2 := mustSign(t, content(t, func(d *imdssign.Document) { d.Nonce = "again" }), fx.ca.Leaf, fx.ca.LeafKey)
	if _, err := v.Verify(t.Context(), tok2); err != nil {
		t.Fatalf("Verify with a stalled AIA host and a cached intermediate: %v", err)
	}
	if n := len(rt.requested()); n != 1 {
		t.Errorf("%d AIA requests, want 1", n)
	}
}

func TestAIAStallBoundedByContext(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	started := make(chan struct{})
	rt := &stubTransport{handle: func(r *http.Request) (*http.Response, error) {
		close(started)
		<-r.Context().Done()
		return nil, r.Context().Err()
	}}
	v := mustNew(t, aiaConfig(fx, rt))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := v.Verify(ctx, mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey))
	wantReason(t, err, ReasonIntermediate)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Verify error = %v, want it to wrap context.Canceled", err)
	}
}

func TestAIAFaults(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	const evil = "http://evil.example/ca.crt"
	leafWithAIA := func(t *testing.T, urls ...string) string {
		leaf, key := mintLeaf(t, &x509.Certificate{
			DNSNames:              []string{"eastus.metadata.azure.com"},
			IssuingCertificateURL: urls,
		}, fx.ca.Intermediate, fx.ca.IntermediateKey)
		return mustSign(t, content(t, nil), leaf, key)
	}
	genuine := func(t *testing.T) string { return mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey) }
	var huge endless
	tests := []struct {
		name   string
		token  func(t *testing.T) string
		handle func(*http.Request) (*http.Response, error)
		want   Reason
		urls   []string // requests expected, in order
	}{
		{
			name:  "aia-off-host",
			token: func(t *testing.T) string { return leafWithAIA(t, evil) },
			want:  ReasonChain,
		},
		{
			name:  "aia-user-info",
			token: func(t *testing.T) string { return leafWithAIA(t, "http://evil.example@www.microsoft.com/ca.crt") },
			want:  ReasonChain,
		},
		{
			name:  "aia-other-port",
			token: func(t *testing.T) string { return leafWithAIA(t, "http://www.microsoft.com:8080/ca.crt") },
			want:  ReasonChain,
		},
		{
			name:  "aia-ftp",
			token: func(t *testing.T) string { return leafWithAIA(t, "ftp://www.microsoft.com/ca.crt") },
			want:  ReasonChain,
		},
		{
			name:  "aia-lookalike-host",
			token: func(t *testing.T) string { return leafWithAIA(t, "http://www.microsoft.com.evil.example/ca.crt") },
			want:  ReasonChain,
		},
		{
			name:  "no-aia",
			token: func(t *testing.T) string { return leafWithAIA(t) },
			want:  ReasonChain,
		},
		{
			name: "expired-leaf-never-fetches",
			token: func(t *testing.T) string {
				leaf, key := mintLeaf(t, &x509.Certificate{
					DNSNames:              []string{"eastus.metadata.azure.com"},
					IssuingCertificateURL: []string{imdssign.DefaultAIAURL},
					NotBefore:             testNow.AddDate(-1, 0, 0),
					NotAfter:              testNow.Add(-time.Hour),
				}, fx.ca.Intermediate, fx.ca.IntermediateKey)
				return mustSign(t, content(t, nil), leaf, key)
			},
			want: ReasonChain,
		},
		{
			name:  "redirect-off-host",
			token: genuine,
			handle: func(r *http.Request) (*http.Response, error) {
				resp := response(r, http.StatusFound, strings.NewReader(""), 0)
				resp.Header.Set("Location", evil)
				return resp, nil
			},
			want: ReasonIntermediate,
			urls: []string{imdssign.DefaultAIAURL},
		},
		{
			name:  "endless-body",
			token: genuine,
			handle: func(r *http.Request) (*http.Response, error) {
				return response(r, http.StatusOK, &huge, -1), nil
			},
			want: ReasonIntermediate,
			urls: []string{imdssign.DefaultAIAURL},
		},
		{
			name:  "100MB-content-length",
			token: genuine,
			handle: func(r *http.Request) (*http.Response, error) {
				return response(r, http.StatusOK, io.LimitReader(&endless{}, 100<<20), 100<<20), nil
			},
			want: ReasonIntermediate,
			urls: []string{imdssign.DefaultAIAURL},
		},
		{
			name:   "not-found",
			token:  genuine,
			handle: serve("http://www.microsoft.com/elsewhere", nil),
			want:   ReasonIntermediate,
			urls:   []string{imdssign.DefaultAIAURL},
		},
		{
			name:   "garbage-body",
			token:  genuine,
			handle: serve(imdssign.DefaultAIAURL, []byte("<html>captive portal</html>")),
			want:   ReasonIntermediate,
			urls:   []string{imdssign.DefaultAIAURL},
		},
		{
			name:   "leaf-instead-of-ca",
			token:  genuine,
			handle: serve(imdssign.DefaultAIAURL, fx.ca.Leaf.Raw),
			want:   ReasonIntermediate,
			urls:   []string{imdssign.DefaultAIAURL},
		},
		{
			name:   "wrong-ca",
			token:  genuine,
			handle: serve(imdssign.DefaultAIAURL, fx.other.Root.Raw),
			want:   ReasonChain,
			urls:   []string{imdssign.DefaultAIAURL},
		},
		{
			name:  "transport-error",
			token: genuine,
			handle: func(*http.Request) (*http.Response, error) {
				return nil, errors.New("connection refused")
			},
			want: ReasonIntermediate,
			urls: []string{imdssign.DefaultAIAURL},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			handle := tt.handle
			if handle == nil {
				handle = serve(imdssign.DefaultAIAURL, fx.ca.Intermediate.Raw)
			}
			rt := &stubTransport{handle: handle}
			_, err := mustNew(t, aiaConfig(fx, rt)).Verify(t.Context(), tt.token(t))
			wantReason(t, err, tt.want)
			if got := rt.requested(); !slices.Equal(got, tt.urls) {
				t.Errorf("AIA requests = %q, want %q", got, tt.urls)
			}
		})
	}
	t.Cleanup(func() {
		if n := huge.read.Load(); n > maxAIABytes+1 {
			t.Errorf("read %d bytes of an endless body, want at most %d", n, maxAIABytes+1)
		}
	})
}

func TestAIARedirectOnHost(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	const moved = "https://www.microsoft.com/pkiops/certs/moved.crt"
	rt := &stubTransport{handle: func(r *http.Request) (*http.Response, error) {
		if r.URL.String() == moved {
			return serve(moved, fx.ca.Intermediate.Raw)(r)
		}
		resp := response(r, http.StatusMovedPermanently, strings.NewReader(""), 0)
		resp.Header.Set("Location", moved)
		return resp, nil
	}}
	if _, err := mustNew(t, aiaConfig(fx, rt)).Verify(t.Context(), mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got, want := rt.requested(), []string{imdssign.DefaultAIAURL, moved}; !slices.Equal(got, want) {
		t.Errorf("AIA requests = %q, want %q", got, want)
	}
}

func TestAIAHostWithPort(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	const url = "http://127.0.0.1:8089/intermediate.crt"
	leaf, key := mintLeaf(t, &x509.Certificate{
		DNSNames:              []string{"eastus.metadata.azure.com"},
		IssuingCertificateURL: []string{"http://www.microsoft.com:8089/x.crt", url},
	}, fx.ca.Intermediate, fx.ca.IntermediateKey)
	rt := &stubTransport{handle: serve(url, fx.ca.Intermediate.Raw)}
	cfg := aiaConfig(fx, rt)
	cfg.AIAHosts = []string{"127.0.0.1:8089"}
	if _, err := mustNew(t, cfg).Verify(t.Context(), mustSign(t, content(t, nil), leaf, key)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got, want := rt.requested(), []string{url}; !slices.Equal(got, want) {
		t.Errorf("AIA requests = %q, want %q", got, want)
	}
}

func TestIntermediateCacheBounded(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	in := newIntermediates(nil, nil, nil, false)
	for i := range maxCachedIntermediates + 5 {
		in.add(strings.Repeat("u", i+1), fx.ca.Intermediate)
	}
	if n := len(in.byURL); n != maxCachedIntermediates {
		t.Errorf("cache holds %d intermediates, want %d", n, maxCachedIntermediates)
	}
	if in.cached("u", testNow) != nil {
		t.Error("oldest entry still cached, want it evicted")
	}
	if in.cached(strings.Repeat("u", maxCachedIntermediates+5), testNow) == nil {
		t.Error("newest entry not cached")
	}
	if in.cached(strings.Repeat("u", 10), fx.ca.Intermediate.NotAfter.AddDate(0, 0, 1)) != nil {
		t.Error("expired intermediate returned from cache, want a miss so it is refetched")
	}
}

func TestAIAReplacesExpiredPreloadedIntermediate(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	// The same CA (subject and key) re-issued with a validity that has ended.
	tmpl := *fx.ca.Intermediate
	tmpl.NotBefore, tmpl.NotAfter = testNow.AddDate(-2, 0, 0), testNow.AddDate(-1, 0, 0)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, fx.ca.Root, fx.ca.IntermediateKey.Public(), fx.ca.RootKey)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	rt := &stubTransport{handle: serve(imdssign.DefaultAIAURL, fx.ca.Intermediate.Raw)}
	cfg := aiaConfig(fx, rt)
	cfg.Intermediates = []*x509.Certificate{expired}
	tok := mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey)
	if _, err := mustNew(t, cfg).Verify(t.Context(), tok); err != nil {
		t.Fatalf("Verify: %v, want success through the fetched intermediate", err)
	}
	if n := len(rt.requested()); n != 1 {
		t.Errorf("%d AIA requests, want 1", n)
	}

	cfg.DisableAIA = true
	_, err = mustNew(t, cfg).Verify(t.Context(), tok)
	wantReason(t, err, ReasonChain)
}
