// Command launcher measures the time the on-node launcher adds over running
// `aks-node-controller provision` directly: with the hotfix flag off, and
// with it on when the service has nothing for the node. See
// bench/README.md.
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
