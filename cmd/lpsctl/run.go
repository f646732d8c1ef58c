package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
)

// Exit codes; doc.go is the table and exitCode the mapping.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitRefused  = 3
	exitAuth     = 4
	exitNotFound = 5
	exitConflict = 6
)

const (
	programName    = "lpsctl"
	maxCommandName = 16 // widest command name, for aligned usage
)

type command struct {
	name    string // one or two words
	summary string
	run     func(ctx context.Context, args []string, e *env) error
}

func commands() []command {
	return []command{
		{"keys generate", "create a release signing key pair (offline)", runKeysGenerate},
		{"release sign", "sign a release envelope from local artifacts (offline)", runReleaseSign},
		{"release publish", "publish a signed release as a draft rollout", runReleasePublish},
		{"rollout set", "grow a rollout's percentage and set its scope", runRolloutSet},
		{"rollout plan", "put a release on a plan: steps lpsd advances while healthy and halts on a regression", runRolloutPlan},
		{"rollout pause", "stop growing a rollout; keep serving its nodes", transitionCmd("pause")},
		{"rollout resume", "set a paused or halted rollout rolling again", transitionCmd("resume")},
		{"rollout halt", "stop serving a release", transitionCmd("halt")},
		{"rollout complete", "serve a release to every node in scope", transitionCmd("complete")},
		{"revoke", "revoke a release: never served again, staged copies removed", runRevoke},
		{"status", "list releases, rollout states and request counts", runStatus},
		{"explain", "say what one node would be served, rule by rule", runExplain},
		{"audit", "list the audit log of changes", runAudit},
		{"customdata", "render a node's custom data (offline)", runCustomData},
		{"version", "print the lpsctl version", runVersion},
	}
}

// env is what every subcommand gets: its output streams.
type env struct {
	stdout, stderr io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		args = []string{"version"}
	}
	c, rest, ok := lookup(args)
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command: %s\n", programName, strings.Join(args[:unknownWords(args)], " "))
		usage(stderr)
		return exitUsage
	}
	err := c.run(ctx, rest, e)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		var ue *usageError
		if !errors.As(err, &ue) || !ue.printed {
			fmt.Fprintf(stderr, "%s %s: %v\n", programName, c.name, err)
		}
		if ue != nil && !ue.printed {
			fmt.Fprintf(stderr, "Run '%s %s -h' for usage.\n", programName, c.name)
		}
	}
	return exitCode(err)
}

// lookup finds the command args name: two words first, then one.
func lookup(args []string) (command, []string, bool) {
	for _, n := range []int{2, 1} {
		if len(args) < n {
			continue
		}
		name := strings.Join(args[:n], " ")
		for _, c := range commands() {
			if c.name == name {
				return c, args[n:], true
			}
		}
	}
	return command{}, nil, false
}

// unknownWords returns how many words of args name an unknown command: two
// when the first is a command group (keys, release, rollout).
func unknownWords(args []string) int {
	for _, c := range commands() {
		if group, _, ok := strings.Cut(c.name, " "); ok && group == args[0] && len(args) > 1 {
			return 2
		}
	}
	return 1
}

// exitCode maps an error to the exit code table in doc.go.
func exitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	var re *rpcError
	if errors.As(err, &re) {
		switch re.code {
		case codes.FailedPrecondition, codes.Aborted:
			return exitRefused
		case codes.AlreadyExists:
			return exitConflict
		case codes.Unauthenticated, codes.PermissionDenied:
			return exitAuth
		case codes.NotFound:
			return exitNotFound
		}
	}
	return exitError
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", programName)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s %s\n", maxCommandName+2, c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", programName)
}

func runVersion(_ context.Context, args []string, e *env) error {
	if len(args) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	fmt.Fprintln(e.stdout, version)
	return nil
}

// usageError is a bad command line; printed means the flag package has
// already reported it.
type usageError struct {
	err     error
	printed bool
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// newFlagSet returns a flag set for command name whose usage line shows
// synopsis (the arguments after the command name).
func newFlagSet(name, synopsis string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(programName+" "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s %s %s\n\nflags:\n", programName, name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, flags and positional arguments in any order, and
// requires exactly the named positional arguments.
func parse(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err: err, printed: true}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != len(names) {
		if len(names) == 0 {
			return nil, usagef("unexpected arguments: %s", strings.Join(pos, " "))
		}
		return nil, usagef("want arguments %s, got %d", strings.Join(names, " "), len(pos))
	}
	return pos, nil
}

// required returns a usage error naming the first empty flag.
func required(flags ...[2]string) error {
	for _, f := range flags {
		if f[1] == "" {
			return usagef("--%s is required", f[0])
		}
	}
	return nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// listFlag is a comma-separated list that remembers whether it was set,
// so an explicit empty value can mean "all".
type listFlag struct {
	set  bool
	vals []string
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(s string) error {
	l.set = true
	l.vals = l.vals[:0]
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.vals = append(l.vals, v)
		}
	}
	return nil
}
