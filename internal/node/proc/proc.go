// Package proc runs the agent's child processes in their own process groups,
// with bounded output.
package proc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// defaultTailSize is enough for a package manager's or a script's final
	// error lines.
	defaultTailSize = 4 << 10
	// defaultWaitDelay bounds how long Run waits, after the command exits or
	// is killed, for descendants that still hold its output pipes.
	defaultWaitDelay = 5 * time.Second
	// busyWindow bounds retries of a start that fails with ETXTBSY: the fork
	// holding the descriptor execs or exits within microseconds.
	busyWindow = 2 * time.Second
	// busyPause is the wait between those tries. It has no jitter: the
	// contention is inside this process, not with a fleet.
	busyPause = 50 * time.Millisecond
)

// Cmd is one child process. The zero value of every field but Args works.
type Cmd struct {
	// Args is the argv; Args[0] is the program, looked up in PATH when it
	// has no slash.
	Args []string
	// Env is added to the agent's own environment; later entries win.
	Env []string
	// Stdout and Stderr receive the child's output as it runs; nil
	// discards. When both are the same writer the child gets one pipe for
	// both, which keeps their interleaving.
	Stdout, Stderr io.Writer
	// TailSize is how many bytes of the combined output Result.Tail and
	// CmdError.Output keep. Zero: 4 KiB.
	TailSize int
	// Linger lets descendants outlive the command, as services the node
	// bootstrap starts must; they are killed only if ctx ends while Run
	// runs. Without Linger the whole process group is killed with SIGKILL
	// as soon as the command exits, so a descendant holding the output pipe
	// neither delays Run nor survives it.
	Linger bool
	// Passthrough gives Stdout and Stderr to the child as they are: an
	// *os.File is inherited, with no pipe through this process, and no tail
	// is kept. For a child whose descendants must keep writing if this
	// process dies (a hotfix agent's bootstrap would otherwise die of
	// SIGPIPE with it).
	Passthrough bool
	// WaitDelay is how long Run waits for the output pipes to close after
	// the command exits or is killed; then it closes them itself. Zero: 5 s.
	WaitDelay time.Duration
}

// Result is a finished command.
type Result struct {
	// ExitCode is the command's exit status; -1 when it was killed by a
	// signal or did not start.
	ExitCode int
	// Tail is the last Cmd.TailSize bytes of the combined stdout and stderr.
	Tail []byte
}

// Run runs c to completion with stdin from /dev/null, in a new process
// group that is killed with SIGKILL when ctx ends. A start that fails with
// ETXTBSY (golang/go#22315: a concurrent fork inherited a just-written
// executable's write descriptor) is retried for up to 2 s. The error is a
// *CmdError when the command cannot start, exits non-zero or is killed; it
// wraps ctx's error when ctx ended. The Result is valid either way. Run is
// safe for concurrent use.
func Run(ctx context.Context, c Cmd) (Result, error) {
	res := Result{ExitCode: -1}
	if len(c.Args) == 0 {
		return res, &CmdError{Err: errors.New("empty argv")}
	}
	tail := &tailBuffer{max: cmp.Or(c.TailSize, defaultTailSize)}
	stdout, stderr := tee(tail, c.Stdout), tee(tail, c.Stderr)
	switch {
	case c.Passthrough:
		stdout, stderr = c.Stdout, c.Stderr
	case sameWriter(c.Stdout, c.Stderr):
		stderr = stdout
	}

	var cmd *exec.Cmd
	err := startRetrying(ctx, func() error {
		cmd = command(ctx, c, stdout, stderr)
		return cmd.Start()
	})
	if err == nil {
		if !c.Linger {
			killGroupOnExit(cmd.Process.Pid)
		}
		err = cmd.Wait()
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	res.Tail = tail.bytes()
	if errors.Is(err, exec.ErrWaitDelay) && res.ExitCode == 0 {
		// The command itself succeeded; only a descendant kept the pipe.
		err = nil
	}
	if err == nil {
		return res, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	return res, &CmdError{Args: slices.Clone(c.Args), Output: res.Tail, Err: err}
}

// Output runs args like Run and returns its stdout without surrounding
// whitespace; stderr is discarded. It is for short answers such as
// `<binary> version`: more than limit bytes of stdout kill the command and
// are an error. A failed command is a *CmdError.
func Output(ctx context.Context, limit int, args ...string) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &capped{max: limit, exceeded: cancel}
	_, err := Run(ctx, Cmd{Args: args, Stdout: out})
	// Run has waited for the copying goroutine, so out is no longer written.
	if out.over {
		return "", fmt.Errorf("run %s: stdout exceeds %d bytes", strings.Join(args, " "), limit)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out.buf)), nil
}

// CmdError is a failed command.
type CmdError struct {
	// Args is the full argv, the program first.
	Args []string
	// Output is the tail of the combined stdout and stderr.
	Output []byte
	// Err is why the command failed. It wraps an *exec.ExitError when the
	// command ran, the start error when it did not, and ctx's error when
	// ctx ended it.
	Err error
}

func (e *CmdError) Error() string {
	return fmt.Sprintf("run %s: %v", strings.Join(e.Args, " "), e.Err)
}

func (e *CmdError) Unwrap() error { return e.Err }

// ExitCode returns the command's exit status, or -1 if it did not start or
// was killed by a signal (as when ctx ended).
func (e *CmdError) ExitCode() int {
	var xe *exec.ExitError
	if errors.As(e.Err, &xe) {
		return xe.ExitCode()
	}
	return -1
}

// Signal returns the signal that killed the command, if one did.
func (e *CmdError) Signal() (syscall.Signal, bool) {
	var xe *exec.ExitError
	if !errors.As(e.Err, &xe) {
		return 0, false
	}
	ws, ok := xe.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// command builds one start attempt: an exec.Cmd cannot be started twice.
func command(ctx context.Context, c Cmd, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = cmp.Or(c.WaitDelay, defaultWaitDelay)
	return cmd
}

// startRetrying calls start until it fails with something other than
// ETXTBSY, busyWindow has passed, or ctx is done.
func startRetrying(ctx context.Context, start func() error) error {
	deadline := time.Now().Add(busyWindow)
	for {
		err := start()
		if !errors.Is(err, syscall.ETXTBSY) || !time.Now().Before(deadline) {
			return err
		}
		t := time.NewTimer(busyPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// killGroup kills the process group led by pid.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// killGroupOnExit waits for the child pid to exit and kills its process
// group before the child is reaped: until then its pid, which is the group
// id, cannot be reused, so the kill cannot reach an unrelated group.
func killGroupOnExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			// Not our child to wait for; without the guarantee above a
			// kill could hit a stranger.
			return
		}
	}
	// ESRCH means nothing of the group is left, which is the goal.
	_ = killGroup(pid)
}

// tee sends writes to the tail and to w, if any.
func tee(t *tailBuffer, w io.Writer) io.Writer {
	if w == nil {
		return t
	}
	return io.MultiWriter(t, w)
}

// sameWriter reports whether a and b are the same writer; writers of a
// non-comparable type are never the same.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// tailBuffer keeps the last max bytes written to it. It is safe for
// concurrent use, as the stdout and stderr pipes write from two goroutines.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// bytes returns a copy of what the buffer holds.
func (t *tailBuffer) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.buf)
}

// capped keeps the first max bytes written to it and calls exceeded once
// when a write goes past them. It is for one writer goroutine.
type capped struct {
	max      int
	buf      []byte
	over     bool
	exceeded func()
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - len(c.buf)
	if len(p) > room {
		c.buf = append(c.buf, p[:max(room, 0)]...)
		if !c.over {
			c.over = true
			c.exceeded()
		}
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}
