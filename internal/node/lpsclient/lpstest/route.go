package lpstest

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// Route starts a TCP proxy whose nth connection (from 1) goes to the
// address route(n) returns, as a load balancer spreads connections over
// replicas, or is closed at once when it returns "" (a reset). It returns
// the proxy's address and how many connections it took. It closes when
// the test ends.
func Route(t testing.TB, route func(n int) string) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			to := route(int(n.Add(1)))
			if to == "" {
				down.Close()
				continue
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				down.Close()
				continue
			}
			go func() { io.Copy(up, down); up.Close() }()
			go func() { io.Copy(down, up); down.Close() }()
		}
	}()
	return ln.Addr().String(), &n
}
