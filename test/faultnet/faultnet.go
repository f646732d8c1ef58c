// Package faultnet builds network faults on loopback for tests.
package faultnet

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Blackhole returns a loopback address where TCP connects hang, as they do
// for a missing route or a dropping firewall: the listener's accept queue
// (backlog 0) is filled and never drained, so further SYNs are dropped. The
// test is skipped on a kernel that completes connects beyond the queue.
func Blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
		c.Close()
		t.Skip("this kernel completes connects beyond the accept queue; cannot build a blackhole")
	}
	return addr
}
