package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at link time: -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		cancel(interrupted{s})
		// A second signal is the operator insisting: the default action.
		signal.Stop(sigs)
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel(nil)
	os.Exit(code)
}
