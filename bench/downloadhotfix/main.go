// Command downloadhotfix measures `aks-node-controller download-hotfix` on
// the direct path (signed release, HTTPS artifact on loopback) against
// `curl -so FILE URL && sha256sum FILE` on the same file in the same run,
// and compares its peak memory for two artifact sizes. See
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
