// Command checkhotfix measures the wall time of the real
// `aks-node-controller check-hotfix` process against the floor
// (bench/floor/checkfloor) on loopback, plus the no-LPS and hung-LPS cases.
// See bench/README.md.
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
