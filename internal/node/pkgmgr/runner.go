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
}

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
