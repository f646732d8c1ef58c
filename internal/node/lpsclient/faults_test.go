package lpsclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/test/faultnet"
)

const secretToken = "attested-doc-token-must-not-leak"

// recorder accepts connections on a loopback port and keeps every byte
// clients send. It answers a client's first bytes with reply (nil: says
// nothing), so what the client sent is recorded before the reply can make it
// give up, and it holds each connection open until the test ends.
type recorder struct {
	ln   net.Listener
	mu   sync.Mutex
	got  bytes.Buffer
	done chan struct{}
}

func newRecorder(t *testing.T, reply []byte) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, done: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(r.done)
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				go func() { <-r.done; c.Close() }()
				buf := make([]byte, 4096)
				for first := true; ; first = false {
					n, err := c.Read(buf)
					r.mu.Lock()
					r.got.Write(buf[:n])
					r.mu.Unlock()
					if err != nil {
						return
					}
					if first && reply != nil {
						c.Write(reply)
					}
				}
			})
		}
	})
	return r
}

func (r *recorder) received() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got.Bytes())
}

// TestFetchNeverSendsTokenInPlaintext points the client at an endpoint that
// speaks plaintext HTTP/2 (h2c) instead of TLS: the handshake fails and the
// attested document never crosses the wire, because the client has no
// insecure mode and its credentials require transport security.
func TestFetchNeverSendsTokenInPlaintext(t *testing.T) {
	t.Parallel()
	// An h2c server's first bytes: its SETTINGS frame.
	rec := newRecorder(t, []byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := Fetch(ctx, Target{Host: apiHost, Addr: rec.ln.Addr().String(), Roots: lpstest.NewCA(t).Pool()}, secretToken)
	if err == nil {
		t.Fatal("Fetch against a plaintext endpoint succeeded")
	}
	got := rec.received()
	if bytes.Contains(got, []byte(secretToken)) {
		t.Error("the token was sent in the clear")
	}
	if len(got) == 0 || got[0] != 0x16 {
		t.Errorf("client's first bytes %x, want a TLS handshake record (0x16)", got[:min(len(got), 8)])
	}
}

// TestFetchTLSHandshakeStallBoundedByContext runs against a server that
// accepts TCP and never answers the ClientHello.
func TestFetchTLSHandshakeStallBoundedByContext(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Fetch(ctx, Target{Host: apiHost, Addr: rec.ln.Addr().String(), Roots: lpstest.NewCA(t).Pool()}, secretToken)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Fetch took %v against a stalled handshake with a 300ms deadline", took)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Class != ClassUnreachable {
		t.Errorf("Fetch against a stalled handshake: %v, want an unreachable error", err)
	}
	if bytes.Contains(rec.received(), []byte(secretToken)) {
		t.Error("the token was sent before the handshake completed")
	}
}

// TestFetchRefusesTLSBelow12 offers only TLS 1.0 and 1.1 from a server with
// a valid certificate: the client refuses the handshake and sends nothing.
func TestFetchRefusesTLSBelow12(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	cert := ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS10,
		MaxVersion:   tls.VersionTLS11,
		NextProtos:   []string{"h2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var handshakes, appBytes atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				handshakes.Add(1)
				n, _ := io.Copy(io.Discard, c)
				appBytes.Add(int32(n))
			})
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = Fetch(ctx, Target{Host: apiHost, Addr: ln.Addr().String(), Roots: ca.Pool()}, secretToken)
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("Fetch against a TLS 1.1 server: %v, want a protocol version failure", err)
	}
	ln.Close()
	wg.Wait()
	if handshakes.Load() != 0 || appBytes.Load() != 0 {
		t.Errorf("%d handshakes completed, %d application bytes sent, want none", handshakes.Load(), appBytes.Load())
	}
}

// TestFetchRefusesLocalDestinations resolves the service name (no operator
// address override) to loopback, link-local (the metadata service),
// unspecified and multicast addresses, and to nothing at all: each fails
// before a connection is made.
func TestFetchRefusesLocalDestinations(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	for _, host := range []string{"localhost", "127.0.0.1", "169.254.169.254", "::1", "fe80::1", "0.0.0.0", "224.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			_, err := Fetch(t.Context(), Target{Host: host, Roots: ca.Pool()}, secretToken)
			if err == nil || !strings.Contains(err.Error(), "local or link-local") {
				t.Errorf("Fetch to %s: %v, want refusal", host, err)
			}
		})
	}
	t.Run("nxdomain", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := Fetch(ctx, Target{Host: "no-such-host.invalid", Roots: ca.Pool()}, secretToken)
		var fe *Error
		if !errors.As(err, &fe) || fe.Class != ClassUnreachable {
			t.Errorf("Fetch to an unresolvable name: %v, want an unreachable error", err)
		}
	})
}

// nonLoopbackIPv4 returns an address of this host that proxy environment
// rules do not exempt (they never proxy loopback), or skips the test.
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

// TestFetchIgnoresProxyEnvironment plants HTTPS_PROXY and friends, as a
// tampered provisioning environment could: the connection still goes
// straight to the service and the proxy sees nothing.
func TestFetchIgnoresProxyEnvironment(t *testing.T) {
	proxy := newRecorder(t, nil)
	ip := nonLoopbackIPv4(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("listen on %s: %v", ip, err)
	}
	var direct atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			direct.Add(1)
			c.Close()
		}
	})
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "GRPC_PROXY_EXP"} {
		t.Setenv(k, "http://"+proxy.ln.Addr().String())
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := Fetch(ctx, Target{Host: apiHost, Addr: ln.Addr().String(), Roots: lpstest.NewCA(t).Pool()}, secretToken); err == nil {
		t.Fatal("Fetch against a closing listener succeeded")
	}
	if got := proxy.received(); len(got) != 0 {
		t.Errorf("the proxy received %q", got)
	}
	if direct.Load() == 0 {
		t.Error("the service address was never dialled directly")
	}
}

// TestFetchConnectBlackholeBoundedByContext dials a service whose connects
// hang: the caller's deadline ends the call, as an unreachable service.
func TestFetchConnectBlackholeBoundedByContext(t *testing.T) {
	t.Parallel()
	addr := faultnet.Blackhole(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Fetch(ctx, Target{Host: apiHost, Addr: addr, Roots: lpstest.NewCA(t).Pool()}, secretToken)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Fetch took %v against a blackhole with a 300ms deadline", took)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Class != ClassUnreachable {
		t.Errorf("Fetch against a blackhole: %v, want an unreachable error", err)
	}
}
