package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/handover"
	"nodehotfix/internal/node/launch"
	"nodehotfix/internal/node/layout"
)

func runLaunch(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	var df downloadFlags
	fs := newFlagSet("launch", e)
	nf.register(fs, true)
	df.register(fs, "download-budget")
	binPath := fs.String("bin-path", "", "the baked agent `file` (default <root>/opt/azure/containers/aks-node-controller); the hotfix is <bin-path>-hotfix")
	pointer := fs.String("hotfix-json", "", "pointer `file` whose presence runs download-hotfix (default under --root)")
	configPath := fs.String("provision-config", "", "node config `file` (default under --root)")
	nbcCmd := fs.String("nbc-cmd", "", "bootstrap command `file` (default under --root)")
	featuresPath := fs.String("features", "", "feature flags `file`, read as data (default under --root)")
	hotfixBin := fs.String("hotfix-bin", "", "the hotfix agent `file` Select examines and the helper names (default <bin-path>-hotfix); download-hotfix always stages to <root>/opt/azure/containers/aks-node-controller-hotfix, so another path is never chosen")
	hostnameWait := fs.Duration("hostname-wait", launch.DefaultHostnameWait, "how long to wait for the kernel hostname to match /etc/hostname (0: do not wait)")
	checkBudget := fs.Duration("check-budget", checkhotfix.DefaultBudget, "check-hotfix's overall time budget, metadata service included")
	selectOnly := fs.Bool("select-only", false, "run the hotfix flow and name the agent to provision with, but do not provision (the helper script aks-node-controller-hotfix.sh)")
	featuresOnly := fs.Bool("features-only", false, "only read the feature flags and name the accepted ones")
	resultFD := fs.Int("result-fd", 0, "with --select-only or --features-only, write the result records to this open `fd` instead of the selected agent to stdout")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *selectOnly && *featuresOnly {
		fmt.Fprintln(e.stderr, "aks-node-controller launch: --select-only and --features-only exclude each other")
		return exitUsage
	}
	if *resultFD < 0 || *resultFD > 0 && !*selectOnly && !*featuresOnly {
		fmt.Fprintln(e.stderr, "aks-node-controller launch: --result-fd wants a non-negative fd and --select-only or --features-only")
		return exitUsage
	}
	result, err := openResult(*resultFD)
	if err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller launch: %v\n", err)
		return exitError
	}
	root := layout.Root(nf.root)
	if *featuresOnly {
		return writeSelection(e, result, launch.Selection{Env: launch.ReadFeatures(*featuresPath, root, e.stdout).Env()})
	}
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "launch", fs.Args())
	wait := *hostnameWait
	if wait == 0 {
		wait = -1 // launch.Config: negative means no wait
	}
	cfg := launch.Config{
		Root:           root,
		Version:        version,
		BakedPath:      *binPath,
		HotfixPath:     *hotfixBin,
		PointerPath:    *pointer,
		ConfigPath:     *configPath,
		NBCCmdPath:     *nbcCmd,
		FeaturesPath:   *featuresPath,
		ReleaseKeys:    df.keys,
		ArtifactCA:     df.artifactCA,
		IMDSURL:        nf.imdsURL,
		LPSAddr:        nf.lpsAddr,
		CheckBudget:    *checkBudget,
		DownloadBudget: df.budget,
		LaunchID:       os.Getenv(handover.EnvLaunchID),
		HostnameWait:   wait,
		Stdout:         e.stdout,
		Stderr:         e.stderr,
		Log:            log,
	}
	if *selectOnly {
		return writeSelection(e, result, launch.SelectAgent(ctx, cfg))
	}
	return launch.Run(ctx, cfg)
}

// openResult takes the result fd before any step runs and makes it
// close-on-exec: the shell hands it over inheritable, and every program the
// steps start (the package manager and its scripts, a staged binary's
// `version`, apply-embedded-hotfix) would otherwise hold the helper's pipe
// open, making it wait for them, and could write records of its own. fd 0
// means no result fd (nil).
func openResult(fd int) (*os.File, error) {
	if fd == 0 {
		return nil, nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("--result-fd %d: not an open file descriptor: %w", fd, err)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "result"), nil
}

// writeSelection hands a selection to the helper script: without a result
// file the selected agent alone, as the last line of stdout (for a person,
// as the reference's helper prints it run as a script); otherwise one
// record a line on it, "flag KEY=VALUE" for each accepted feature flag,
// then "selected PATH". Records are the helper's only input, kept apart
// from the log lines on stdout. A path with a newline cannot be a record
// and is left out: the helper then keeps the baked agent.
func writeSelection(e *stdio, result *os.File, sel launch.Selection) int {
	if result == nil {
		if sel.Path != "" {
			if _, err := fmt.Fprintln(e.stdout, sel.Path); err != nil {
				return exitError
			}
		}
		return exitOK
	}
	defer result.Close()
	var b strings.Builder
	for _, kv := range sel.Env {
		b.WriteString("flag " + kv + "\n")
	}
	if sel.Path != "" && !strings.ContainsAny(sel.Path, "\n\r") {
		b.WriteString("selected " + sel.Path + "\n")
	}
	if _, err := result.WriteString(b.String()); err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller launch: write the result to fd %d: %v\n", result.Fd(), err)
		return exitError
	}
	return exitOK
}
