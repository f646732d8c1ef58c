package main

import (
	"context"
	"log/slog"
	"time"

	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
)

func runCheckHotfix(ctx context.Context, args []string, e *env) int {
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
	checkHotfix(ctx, root, log, nf, "", *budget, nil)
	return exitOK
}

// checkHotfix runs check-hotfix in its lifecycle; launch calls it in-process
// with its session, since it reports afterwards (the started report on the
// session's connection, the outcome); nil: a check-hotfix of its own. keys
// is launch's --release-keys, whose key-set version the request declares
// ("": the image's).
func checkHotfix(ctx context.Context, root layout.Root, log *slog.Logger, nf nodeFlags, keys string, budget time.Duration, sess *lpsclient.Session) checkhotfix.Result {
	return checkHotfixTask(budget).run(ctx, root, log, func(ctx context.Context) checkhotfix.Result {
		return checkhotfix.Run(ctx, checkhotfix.Config{
			Root: root, Version: version, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr, Log: log, Reports: sess != nil, Session: sess, ReleaseKeys: keys,
		})
	})
}
