package pkgmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

const (
	// maxOutputTail is how much of a command's output a CmdError keeps:
	// enough for apt's or dnf's final error lines.
	maxOutputTail = 4 << 10
	// waitDelay bounds how long Run waits, after the command exits or is
	// killed, for descendants that still hold its output pipe.
	waitDelay = 5 * time.Second
)

// Runner runs one external command to completion. It returns a *CmdError
// when the command cannot start or does not exit 0.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) error
}

// CmdError is a failed external command.
type CmdError struct {
	// Args is the full argv, the command name first.
	Args []string
	// Output is the tail of the combined stdout and stderr, at most 4 KiB.
	Output []byte
	// Err is why the command failed; it wraps an *exec.ExitError when the
	// command ran and a context error when ctx ended it.
	Err error
}

func (e *CmdError) Error() string {
	return fmt.Sprintf("run %s: %v", strings.Join(e.Args, " "), e.Err)
}

func (e *CmdError) Unwrap() error { return e.Err }

// ExitCode returns the command's exit status, or -1 if it did not start or
// was killed by a signal (as on timeout).
func (e *CmdError) ExitCode() int {
	var xe *exec.ExitError
	if errors.As(e.Err, &xe) {
		return xe.ExitCode()
	}
	return -1
}

// ExecRunner runs commands as child processes, each in its own process
// group, and kills the whole group with SIGKILL when ctx is done, so that
// helpers a package manager spawns do not outlive it. The zero ExecRunner
// is ready to use and safe for concurrent use.
type ExecRunner struct {
	// Output receives the commands' combined stdout and stderr as they run.
	// Nil: discarded. The tail is kept in a CmdError either way.
	Output io.Writer
}

// Run runs name with args, stdin from /dev/null and the process's
// environment.
func (r ExecRunner) Run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	cmd.WaitDelay = waitDelay
	tail := &tailBuffer{max: maxOutputTail}
	var out io.Writer = tail
	if r.Output != nil {
		out = io.MultiWriter(tail, r.Output)
	}
	// One writer for both streams: exec then shares a single pipe, which
	// keeps their interleaving.
	cmd.Stdout, cmd.Stderr = out, out

	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		// The command itself exited 0; only a descendant kept the pipe.
		err = nil
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return &CmdError{Args: append([]string{name}, args...), Output: tail.bytes(), Err: err}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}

func (t *tailBuffer) bytes() []byte { return t.b }
