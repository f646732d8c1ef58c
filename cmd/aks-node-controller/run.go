package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"nodehotfix/internal/node/agentlog"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/task"
)

// Exit codes; doc.go is the table.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, e *stdio) int
}

func commands() []command {
	return []command{
		{"apply-embedded-hotfix", "apply the script hotfix this agent carries for the node's distribution, if any (exit 0 when none)", runApplyEmbedded},
		{"apply-localdns-config", "apply a localDNS config from a file or stdin: stage the Corefile it selects for this node, print the outcome", runApplyLocalDNSConfig},
		{"check-hotfix", "ask the live-patching service for the hotfix pointer and stage it (always exits 0)", runCheckHotfix},
		{"download-hotfix", "stage the verified hotfix agent the pointer names, or remove one that no longer applies", runDownloadHotfix},
		{"explain", "say what the hotfix path would do on this node and why (local files only)", runExplain},
		{"fetch-localdns-config", "fetch this node's localDNS config from the live-patching service and stage its Corefile; prints the outcome, always exits 0", runFetchLocalDNSConfig},
		{"live-patching", "print the configuration the live-patching service serves this node for a component (an operator's probe: failures exit 1)", runLivePatching},
		{"launch", "provision the node as the launcher does: feature flags, check-hotfix, download-hotfix, the agent choice, provision", runLaunch},
		{"provision", "run the node bootstrap and record provision.json / provision.complete", runProvision},
		{"provision-wait", "wait for provisioning to complete and print provision.json", runProvisionWait},
		{"report-resend", "resend the reports the live-patching service did not acknowledge (a timer runs it; always exits 0)", runReportResend},
		{"version", "print the agent version", runVersion},
	}
}

// stdio is what every subcommand gets: its output streams.
type stdio struct {
	stdout, stderr io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &stdio{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "--version", "-version", "-v":
		return runVersion(ctx, nil, e)
	case "help", "--help", "-help", "-h":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], e)
		}
	}
	fmt.Fprintf(stderr, "aks-node-controller: unknown command: %s\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: aks-node-controller <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'aks-node-controller <command> -h' for a command's flags.")
}

func runVersion(_ context.Context, _ []string, e *stdio) int {
	fmt.Fprintln(e.stdout, version)
	return exitOK
}

// nodeFlags are the flags every node subcommand shares.
type nodeFlags struct {
	root    string
	imdsURL string
	lpsAddr string
}

func (f *nodeFlags) register(fs *flag.FlagSet, network bool) {
	fs.StringVar(&f.root, "root", "/", "directory every on-node path resolves under")
	if network {
		fs.StringVar(&f.imdsURL, "imds-url", "http://169.254.169.254", "instance metadata service base URL")
		fs.StringVar(&f.lpsAddr, "lps-addr", "", "live-patching `host:port` to dial (default <api_server_name>:443; TLS verification is unchanged)")
	}
}

func newFlagSet(name string, e *stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("aks-node-controller "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// logger returns a JSON logger writing to the agent log under root and to
// stderr, and a function that closes the log file. When the log file cannot
// be opened the agent carries on with stderr alone: logging must never be
// the reason provisioning stops.
func logger(root layout.Root, e *stdio) (*slog.Logger, func()) {
	var w io.Writer = e.stderr
	closeFn := func() {}
	if f, err := agentlog.Open(root.LogFile()); err == nil {
		w = io.MultiWriter(f, e.stderr)
		closeFn = func() { f.Close() }
	} else {
		fmt.Fprintf(e.stderr, "aks-node-controller: agent log: %v; logging to stderr only\n", err)
	}
	return slog.New(slog.NewJSONHandler(w, nil)), closeFn
}

// recorder is where a command's task records: the agent log and the
// events directory under root, as this agent's version.
func recorder(root layout.Root, log *slog.Logger) task.Recorder {
	return task.Recorder{Root: root, Log: log, Version: version}
}

func warnExtraArgs(log *slog.Logger, cmd string, args []string) {
	if len(args) > 0 {
		log.Warn("ignoring unexpected arguments", "command", cmd, "args", strings.Join(args, " "))
	}
}
