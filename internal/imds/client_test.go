package imds

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestAttestedSignature(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		handler   func(w http.ResponseWriter, r *http.Request, n int32)
		want      string
		wantErr   string
		wantCalls int32
	}{
		{
			name: "ok",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) {
				w.Write([]byte(`{"encoding":"pkcs7","signature":"TOKEN"}`))
			},
			want: "TOKEN", wantCalls: 1,
		},
		{
			name: "500 then ok",
			handler: func(w http.ResponseWriter, r *http.Request, n int32) {
				if n == 1 {
					w.WriteHeader(500)
					return
				}
				w.Write([]byte(`{"signature":"TOKEN2"}`))
			},
			want: "TOKEN2", wantCalls: 2,
		},
		{
			name:    "500 twice",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) { w.WriteHeader(500) },
			wantErr: "imds returned status 500", wantCalls: 2,
		},
		{
			name:    "429 retried",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) { w.WriteHeader(429) },
			wantErr: "status 429", wantCalls: 2,
		},
		{
			name:    "400 not retried",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) { w.WriteHeader(400) },
			wantErr: "status 400", wantCalls: 1,
		},
		{
			name:    "missing signature",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) { w.Write([]byte(`{"encoding":"pkcs7"}`)) },
			wantErr: "empty signature", wantCalls: 1,
		},
		{
			name:    "not json",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) { w.Write([]byte(`<html>`)) },
			wantErr: "parse imds attested document", wantCalls: 1,
		},
		{
			name: "huge body",
			handler: func(w http.ResponseWriter, r *http.Request, _ int32) {
				w.Write([]byte(`{"signature":"` + strings.Repeat("A", 5<<20) + `"}`))
			},
			wantErr: "exceeds", wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				if r.Header.Get("Metadata") != "true" {
					t.Errorf("Metadata header = %q, want true", r.Header.Get("Metadata"))
				}
				if r.URL.Path != "/metadata/attested/document" || r.URL.Query().Get("api-version") != APIVersion {
					t.Errorf("request URL = %s", r.URL)
				}
				tt.handler(w, r, n)
			}))
			t.Cleanup(srv.Close)
			got, err := NewClient(srv.URL).AttestedSignature(t.Context())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("AttestedSignature error = %v, want containing %q", err, tt.wantErr)
				}
			} else if err != nil || got != tt.want {
				t.Errorf("AttestedSignature = %q, %v; want %q", got, err, tt.want)
			}
			if c := calls.Load(); c != tt.wantCalls {
				t.Errorf("server saw %d requests, want %d", c, tt.wantCalls)
			}
		})
	}
}

func TestAttestedSignatureSlowServerIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := NewClient(srv.URL).AttestedSignature(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AttestedSignature against a hung server: error = %v, want deadline exceeded", err)
	}
}

func TestAttestedSignatureConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := NewClient("http://" + addr).AttestedSignature(t.Context()); err == nil {
		t.Error("AttestedSignature against a closed port: error = nil")
	}
}

// TestAttestedSignatureIgnoresProxy checks that HTTP_PROXY never sees
// metadata traffic: the attested document would leak to the proxy.
func TestAttestedSignatureIgnoresProxy(t *testing.T) {
	var proxyHits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxyHits.Add(1)
		w.WriteHeader(502)
	}))
	t.Cleanup(proxy.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"signature":"TOKEN"}`))
	}))
	t.Cleanup(srv.Close)
	// Loopback is exempt from proxying anyway; a non-loopback alias of the
	// test server is not available here, so assert on the transport itself.
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	c := NewClient(srv.URL)
	if tr := c.http.Transport.(*http.Transport); tr.Proxy != nil {
		t.Fatal("transport has a proxy function; want none")
	}
	if _, err := c.AttestedSignature(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := proxyHits.Load(); n != 0 {
		t.Errorf("proxy saw %d requests, want 0", n)
	}
}
