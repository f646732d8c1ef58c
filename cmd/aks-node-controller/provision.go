package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/handover"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/provision"
)

func runProvision(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("provision", e)
	nf.register(fs, false)
	configPath := fs.String("provision-config", "", "node config `file` (aks-node-controller-config.json)")
	nbcCmd := fs.String("nbc-cmd", "", "bootstrap command `file` (aks-node-controller-nbc-cmd.sh); takes priority")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "provision", fs.Args())
	return provision.RunWithEvents(ctx, provision.Config{
		Root:         root,
		ConfigPath:   *configPath,
		NBCCmdPath:   *nbcCmd,
		Stdout:       e.stdout,
		Stderr:       e.stderr,
		Log:          log,
		AgentVersion: version,
		// Set by launch for a hotfix agent child (internal/node/handover).
		LaunchID:        os.Getenv(handover.EnvLaunchID),
		Agent:           os.Getenv(handover.EnvAgent),
		FallbackFollows: os.Getenv(handover.EnvBakedFallback) == "1",
	})
}

func runProvisionWait(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("provision-wait", e)
	nf.register(fs, false)
	timeout := fs.Duration("timeout", 14*time.Minute, "give up after this long (0: wait until killed); default stays under the 15-minute CSE timeout")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	rec := recorder(root, log)
	start := time.Now()
	raw, _, err := provision.Wait(ctx, root)
	if raw != nil {
		fmt.Fprintln(e.stdout, string(raw))
	}
	var se *provision.StatusError
	switch {
	case err == nil:
		rec.Event(event.TaskProvisionWait, event.LevelInformational, "provision completed", start, time.Now())
		return exitOK
	case errors.As(err, &se):
		rec.Event(event.TaskProvisionWait, event.LevelError, se.Error(), start, time.Now())
		fmt.Fprintln(e.stderr, "aks-node-controller:", err)
		return se.Code()
	default:
		rec.Event(event.TaskProvisionWait, event.LevelError, err.Error(), start, time.Now())
		fmt.Fprintln(e.stderr, "aks-node-controller:", err)
		return exitError
	}
}
