package main

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenResult: the result fd is taken close-on-exec, so no program the
// steps start inherits the helper's pipe; a closed fd is refused before any
// step runs.
func TestOpenResult(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A second descriptor without close-on-exec, as bash hands fd 3 over.
	fd, err := unix.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("dup kept close-on-exec; the test needs an inheritable fd")
	}
	f, err := openResult(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("result fd flags = %#x, %v; want close-on-exec", flags, err)
	}
	if _, err := openResult(fd + 1000); err == nil {
		t.Error("openResult of a closed fd = nil, want an error")
	}
	if f, err := openResult(0); f != nil || err != nil {
		t.Errorf("openResult(0) = %v, %v; want no result file", f, err)
	}
}
