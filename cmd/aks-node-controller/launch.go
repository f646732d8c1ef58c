package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/launch"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/provision"
	"nodehotfix/internal/node/report"
)

func runLaunch(ctx context.Context, args []string, e *env) int {
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
	// One connection for check-hotfix and the started report after it.
	sess := new(lpsclient.Session)
	defer sess.Close()
	cfg := launch.Config{
		Root:         root,
		Version:      version,
		BakedPath:    *binPath,
		HotfixPath:   *hotfixBin,
		PointerPath:  *pointer,
		ConfigPath:   *configPath,
		NBCCmdPath:   *nbcCmd,
		FeaturesPath: *featuresPath,
		ReleaseKeys:  df.keys,
		LaunchID:     os.Getenv(launch.EnvLaunchID),
		HostnameWait: wait,
		Stdout:       e.stdout,
		Stderr:       e.stderr,
		Log:          log,
		CheckHotfix: func(ctx context.Context) report.Step {
			start := time.Now()
			res := checkHotfix(ctx, root, log, nf, df.keys, *checkBudget, sess)
			return report.Step{Outcome: string(res.Outcome), Elapsed: time.Since(start), Failed: res.Failed()}
		},
		DownloadHotfix: func(ctx context.Context) report.Step {
			start := time.Now()
			res, err := downloadHotfix(ctx, root, log, df, e.stderr)
			if err != nil {
				log.Warn("download-hotfix not run", "err", err)
			}
			return report.Step{Outcome: string(res.Outcome), Route: string(res.Route), Elapsed: time.Since(start), Failed: err != nil || res.Failed()}
		},
		Report: func(ctx context.Context, o report.Outcome) {
			sendReport(ctx, root, log, nf, o)
		},
		Started: func(ctx context.Context, s report.Start) {
			sendStarted(ctx, root, log, nf, sess, s)
		},
		Provision: func(ctx context.Context, p launch.Provision) int {
			return provisionTask(ctx, root, log, provision.Config{
				Root: root, ProvisionConfig: p.ConfigPath, NBCCmd: p.NBCCmdPath,
				Stdout: e.stdout, Stderr: e.stderr, Log: log, AgentVersion: version,
				Env: p.Env, LaunchID: p.LaunchID, Agent: string(hotfix.AgentBaked), Fallback: p.Fallback,
			})
		},
		Event: func(level, msg string) {
			now := time.Now()
			emit(root, log, event.TaskLauncher, level, msg, now, now)
		},
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
func writeSelection(e *env, result *os.File, sel launch.Selection) int {
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

// sendReport sends the outcome report within report.Timeout, and keeps it
// for report-resend if the service did not acknowledge it. It is
// telemetry: a failure is logged and changes nothing.
func sendReport(ctx context.Context, root layout.Root, log *slog.Logger, nf nodeFlags, o report.Outcome) {
	ctx, cancel := context.WithTimeout(ctx, report.Timeout)
	defer cancel()
	start := time.Now()
	first, err := report.Send(ctx, report.Config{Root: root, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr}, o)
	if err != nil {
		log.Warn("outcome report not delivered (fail-open)", "err", err, "durationMs", time.Since(start).Milliseconds(), "kept", keep(ctx, root, log, start, err, &o, nil))
		return
	}
	log.Info("outcome report delivered", "first", first, "durationMs", time.Since(start).Milliseconds())
}

// keep puts a report the service did not acknowledge in the outbox, for
// report-resend, when the error says it may take it later; it says whether
// it did. Fail-open: a disk error loses the report, and is logged.
func keep(ctx context.Context, root layout.Root, log *slog.Logger, sent time.Time, err error, o *report.Outcome, s *report.Start) bool {
	if !report.Retryable(err) {
		return false
	}
	if kerr := report.Keep(context.WithoutCancel(ctx), root, sent, o, s); kerr != nil {
		log.Warn("report not kept for a resend (fail-open)", "err", kerr)
		return false
	}
	return true
}

// sendStarted sends the started report within report.Timeout, on the
// session's connection when check-hotfix left one open. Telemetry, like
// the outcome: a failure is logged and changes nothing.
func sendStarted(ctx context.Context, root layout.Root, log *slog.Logger, nf nodeFlags, sess *lpsclient.Session, s report.Start) {
	ctx, cancel := context.WithTimeout(ctx, report.Timeout)
	defer cancel()
	start := time.Now()
	first, err := report.SendStarted(ctx, report.Config{Root: root, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr}, sess, s)
	if err != nil {
		log.Warn("started report not delivered (fail-open)", "version", s.Hotfix, "err", err, "durationMs", time.Since(start).Milliseconds(), "kept", keep(ctx, root, log, start, err, nil, &s))
		return
	}
	log.Info("started report delivered", "version", s.Hotfix, "first", first, "durationMs", time.Since(start).Milliseconds())
}
