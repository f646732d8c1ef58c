package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"

	"nodehotfix/internal/quote"
	"nodehotfix/internal/translog/tiles"
	"nodehotfix/internal/typo"
)

// Exit codes; doc.go is the table and exitCode the mapping.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitRefused     = 3
	exitAuth        = 4
	exitNotFound    = 5
	exitConflict    = 6
	exitFork        = 7
	exitFlagged     = 8
	exitInterrupted = 130 // 128 + SIGINT, as a shell reports it
)

const programName = "lpsctl"

// Command groups of the top-level help.
const (
	groupOffline = "offline"
	groupChange  = "change"
	groupInspect = "inspect"
	groupOther   = "other"
)

// annotationChange marks a command that changes the service's state: an
// interrupted one may or may not have been applied.
const annotationChange = "lpsctl/change"

// env is what every subcommand gets: its output streams.
type env struct {
	stdout, stderr io.Writer
}

// interrupted is the cause of a context cancelled by a signal.
type interrupted struct{ sig os.Signal }

func (i interrupted) Error() string { return "interrupted by " + i.sig.String() }

// run runs lpsctl with args and returns its exit code. A ctx cancelled
// with an interrupted cause is Ctrl-C.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	name := programName
	if cmd != nil {
		name = cmd.CommandPath()
	}
	var sig interrupted
	if errors.As(context.Cause(ctx), &sig) {
		fmt.Fprintf(stderr, "%s: interrupted%s\n", name, mayHaveApplied(cmd))
		if s, ok := sig.sig.(syscall.Signal); ok && s != syscall.SIGINT {
			return 128 + int(s)
		}
		return exitInterrupted
	}
	var re *rpcError
	if errors.As(err, &re) && (re.code == codes.DeadlineExceeded || re.code == codes.Canceled || re.code == codes.Unavailable) {
		// The request may have reached lpsd and been applied before the
		// answer was lost.
		if hint := mayHaveApplied(cmd); hint != "" {
			if re.code == codes.DeadlineExceeded {
				hint += " (a slow lpsd may need a longer --timeout)"
			}
			err = fmt.Errorf("%w%s", err, hint)
		}
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ue *usageError
	if errors.As(err, &ue) && cmd != nil {
		if ue.help {
			fmt.Fprintln(stderr)
			cmd.SetOut(stderr)
			cmd.Usage() //nolint:errcheck // best effort on stderr
		} else {
			fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", cmd.CommandPath())
		}
	}
	return exitCode(err)
}

// mayHaveApplied is what stderr adds when a change's answer never came:
// it may or may not have been applied, and how to tell.
func mayHaveApplied(cmd *cobra.Command) string {
	if cmd == nil || cmd.Annotations[annotationChange] == "" {
		return ""
	}
	target := "VERSION"
	if args := cmd.Flags().Args(); len(args) == 1 {
		target = quote.Text(args[0])
	}
	return fmt.Sprintf(": the change may or may not have been applied; check with '%s status' or '%s audit --target %s'", programName, programName, target)
}

// newRoot builds the command tree.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   programName + " <command>",
		Short: "operate the live-patching service (lpsd)",
		Long: `lpsctl makes release signing keys, signs hotfix releases offline, publishes
them, steers their rollouts, revokes them, shows what lpsd serves and why,
lists the audit log, and renders a node's custom data; it does the same for
the signed configurations of other components (localDNS@3). The manual is
'go doc nodehotfix/cmd/lpsctl'.`,
		Version:                    version,
		Args:                       cobra.ArbitraryArgs,
		RunE:                       runGroup,
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: suggestionDistance,
		FParseErrWhitelist:         cobra.FParseErrWhitelist{UnknownFlags: true},
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.SetUsageFunc(usage)
	root.AddGroup(
		&cobra.Group{ID: groupOffline, Title: "Offline commands (no network):"},
		&cobra.Group{ID: groupChange, Title: "Changing what lpsd serves:"},
		&cobra.Group{ID: groupInspect, Title: "Inspecting lpsd:"},
		&cobra.Group{ID: groupOther, Title: "Other commands:"},
	)
	root.SetHelpCommand(&cobra.Command{
		Use:     "help [command]",
		Short:   "show help for a command",
		GroupID: groupOther,
		Args:    cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil {
				return usagef("%v", err)
			}
			if len(rest) > 0 {
				// "help frob": the same answer as "frob".
				return runGroup(target, rest)
			}
			target.SetOut(c.OutOrStdout())
			return target.Help()
		},
	})
	root.SetCompletionCommandGroupID(groupOther)

	keys := newGroup("keys", "manage release signing keys and key sets", groupOffline)
	keys.AddCommand(newKeysGenerateCmd(e), newKeysInitCmd(e), newKeysRotateCmd(e), newKeysVerifyCmd(e), newKeysPublishCmd(e), newKeysListCmd(e))
	rel := newGroup("release", "sign and publish releases", groupChange)
	rel.AddCommand(newReleaseSignCmd(e), newReleasePublishCmd(e))
	ro := newGroup("rollout", "steer a release's (or a component configuration's) rollout", groupChange)
	ro.AddCommand(newRolloutSetCmd(e), newRolloutPlanCmd(e), newRolloutSkipCmd(e))
	for _, t := range transitionNames {
		ro.AddCommand(newTransitionCmd(e, t))
	}
	root.AddCommand(keys, rel, ro, newComponentGroup(e),
		newRevokeCmd(e), newFreezeCmd(e, true), newFreezeCmd(e, false),
		newStatusCmd(e), newExplainCmd(e), newAuditCmd(e), newNodesCmd(e), newHistoryCmd(e), newLogCmd(e),
		newCustomDataCmd(e),
		newVersionCmd(e),
	)
	root.AddCommand(newWitnessGroup(e))
	// "completion tcsh" is an unknown shell, not help to source.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args, c.RunE, c.SuggestionsMinimumDistance = cobra.ArbitraryArgs, runGroup, suggestionDistance
		}
	}
	// Every command reports flag errors and prints usage the same way.
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.SetFlagErrorFunc(flagError)
		c.Flags().SortFlags = false
		if c.Flags().Lookup("output") != nil {
			c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{formatText, formatJSON, formatYAML}, cobra.ShellCompDirectiveNoFileComp)) //nolint:errcheck // the flag exists
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// newGroup returns a command that only holds subcommands.
func newGroup(name, short, group string) *cobra.Command {
	return &cobra.Command{
		Use:                        name + " <command>",
		Short:                      short,
		GroupID:                    group,
		Args:                       cobra.ArbitraryArgs,
		RunE:                       runGroup,
		SuggestionsMinimumDistance: suggestionDistance,
		// A group has no flags of its own: "lpsctl frobnicate --x" is
		// an unknown command, not an unknown flag.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
	}
}

// suggestionDistance is the edit distance within which an unknown command
// gets a suggestion.
const suggestionDistance = 2

func init() {
	// Help lists commands in the order a rollout uses them.
	cobra.EnableCommandSorting = false
}

// runGroup runs a command that only holds subcommands: the arguments can
// only be a missing or unknown command.
func runGroup(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return &usageError{err: errors.New("missing command"), help: true}
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usagef("%s", msg)
}

// usage prints a command's usage: its synopsis, subcommands by group, its
// own flags, then the connection flags apart.
func usage(c *cobra.Command) error {
	w := c.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	if c.HasAvailableSubCommands() {
		groups := c.Groups()
		if len(groups) == 0 {
			groups = []*cobra.Group{{ID: "", Title: "Commands:"}}
		}
		for _, g := range groups {
			var lines []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() && sub.GroupID == g.ID {
					lines = append(lines, fmt.Sprintf("  %-*s %s", c.NamePadding(), sub.Name(), sub.Short))
				}
			}
			if len(lines) > 0 {
				fmt.Fprintf(w, "\n%s\n%s\n", g.Title, strings.Join(lines, "\n"))
			}
		}
	}
	own, conn := pflag.NewFlagSet("", pflag.ContinueOnError), pflag.NewFlagSet("", pflag.ContinueOnError)
	own.SortFlags, conn.SortFlags = false, false
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if _, ok := f.Annotations[annotationConn]; ok {
			conn.AddFlag(f)
		} else {
			own.AddFlag(f)
		}
	})
	if own.HasFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", own.FlagUsages())
	}
	if conn.HasFlags() {
		fmt.Fprintf(w, "\nConnection flags:\n%s", conn.FlagUsages())
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", c.CommandPath())
	}
	return nil
}

// flagError turns pflag's errors into "--flag "value": reason" usage
// errors, suggesting the closest flag for an unknown one.
func flagError(c *cobra.Command, err error) error {
	var inv *pflag.InvalidValueError
	var none *pflag.NotExistError
	switch {
	case errors.As(err, &inv):
		return usagef("--%s %q: %v", inv.GetFlag().Name, inv.GetValue(), inv.Unwrap())
	case errors.As(err, &none):
		name := none.GetSpecifiedName()
		if short := none.GetSpecifiedShortnames(); short != "" {
			if f := c.Flags().Lookup(short); f != nil {
				return usagef("unknown flag -%s; did you mean --%s?", short, f.Name)
			}
			return usagef("unknown flag -%s", name)
		}
		if s := closestFlag(c, name); s != "" {
			return usagef("unknown flag --%s; did you mean --%s?", name, s)
		}
		return usagef("unknown flag --%s", name)
	}
	return &usageError{err: err}
}

// closestFlag returns the visible flag of c that name is probably a typo
// of, or "".
func closestFlag(c *cobra.Command, name string) string {
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	return typo.Closest(name, names)
}

// exitCode maps an error to the exit code table in doc.go.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	var fe *tiles.ForkError
	if errors.As(err, &fe) {
		return exitFork
	}
	var fl *flaggedError
	if errors.As(err, &fl) {
		return exitFlagged
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

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "print the lpsctl version",
		GroupID: groupOther,
		Args:    positional(),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, version)
			return err
		},
	}
}

// usageError is a bad command line; help means the command's usage
// follows the message.
type usageError struct {
	err  error
	help bool
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// positional requires exactly the named positional arguments.
func positional(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		if len(names) == 0 {
			return usagef("unexpected arguments: %s", strings.Join(args, " "))
		}
		if len(args) < len(names) {
			return usagef("missing argument %s", strings.Join(names[len(args):], " "))
		}
		return usagef("unexpected arguments after %s: %s", strings.Join(names, " "), strings.Join(args[len(names):], " "))
	}
}

// required returns a usage error naming the first flag of names that was
// not given or given empty.
func required(c *cobra.Command, names ...string) error {
	i := slices.IndexFunc(names, func(n string) bool {
		f := c.Flags().Lookup(n)
		return !f.Changed || f.Value.String() == ""
	})
	if i >= 0 {
		return usagef("--%s is required", names[i])
	}
	return nil
}
