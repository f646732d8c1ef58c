package pkgmgr

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestExecRunner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		argv     []string
		wantErr  bool
		wantCode int
		// wantOut is the expected CmdError.Output, if wantErr.
		wantOut string
	}{
		{name: "ok", argv: []string{"sh", "-c", "echo hi"}},
		{name: "exit-code", argv: []string{"sh", "-c", "echo out; echo err >&2; exit 100"}, wantErr: true, wantCode: 100, wantOut: "out\nerr\n"},
		{name: "signal", argv: []string{"sh", "-c", "kill -9 $$"}, wantErr: true, wantCode: -1},
		{name: "not-found", argv: []string{"/nonexistent/apt-get", "update"}, wantErr: true, wantCode: -1},
		{
			name:    "tail-capped",
			argv:    []string{"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done; echo END; exit 1"},
			wantErr: true, wantCode: 1,
			wantOut: strings.Repeat("0123456789\n", 2000)[2000*11+4-maxOutputTail:] + "END\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ExecRunner{}.Run(t.Context(), tt.argv[0], tt.argv[1:]...)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Run(%q) = %v, want nil", tt.argv, err)
				}
				return
			}
			var ce *CmdError
			if !errors.As(err, &ce) {
				t.Fatalf("Run(%q) = %v, want a *CmdError", tt.argv, err)
			}
			if got := ce.ExitCode(); got != tt.wantCode {
				t.Errorf("Run(%q) exit code = %d, want %d", tt.argv, got, tt.wantCode)
			}
			if !slicesEqual(ce.Args, tt.argv) {
				t.Errorf("Run(%q) Args = %q", tt.argv, ce.Args)
			}
			if tt.wantOut != "" && string(ce.Output) != tt.wantOut {
				t.Errorf("Run(%q) Output = %d bytes %q…, want %d bytes", tt.argv, len(ce.Output), firstN(ce.Output, 40), len(tt.wantOut))
			}
		})
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func firstN(b []byte, n int) []byte { return b[:min(n, len(b))] }

func TestExecRunnerNotFoundIsErrNotFound(t *testing.T) {
	t.Parallel()
	err := ExecRunner{}.Run(t.Context(), "nodehotfix-no-such-command")
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Run = %v, want exec.ErrNotFound", err)
	}
}

func TestExecRunnerOutput(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := (ExecRunner{Output: &out}).Run(t.Context(), "sh", "-c", "echo a; echo b >&2"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\n" {
		t.Errorf("Output = %q, want %q", got, "a\nb\n")
	}
}

// signalWriter reports the first write on ready.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte("\n")) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestExecRunnerKillsProcessGroup(t *testing.T) {
	t.Parallel()
	w := &signalWriter{ready: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-w.ready
		cancel()
	}()
	// The grandchild sleep holds the output pipe: without the group kill
	// Run would wait for it (or for WaitDelay).
	err := (ExecRunner{Output: w}).Run(ctx, "sh", "-c", "sleep 1000 & echo $!; wait")
	var ce *CmdError
	if !errors.As(err, &ce) || !errors.Is(err, context.Canceled) || ce.ExitCode() != -1 {
		t.Fatalf("Run = %v, want a *CmdError wrapping context.Canceled with exit code -1", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(w.String()))
	if err != nil {
		t.Fatalf("grandchild pid %q: %v", w.String(), err)
	}
	waitFor(t, func() bool { return !alive(pid) })
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline that only matters if the behaviour is broken.
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
