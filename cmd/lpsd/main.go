// Command lpsd is the live-patching service: it answers nodes'
// GetComponentConfig calls and serves the operator admin API. See doc.go;
// the service is assembled in internal/lpsd, which the benchmarks and the
// fleet simulator run too.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	// --advance-window names IANA time zones, which the distroless image
	// has no files for.
	_ "time/tzdata"

	"nodehotfix/internal/lpsd"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := lpsd.Main(ctx, version, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
