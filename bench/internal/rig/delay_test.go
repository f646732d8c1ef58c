package rig

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// proxied returns a connection to a server running serve on each
// connection it accepts, through a DelayProxy of oneWay.
func proxied(t *testing.T, oneWay time.Duration, serve func(net.Conn)) *net.TCPConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	addr, err := DelayProxy(t.Context(), "127.0.0.1:0", ln.Addr().String(), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// TestDelayProxy: bytes arrive intact and in order, a round trip takes at
// least the round trip the proxy adds, and a half-close reaches the far
// side.
func TestDelayProxy(t *testing.T) {
	t.Parallel()
	const oneWay = 20 * time.Millisecond
	c := proxied(t, oneWay, func(c net.Conn) { io.Copy(c, c) }) // echo until the client half-closes
	msg := bytes.Repeat([]byte("0123456789"), 10_000)
	start := time.Now()
	go func() {
		c.Write(msg)
		c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < 2*oneWay {
		t.Errorf("echo came back after %s, under the %s round trip", elapsed, 2*oneWay)
	}
	if !bytes.Equal(got, msg) {
		t.Errorf("echoed %d bytes, not the %d sent", len(got), len(msg))
	}
}

// TestDelayProxyDelaysTheEnd: a half-close reaches the far side no sooner
// than data would.
func TestDelayProxyDelaysTheEnd(t *testing.T) {
	t.Parallel()
	const oneWay = 50 * time.Millisecond
	eof := make(chan time.Time, 1)
	c := proxied(t, oneWay, func(c net.Conn) {
		io.Copy(io.Discard, c)
		eof <- time.Now()
	})
	sent := time.Now()
	c.CloseWrite()
	select {
	case at := <-eof:
		if d := at.Sub(sent); d < oneWay {
			t.Errorf("half-close reached the server after %v, under the %v one way", d, oneWay)
		}
	case <-t.Context().Done():
		t.Fatal("half-close never reached the server")
	}
}
