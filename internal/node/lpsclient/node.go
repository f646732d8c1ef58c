package lpsclient

import (
	"context"
	"fmt"

	"nodehotfix/internal/imds"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/nodeconfig"
)

// Node is how a node command reaches the service: the node's files under
// Root and the metadata service.
type Node struct {
	Root layout.Root
	// IMDSURL is the metadata service; empty means imds.DefaultURL.
	IMDSURL string
	// LPSAddr overrides where to dial; TLS verification is unaffected.
	LPSAddr string
}

// Resolve takes the steps every node call to the service begins with: the
// target from the node config (or, failing that, nbc-cmd.sh), its cluster
// CA as the only trust anchor, and an attested document from the metadata
// service as the token. It returns the source the target came from, which
// check-hotfix logs. Its errors are never *Error: nothing reached the
// service, so a fail-open caller may fall back.
func (n Node) Resolve(ctx context.Context) (Target, string, nodeconfig.Source, error) {
	nt, err := nodeconfig.ResolveTarget(n.Root.NodeConfig(), n.Root.NBCCmd())
	if err != nil {
		return Target{}, "", "", fmt.Errorf("resolve live-patching target: %w", err)
	}
	roots, err := nt.CertPool()
	if err != nil {
		return Target{}, "", nt.Source, err
	}
	url := n.IMDSURL
	if url == "" {
		url = imds.DefaultURL
	}
	token, err := imds.NewClient(url).AttestedSignature(ctx)
	if err != nil {
		return Target{}, "", nt.Source, err
	}
	return Target{Host: nt.Host, Addr: n.LPSAddr, Roots: roots}, token, nt.Source, nil
}
