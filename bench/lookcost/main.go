// Command lookcost measures what a look at the evidence costs as the
// stored history grows: the time of assess.Assess over the store, as the
// autopilot calls it, and the peak RSS (VmHWM) of lpsd, as it ships,
// idling on that store; on bbolt and on an embedded etcd, before and after
// lpsd's retention prunes it. See bench/README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
