// Command loadgen measures lpsd's node-facing throughput, latency and
// memory: every simulated node opens a new TLS connection and makes one
// GetComponentConfig call with its own attested document, as check-hotfix
// does. It compares lpsd with the floor (bench/floor/lpsfloor) and can
// profile the request path of lpsd as it ships (--debug-listen). See
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
