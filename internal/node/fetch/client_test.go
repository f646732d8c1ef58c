package fetch

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestDownloadRedirects(t *testing.T) {
	t.Parallel()
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		w.Write(artifact)
	}))
	t.Cleanup(plain.Close)
	// other is a second https host serving the real artifact; it shares
	// httptest's certificate, so the client trusts it.
	other := httptest.NewTLSServer(serveBytes(artifact))
	t.Cleanup(other.Close)

	tests := []struct {
		name   string
		target func(srv *httptest.Server) string
		reason Reason // "" means success
	}{
		{name: "same-host", target: func(srv *httptest.Server) string { return srv.URL + "/real" }},
		// Any https host is fine: the bytes are checked against the
		// signed digest, and CDNs redirect across hosts.
		{name: "other-https-host", target: func(*httptest.Server) string { return other.URL + "/anc" }},
		{name: "to-http", target: func(*httptest.Server) string { return plain.URL + "/anc" }, reason: ReasonRedirect},
		{name: "userinfo", target: func(srv *httptest.Server) string {
			return strings.Replace(srv.URL, "https://", "https://user:pw@", 1) + "/real"
		}, reason: ReasonRedirect},
		{name: "loop", target: func(srv *httptest.Server) string { return srv.URL + "/anc" }, reason: ReasonRedirect},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var srv *httptest.Server
			srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/real" {
					serveBytes(artifact)(w, r)
					return
				}
				http.Redirect(w, r, tt.target(srv), http.StatusFound)
			}), Config{})
			s := stage(t)
			err := c.Download(t.Context(), srv.URL+"/anc", wantFor(artifact), s.f)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Download = %v, want nil", err)
				}
				return
			}
			checkReason(t, err, tt.reason)
			s.assertUntouched(t)
		})
	}
	if n := plainHits.Load(); n != 0 {
		t.Errorf("plain http server got %d requests, want 0", n)
	}
}

func TestDownloadURLPolicy(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}), Config{})
	host := strings.TrimPrefix(srv.URL, "https://")
	for _, u := range []string{
		"http://" + host + "/anc",
		"ftp://" + host + "/anc",
		"https://user:pw@" + host + "/anc",
		"https:///anc",
		"//" + host + "/anc",
		"https://" + host + "/%zz",
		"",
	} {
		err := c.Download(t.Context(), u, wantFor(artifact), io.Discard)
		var ve *VerifyError
		if !errors.As(err, &ve) || ve.Reason != ReasonURL {
			t.Errorf("Download(%q) = %v, want VerifyError %q", u, err, ReasonURL)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server got %d requests, want 0", n)
	}
}

func TestDownloadUntrustedServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(serveBytes(artifact))
	t.Cleanup(srv.Close)
	c, err := New(Config{}) // system roots only
	if err != nil {
		t.Fatal(err)
	}
	err = c.Download(t.Context(), srv.URL, wantFor(artifact), io.Discard)
	if !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("Download = %v, want *tls.CertificateVerificationError", err)
	}
}

func TestDownloadErrorsOmitQuery(t *testing.T) {
	t.Parallel()
	srv, c := newTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/anc" {
			http.Redirect(w, r, "http://example.invalid/x?sig=secret2", http.StatusFound)
			return
		}
		http.NotFound(w, r)
	}), Config{})
	for _, u := range []string{
		srv.URL + "/missing?sig=secret1",
		srv.URL + "/anc?sig=secret1",
		"http://example.invalid/anc?sig=secret1",
		"https://example.invalid/%zz?sig=secret1",
	} {
		err := c.Download(t.Context(), u, wantFor(artifact), io.Discard)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("Download(%q) = %v, want an error without the query", u, err)
		}
	}
}

func TestDownloadIgnoresProxyEnvironment(t *testing.T) {
	var proxyHits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxyHits.Add(1)
		http.Error(w, "proxy", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	srv, c := newTLSServer(t, serveBytes(artifact), Config{})
	if err := c.Download(t.Context(), srv.URL, wantFor(artifact), io.Discard); err != nil {
		t.Errorf("Download = %v, want nil", err)
	}
	if n := proxyHits.Load(); n != 0 {
		t.Errorf("proxy got %d requests, want 0", n)
	}
}

func TestNewExtraRoots(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	tests := []struct {
		name    string
		pem     []byte
		wantErr bool
	}{
		{name: "cert", pem: cert},
		{name: "key-then-cert", pem: append([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), cert...)},
		{name: "empty", pem: []byte{}, wantErr: true},
		{name: "garbage", pem: []byte("not pem"), wantErr: true},
		{name: "bad-der", pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x03, 1, 2, 3}}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(Config{ExtraRootsPEM: tt.pem})
			if (err != nil) != tt.wantErr {
				t.Errorf("New(%s) error = %v, wantErr %v", tt.name, err, tt.wantErr)
			}
		})
	}
}
