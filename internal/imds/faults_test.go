package imds

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"nodehotfix/test/faultnet"
)

// TestAttestedSignatureBlackholeIsBounded calls a metadata service whose
// connects hang, with no deadline from the caller: the client's own dial
// timeout per attempt bounds the call to about two seconds.
func TestAttestedSignatureBlackholeIsBounded(t *testing.T) {
	t.Parallel()
	addr := faultnet.Blackhole(t)
	start := time.Now()
	_, err := NewClient("http://" + addr).AttestedSignature(t.Context())
	took := time.Since(start)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("AttestedSignature against a blackhole: %v, want a timeout", err)
	}
	if limit := attempts*dialTimeout + retryDelay*2 + time.Second; took > limit {
		t.Errorf("AttestedSignature took %v, want at most %v", took, limit)
	}
}

// TestAttestedSignature410IsRetriedOnce checks the documented transient
// status 410 (IMDS not ready yet) gets exactly one more attempt.
func TestAttestedSignature410IsRetriedOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusGone)
	}))
	t.Cleanup(srv.Close)
	_, err := NewClient(srv.URL).AttestedSignature(t.Context())
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusGone {
		t.Errorf("AttestedSignature = %v, want status 410", err)
	}
	if n := calls.Load(); n != attempts {
		t.Errorf("server saw %d requests, want %d", n, attempts)
	}
}

// TestAttestedSignatureIgnoresProxyOffLoopback serves the metadata stand-in
// on a non-loopback address, which proxy environment rules would send to
// HTTP_PROXY, and checks the proxy still sees nothing.
func TestAttestedSignatureIgnoresProxyOffLoopback(t *testing.T) {
	var proxyHits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxyHits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	ip := nonLoopbackIPv4(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("listen on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"signature":"TOKEN"}`))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	got, err := NewClient(srv.URL).AttestedSignature(t.Context())
	if err != nil || got != "TOKEN" {
		t.Errorf("AttestedSignature = %q, %v; want TOKEN", got, err)
	}
	if n := proxyHits.Load(); n != 0 {
		t.Errorf("proxy saw %d requests, want 0", n)
	}
}

// nonLoopbackIPv4 returns an address of this host that proxy rules do not
// exempt, or skips the test.
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("list interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address to test proxy bypass with")
	return ""
}
