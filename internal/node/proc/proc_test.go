package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRunExit(t *testing.T) {
	t.Parallel()
	type outcome struct {
		ResultCode int    // Result.ExitCode
		IsCmdError bool   // the error is a *CmdError
		ErrCode    int    // CmdError.ExitCode
		Signal     string // CmdError.Signal, "" if none
		NotFound   bool   // the error wraps exec.ErrNotFound
		Output     string // CmdError.Output
	}
	tests := []struct {
		name string
		args []string
		want outcome
	}{
		{name: "ok", args: []string{"sh", "-c", "echo hi"}, want: outcome{}},
		{
			name: "exit-code",
			args: []string{"sh", "-c", "echo out; echo err >&2; exit 100"},
			want: outcome{ResultCode: 100, IsCmdError: true, ErrCode: 100, Output: "out\nerr\n"},
		},
		{
			name: "self-killed",
			args: []string{"sh", "-c", "kill -KILL $$"},
			want: outcome{ResultCode: -1, IsCmdError: true, ErrCode: -1, Signal: syscall.SIGKILL.String()},
		},
		{
			name: "not-found",
			args: []string{"nodehotfix-no-such-program", "x"},
			want: outcome{ResultCode: -1, IsCmdError: true, ErrCode: -1, NotFound: true},
		},
		{
			name: "no-such-path",
			args: []string{"/nonexistent/apt-get", "update"},
			want: outcome{ResultCode: -1, IsCmdError: true, ErrCode: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := Run(t.Context(), Cmd{Args: tt.args})
			got := outcome{ResultCode: res.ExitCode, NotFound: errors.Is(err, exec.ErrNotFound)}
			var ce *CmdError
			if errors.As(err, &ce) {
				got.IsCmdError, got.ErrCode, got.Output = true, ce.ExitCode(), string(ce.Output)
				if sig, ok := ce.Signal(); ok {
					got.Signal = sig.String()
				}
				if diff := cmp.Diff(tt.args, ce.Args); diff != "" {
					t.Errorf("CmdError.Args (-want +got):\n%s", diff)
				}
			} else if err != nil {
				t.Fatalf("Run(%q) = %v, want nil or a *CmdError", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Run(%q) outcome (-want +got):\n%s\nerr: %v", tt.args, diff, err)
			}
		})
	}
}

func TestRunStreams(t *testing.T) {
	t.Parallel()
	const script = "echo a; echo b >&2; echo c; echo \"$PROC_TEST\""
	t.Run("separate", func(t *testing.T) {
		t.Parallel()
		var out, errOut bytes.Buffer
		res, err := Run(t.Context(), Cmd{Args: []string{"sh", "-c", script}, Env: []string{"PROC_TEST=1", "PROC_TEST=2"}, Stdout: &out, Stderr: &errOut})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := out.String(), "a\nc\n2\n"; got != want {
			t.Errorf("stdout = %q, want %q", got, want)
		}
		if got, want := errOut.String(), "b\n"; got != want {
			t.Errorf("stderr = %q, want %q", got, want)
		}
		if got := len(res.Tail); got != len("a\nb\nc\n2\n") {
			t.Errorf("Tail = %q, want all 8 bytes in some order", res.Tail)
		}
	})
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		res, err := Run(t.Context(), Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		// One pipe: the order the child wrote in survives.
		want := "a\nb\nc\n\n"
		if got := out.String(); got != want {
			t.Errorf("output = %q, want %q", got, want)
		}
		if got := string(res.Tail); got != want {
			t.Errorf("Tail = %q, want %q", got, want)
		}
	})
}

func TestRunTail(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	script := "i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done; echo END; exit 1"
	_, err := Run(t.Context(), Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, TailSize: 100})
	var ce *CmdError
	if !errors.As(err, &ce) {
		t.Fatalf("Run = %v, want a *CmdError", err)
	}
	all := strings.Repeat("0123456789\n", 2000) + "END\n"
	if diff := cmp.Diff(all[len(all)-100:], string(ce.Output)); diff != "" {
		t.Errorf("Output (-want +got):\n%s", diff)
	}
	if got, want := out.Len(), len(all); got != want {
		t.Errorf("Stdout got %d bytes, want %d", got, want)
	}
}

// grandchild is a script whose background child, still holding stdout,
// outlives it; it prints that child's pid.
const grandchild = "sleep 600 & echo $!"

func TestRunKillsDescendantsOnExit(t *testing.T) {
	t.Parallel()
	// The grandchild keeps the pipe open for 600 s: Run returns now only
	// because it kills the group, and without the kill the grandchild
	// would still be alive afterwards.
	res, err := Run(t.Context(), Cmd{Args: []string{"sh", "-c", grandchild}})
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	pid := mustPid(t, res.Tail)
	waitFor(t, func() bool { return gone(pid) })
}

func TestRunLingerLeavesDescendants(t *testing.T) {
	t.Parallel()
	// The pid goes through a file: the pipe's unread bytes are dropped when
	// WaitDelay closes it.
	pidFile := filepath.Join(t.TempDir(), "pid")
	res, err := Run(t.Context(), Cmd{Args: []string{"sh", "-c", "sleep 600 & echo $! >" + pidFile}, Linger: true, WaitDelay: time.Millisecond})
	if err != nil {
		// The WaitDelay overrun is the grandchild's doing, not a failure.
		t.Fatalf("Run = %v, want nil", err)
	}
	if res.ExitCode != 0 {
		t.Errorf("ExitCode = %d, want 0", res.ExitCode)
	}
	out, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := mustPid(t, out)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if gone(pid) {
		t.Errorf("grandchild %d is gone, want it left running", pid)
	}
}

func TestRunCancelKillsGroup(t *testing.T) {
	t.Parallel()
	for _, linger := range []bool{false, true} {
		t.Run("linger="+strconv.FormatBool(linger), func(t *testing.T) {
			t.Parallel()
			w := &lineWriter{ready: make(chan struct{})}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() {
				<-w.ready
				cancel()
			}()
			_, err := Run(ctx, Cmd{Args: []string{"sh", "-c", grandchild + "; wait"}, Stdout: w, Linger: linger})
			var ce *CmdError
			if !errors.As(err, &ce) || !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want a *CmdError wrapping context.Canceled", err)
			}
			sig, ok := ce.Signal()
			if got := ce.ExitCode(); got != -1 || !ok || sig != syscall.SIGKILL {
				t.Errorf("ExitCode, Signal = %d, %v %v; want -1, killed", got, sig, ok)
			}
			pid := mustPid(t, []byte(w.String()))
			waitFor(t, func() bool { return gone(pid) })
		})
	}
}

func TestOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string
		want    string
		wantErr string // substring; "" for success
	}{
		{name: "trimmed", script: `printf '  v1.2.3\n\n'`, want: "v1.2.3"},
		{name: "exactly-max", script: `printf 0123456789`, want: "0123456789"},
		{name: "stderr-discarded", script: `echo noise >&2; echo ok`, want: "ok"},
		{name: "over-max", script: `printf 0123456789x`, wantErr: "stdout exceeds 10 bytes"},
		{name: "endless", script: `yes`, wantErr: "stdout exceeds 10 bytes"},
		{name: "fails", script: `echo 1.0; exit 3`, wantErr: "exit status 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Output(t.Context(), 10, "sh", "-c", tt.script)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Output(%q) = %q, %v; want error %q", tt.script, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Output(%q) = %q, %v; want %q", tt.script, got, err, tt.want)
			}
		})
	}
}

func TestStartRetrying(t *testing.T) {
	t.Parallel()
	busy := &os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ETXTBSY}
	other := errors.New("other")
	tests := []struct {
		name      string
		failures  int   // how many starts fail before one succeeds
		fail      error // what they fail with
		cancel    bool  // ctx is cancelled after the first failure
		wantErr   error
		wantCalls int // 0: more than one
	}{
		{name: "free", failures: 0, wantCalls: 1},
		{name: "busy-then-free", failures: 3, fail: busy, wantCalls: 4},
		{name: "always-busy", failures: 1 << 20, fail: busy, wantErr: syscall.ETXTBSY},
		{name: "other-error", failures: 1 << 20, fail: other, wantErr: other, wantCalls: 1},
		{name: "ctx-done", failures: 1 << 20, fail: busy, cancel: true, wantErr: syscall.ETXTBSY, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				calls := 0
				start := time.Now()
				err := startRetrying(ctx, func() error {
					calls++
					if tt.cancel {
						cancel()
					}
					if calls <= tt.failures {
						return tt.fail
					}
					return nil
				})
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Errorf("startRetrying = %v, want %v", err, tt.wantErr)
				}
				if tt.wantCalls > 0 && calls != tt.wantCalls {
					t.Errorf("start called %d times, want %d", calls, tt.wantCalls)
				}
				if tt.wantCalls == 0 && calls < 2 {
					t.Errorf("start called %d times, want retries", calls)
				}
				// The bubble's clock is exact: the window holds however slow the machine.
				if elapsed := time.Since(start); elapsed > busyWindow+busyPause {
					t.Errorf("retried for %v, want at most %v", elapsed, busyWindow+busyPause)
				}
			})
		})
	}
}

func TestRunRetriesBusyExecutable(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "tool")
	// Held open for writing, the file cannot be executed (ETXTBSY), as when a
	// concurrent fork has inherited the writer's descriptor.
	f, err := os.OpenFile(script, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("#!/bin/sh\necho ran\n"); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		type result struct {
			res Result
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := Run(t.Context(), Cmd{Args: []string{script}})
			done <- result{res, err}
		}()
		// Run blocks durably only in the pause between tries, so it has
		// already failed once with the file busy.
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("Run returned %v before the file was released", r.err)
		default:
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || string(r.res.Tail) != "ran\n" {
			t.Errorf("Run = %q, %v; want %q, nil", r.res.Tail, r.err, "ran\n")
		}
	})
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{name: "under", writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "exact", writes: []string{"abcde"}, want: "bcde"},
		{name: "spill", writes: []string{"abc", "de", "f"}, want: "cdef"},
		{name: "big-write", writes: []string{"a", "0123456789"}, want: "6789"},
		{name: "empty", writes: []string{""}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := &tailBuffer{max: 4}
			for _, w := range tt.writes {
				if n, err := tb.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := string(tb.bytes()); got != tt.want {
				t.Errorf("after %q: tail = %q, want %q", tt.writes, got, tt.want)
			}
		})
	}
}

func TestTailBufferConcurrent(t *testing.T) {
	t.Parallel()
	tb := &tailBuffer{max: 64}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 1000 {
				_, _ = tb.Write([]byte("0123456789"))
			}
		})
	}
	wg.Wait()
	if got, want := string(tb.bytes()), strings.Repeat("0123456789", 7)[6:]; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
}

// lineWriter closes ready once a full line has been written.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte("\n")) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func mustPid(t *testing.T, out []byte) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		t.Fatalf("grandchild pid %q: %v", out, err)
	}
	return pid
}

// gone reports whether pid no longer runs: kill(pid, 0) fails with ESRCH,
// or it is a zombie its new parent has not reaped yet.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// waitFor polls cond until it holds: a killed process leaves the process
// table asynchronously. The deadline only matters if the behaviour is broken.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunPassthroughInheritsFiles: with Passthrough an *os.File reaches the
// child as its own descriptor, not a pipe through this process.
func TestRunPassthroughInheritsFiles(t *testing.T) {
	t.Parallel()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := Run(t.Context(), Cmd{Args: []string{"sh", "-c", "readlink /proc/self/fd/1; echo hi"}, Stdout: f, Stderr: f, Passthrough: true})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	data, _ := os.ReadFile(f.Name())
	if got := string(data); !strings.HasPrefix(got, f.Name()+"\n") || !strings.HasSuffix(got, "hi\n") {
		t.Errorf("child's stdout is %q, want the file itself", got)
	}
	if len(res.Tail) != 0 {
		t.Errorf("Tail = %q, want none with Passthrough", res.Tail)
	}
}
