// Command abuse measures how well lpsd keeps serving nodes while one client
// holds connections open: probe nodes keep calling through a baseline, a
// phase of silent TCP sockets (never a ClientHello) and a phase of completed
// but idle HTTP/2 connections, and the tool reports the share of probe calls
// served in each. See bench/README.md.
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
