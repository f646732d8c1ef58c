// Command fleetsim drives simulated nodes against 3 lpsd replicas on a
// 3-member embedded etcd cluster and checks every answer: see
// bench/internal/fleet and bench/README.md.
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
