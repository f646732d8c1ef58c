package launch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/downloadhotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/provision"
	"nodehotfix/internal/node/report"
	"nodehotfix/internal/node/task"
)

// steps are the parts of the trip that leave launch: the in-process
// commands, the reports, the launcher's event. newSteps makes the real
// ones; launch's tests swap them.
type steps struct {
	// checkHotfix and downloadHotfix run those commands in this process,
	// each in its own lifecycle (task.Task), and say how they ended.
	checkHotfix, downloadHotfix func(ctx context.Context) report.Step
	// bakedProvision provisions with the baked agent in this process and
	// returns the exit code.
	bakedProvision func(ctx context.Context, p provisionArgs) int
	// event records the launcher's telemetry event; nil records none.
	event func(level, message string)
	// report sends the outcome report after provisioning; it bounds itself
	// and cannot change the exit code. Nil sends none.
	report func(ctx context.Context, o report.Outcome)
	// started sends the started report just before the hotfix agent first
	// runs. Launch runs it concurrently and waits for it only before the
	// outcome report; it bounds itself (report.Timeout). Nil sends none.
	started func(ctx context.Context, s report.Start)
}

// newSteps returns the real steps of cfg (defaulted) and a function that
// closes what they hold: one connection to the live-patching service, for
// check-hotfix and the started report after it.
func newSteps(cfg Config) (*steps, func()) {
	sess := new(lpsclient.Session)
	rec := task.Recorder{Root: cfg.Root, Log: cfg.Log, Version: cfg.Version}
	rc := report.Config{Root: cfg.Root, IMDSURL: cfg.IMDSURL, LPSAddr: cfg.LPSAddr}
	st := &steps{
		checkHotfix: func(ctx context.Context) report.Step {
			start := time.Now()
			res := checkhotfix.Task(cfg.CheckBudget).Run(ctx, rec, func(ctx context.Context) checkhotfix.Result {
				return checkhotfix.Run(ctx, checkhotfix.Config{
					Root: cfg.Root, Version: cfg.Version, IMDSURL: cfg.IMDSURL, LPSAddr: cfg.LPSAddr, Log: cfg.Log,
					Reports: true, Session: sess, ReleaseKeys: cfg.ReleaseKeys,
				})
			})
			return report.Step{Outcome: string(res.Outcome), Elapsed: time.Since(start), Failed: res.Failed()}
		},
		downloadHotfix: func(ctx context.Context) report.Step {
			start := time.Now()
			res, err := downloadHotfix(ctx, cfg, rec)
			if err != nil {
				cfg.Log.Warn("download-hotfix not run", "err", err)
			}
			return report.Step{Outcome: string(res.Outcome), Route: string(res.Route), Elapsed: time.Since(start), Failed: err != nil || res.Failed()}
		},
		bakedProvision: func(ctx context.Context, p provisionArgs) int {
			return provision.RunWithEvents(ctx, provision.Config{
				Root: cfg.Root, ConfigPath: p.ConfigPath, NBCCmdPath: p.NBCCmdPath,
				Stdout: cfg.Stdout, Stderr: cfg.Stderr, Log: cfg.Log, AgentVersion: cfg.Version,
				Env: p.Env, LaunchID: p.LaunchID, Agent: string(hotfix.AgentBaked), Fallback: p.Fallback,
			})
		},
		event: func(level, msg string) {
			now := time.Now()
			rec.Event(event.TaskLauncher, level, msg, now, now)
		},
		report: func(ctx context.Context, o report.Outcome) {
			deliverOutcome(ctx, rc, cfg.Log, o)
		},
		started: func(ctx context.Context, s report.Start) {
			deliverStarted(ctx, rc, cfg.Log, sess, s)
		},
	}
	return st, func() { sess.Close() }
}

// downloadHotfix runs download-hotfix in its lifecycle. The error is an
// unreadable ArtifactCA: the command does not run.
func downloadHotfix(ctx context.Context, cfg Config, rec task.Recorder) (downloadhotfix.Result, error) {
	caPEM, err := downloadhotfix.ReadArtifactCA(cfg.ArtifactCA)
	if err != nil {
		return downloadhotfix.Result{}, fmt.Errorf("--artifact-ca: %w", err)
	}
	return downloadhotfix.Task(cfg.DownloadBudget).Run(ctx, rec, func(ctx context.Context) downloadhotfix.Result {
		return downloadhotfix.Run(ctx, downloadhotfix.Config{
			Root: cfg.Root, Version: cfg.Version, ReleaseKeys: cfg.ReleaseKeys, ArtifactCAPEM: caPEM, PackageOutput: cfg.Stderr, Log: cfg.Log,
		})
	}), nil
}

// deliverOutcome sends the outcome report within report.Timeout, and keeps it
// for report-resend if the service did not acknowledge it. It is
// telemetry: a failure is logged and changes nothing.
func deliverOutcome(ctx context.Context, rc report.Config, log *slog.Logger, o report.Outcome) {
	ctx, cancel := context.WithTimeout(ctx, report.Timeout)
	defer cancel()
	start := time.Now()
	first, err := report.Send(ctx, rc, o)
	if err != nil {
		log.Warn("outcome report not delivered (fail-open)", "err", err, "durationMs", time.Since(start).Milliseconds(), "kept", keep(ctx, rc, log, start, err, &o, nil))
		return
	}
	log.Info("outcome report delivered", "first", first, "durationMs", time.Since(start).Milliseconds())
}

// deliverStarted sends the started report within report.Timeout, on the
// session's connection when check-hotfix left one open. Telemetry, like
// the outcome: a failure is logged and changes nothing.
func deliverStarted(ctx context.Context, rc report.Config, log *slog.Logger, sess *lpsclient.Session, s report.Start) {
	ctx, cancel := context.WithTimeout(ctx, report.Timeout)
	defer cancel()
	start := time.Now()
	first, err := report.SendStarted(ctx, rc, sess, s)
	if err != nil {
		log.Warn("started report not delivered (fail-open)", "version", s.Hotfix, "err", err, "durationMs", time.Since(start).Milliseconds(), "kept", keep(ctx, rc, log, start, err, nil, &s))
		return
	}
	log.Info("started report delivered", "version", s.Hotfix, "first", first, "durationMs", time.Since(start).Milliseconds())
}

// keep puts a report the service did not acknowledge in the outbox, for
// report-resend, when the error says it may take it later; it says whether
// it did. Fail-open: a disk error loses the report, and is logged.
func keep(ctx context.Context, rc report.Config, log *slog.Logger, sent time.Time, err error, o *report.Outcome, s *report.Start) bool {
	if !report.Retryable(err) {
		return false
	}
	if kerr := report.Keep(context.WithoutCancel(ctx), rc.Root, sent, o, s); kerr != nil {
		log.Warn("report not kept for a resend (fail-open)", "err", kerr)
		return false
	}
	return true
}
