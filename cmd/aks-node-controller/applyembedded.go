package main

import (
	"context"

	"nodehotfix/internal/node/embedhotfix"
	"nodehotfix/internal/node/layout"
)

// runApplyEmbedded applies the script hotfix this binary carries. The
// reference launcher runs `<chosen agent> apply-embedded-hotfix` with no
// arguments after choosing the hotfix agent and ignores a failure; launch
// does the same. Exit 0 when it applied or had nothing to apply, 1 when the
// payload was bad or could not be written (nothing of a bad payload is).
func runApplyEmbedded(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("apply-embedded-hotfix", e)
	nf.register(fs, false)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "apply-embedded-hotfix", fs.Args())
	res := embedhotfix.Task().Run(ctx, recorder(root, log), func(context.Context) embedhotfix.Result {
		return embedhotfix.Apply(root, embedhotfix.Payloads())
	})
	if res.Failed() {
		return exitError
	}
	return exitOK
}
