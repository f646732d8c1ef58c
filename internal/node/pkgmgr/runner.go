package pkgmgr

import (
	"context"
	"io"

	"nodehotfix/internal/node/proc"
)

// Runner runs one external command to completion. It returns a
// *proc.CmdError when the command cannot start or does not exit 0.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) error
	// List runs the command like Run and returns its stdout, at most
	// MaxListing bytes (more is an error).
	List(ctx context.Context, name string, args ...string) ([]byte, error)
}

// MaxListing caps a package manager's version listing: a repository keeps a
// few hundred versions of the agent at most, a line each.
const MaxListing = 256 << 10

// ExecRunner runs commands as child processes with proc.Run: each in its
// own process group, killed with SIGKILL when it exits or ctx is done, so
// that helpers a package manager spawns do not outlive it. A failed command
// keeps the last 4 KiB of its output, enough for apt's or dnf's final error
// lines. The zero ExecRunner is ready to use and safe for concurrent use.
type ExecRunner struct {
	// Output receives the commands' combined stdout and stderr as they run.
	// Nil: discarded. The tail is kept in a *proc.CmdError either way.
	Output io.Writer
}

// Run runs name with args, stdin from /dev/null and the process's
// environment.
func (r ExecRunner) Run(ctx context.Context, name string, args ...string) error {
	// One writer for both streams keeps their interleaving.
	_, err := proc.Run(ctx, proc.Cmd{Args: append([]string{name}, args...), Stdout: r.Output, Stderr: r.Output})
	return err
}

// List runs name with args and returns its stdout (stderr discarded).
func (r ExecRunner) List(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := proc.Output(ctx, MaxListing, append([]string{name}, args...)...)
	return []byte(out), err
}
