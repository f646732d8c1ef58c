package main

import (
	"context"

	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/layout"
)

func runCheckHotfix(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("check-hotfix", e)
	nf.register(fs, true)
	budget := fs.Duration("budget", checkhotfix.DefaultBudget, "overall time budget, metadata service included")
	if err := fs.Parse(args); err != nil {
		// Even a bad flag must not fail provisioning: this command always
		// exits 0; the error is on stderr.
		return exitOK
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "check-hotfix", fs.Args())
	checkhotfix.Task(*budget).Run(ctx, recorder(root, log), func(ctx context.Context) checkhotfix.Result {
		return checkhotfix.Run(ctx, checkhotfix.Config{Root: root, Version: version, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr, Log: log})
	})
	return exitOK
}
