// Command vsref measures our check-hotfix against the reference client
// (Azure AgentBaker's aks-node-controller check-hotfix, built by the
// operator from its source; nothing of it is in this repository) and
// against the floor (bench/floor/checkfloor), all three on the same lpsd,
// interleaved. The reference has its paths and addresses built in
// (169.254.169.254, <api_server_name>:443, /opt/azure, /var/log/azure), so
// the tool re-runs itself in new network and mount namespaces (root only)
// where those names are the rig's. See bench/README.md.
//
//	go run ./bench/vsref -ref /tmp/ref/aks-node-controller-ref [-n 25] [-baseline AGENT]...
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
