package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/launch"
	"nodehotfix/internal/node/layout"
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
	hostnameWait := fs.Duration("hostname-wait", launch.DefaultHostnameWait, "how long to wait for the kernel hostname to match /etc/hostname (0: do not wait)")
	checkBudget := fs.Duration("check-budget", checkhotfix.DefaultBudget, "check-hotfix's overall time budget, metadata service included")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "launch", fs.Args())
	wait := *hostnameWait
	if wait == 0 {
		wait = -1 // launch.Config: negative means no wait
	}
	return launch.Run(ctx, launch.Config{
		Root:         root,
		Version:      version,
		BakedPath:    *binPath,
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
			res := checkHotfix(ctx, root, log, nf, *checkBudget, true)
			return report.Step{Outcome: string(res.Outcome), Elapsed: time.Since(start)}
		},
		DownloadHotfix: func(ctx context.Context) report.Step {
			start := time.Now()
			res, err := downloadHotfix(ctx, root, log, df, e.stderr)
			if err != nil {
				log.Warn("download-hotfix not run", "err", err)
			}
			return report.Step{Outcome: string(res.Outcome), Route: string(res.Route), Elapsed: time.Since(start)}
		},
		Report: func(ctx context.Context, o report.Outcome) {
			sendReport(ctx, root, log, nf, o)
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
	})
}

// sendReport sends the outcome report within report.Timeout. It is
// telemetry: a failure is logged and changes nothing.
func sendReport(ctx context.Context, root layout.Root, log *slog.Logger, nf nodeFlags, o report.Outcome) {
	ctx, cancel := context.WithTimeout(ctx, report.Timeout)
	defer cancel()
	start := time.Now()
	first, err := report.Send(ctx, report.Config{Root: root, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr}, o)
	if err != nil {
		log.Warn("outcome report not delivered (fail-open)", "err", err, "durationMs", time.Since(start).Milliseconds())
		return
	}
	log.Info("outcome report delivered", "first", first, "durationMs", time.Since(start).Milliseconds())
}
