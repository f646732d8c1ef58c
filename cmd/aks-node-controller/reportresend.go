package main

import (
	"context"
	"fmt"
	"time"

	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/report"
)

// reportResendBudget bounds a resend: the outbox holds at most a few
// reports, each attempt within report.Timeout.
const reportResendBudget = 20 * time.Second

// runReportResend resends the reports the outbox keeps (report.Resend).
// The node's timer runs it; like the reports themselves it is fail-open
// and always exits 0, the reason of a failure on stderr and in the log.
func runReportResend(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("report-resend", e)
	nf.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return exitOK
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "report-resend", fs.Args())
	ctx, cancel := context.WithTimeout(ctx, reportResendBudget)
	defer cancel()
	res, err := report.Resend(ctx, report.Config{Root: root, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr}, time.Now())
	if err != nil {
		log.Warn("report resend incomplete (fail-open)", "err", err, "delivered", res.Delivered, "dropped", res.Dropped, "kept", res.Kept)
	} else if res != (report.Resent{}) {
		log.Info("reports resent", "delivered", res.Delivered, "dropped", res.Dropped, "kept", res.Kept)
	}
	fmt.Fprintf(e.stdout, "delivered %d, dropped %d, kept %d\n", res.Delivered, res.Dropped, res.Kept)
	return exitOK
}
