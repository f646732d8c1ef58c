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

// Resolve takes the steps every node call to the service begins with:
// Target, then Token. It returns the source the target came from, which
// check-hotfix logs. Its errors are never *Error: nothing reached the
// service, so a fail-open caller may fall back.
func (n Node) Resolve(ctx context.Context) (Target, string, nodeconfig.Source, error) {
	t, source, err := n.Target()
	if err != nil {
		return Target{}, "", source, err
	}
	token, err := n.Token(ctx)
	if err != nil {
		return Target{}, "", source, err
	}
	return t, token, source, nil
}

// Target is where the node's calls go: the target from the node config
// (or, failing that, nbc-cmd.sh) with its cluster CA as the only trust
// anchor. It reads local files only, so a caller can start connecting
// before it asks the metadata service for the token.
func (n Node) Target() (Target, nodeconfig.Source, error) {
	nt, err := nodeconfig.ResolveTarget(n.Root.NodeConfig(), n.Root.NBCCmd())
	if err != nil {
		return Target{}, "", fmt.Errorf("resolve live-patching target: %w", err)
	}
	roots, err := nt.CertPool()
	if err != nil {
		return Target{}, nt.Source, err
	}
	return Target{Host: nt.Host, Addr: n.LPSAddr, Roots: roots}, nt.Source, nil
}

// Token is the attested document from the metadata service, which the
// node's calls carry as their credentials.
func (n Node) Token(ctx context.Context) (string, error) {
	url := n.IMDSURL
	if url == "" {
		url = imds.DefaultURL
	}
	return imds.NewClient(url).AttestedSignature(ctx)
}
