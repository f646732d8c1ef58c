// Command reporoute measures download-hotfix's repository route, the real
// aks-node-controller staging the agent straight from a signed apt
// repository, against the package manager's install of the same package
// from the same repository over the same HTTPS, in one run: the apt
// commands pkgmgr.Install runs (dpkg --configure -a, a scoped apt-get
// update, apt-cache madison, apt-get install of the pinned version) in a
// sandbox root with an empty dpkg database. See bench/README.md.
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
