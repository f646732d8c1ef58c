package lpsclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

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
	// Log, when set, gets the lines of how the target was found (the
	// reference's nbc-cmd.sh fallback lines, which its e2e greps).
	Log *slog.Logger
	// Dialing, when set, is called with the target just before Open
	// dials it (check-hotfix logs the reference's dial line there).
	Dialing func(Target)
}

// Open is how every node call to the service begins. It reads the target
// from the node config (or, failing that, nbc-cmd.sh), with its cluster
// CA as the only trust anchor: local files. It starts connecting to it at
// once, asks the metadata service for the attested document while the
// handshake runs, and then redials if that early attempt failed
// (Conn.Fresh), so the first call gets an attempt of its own. Nothing but
// the handshake reaches the service before a call: a node that gets no
// document closes the connection having sent no credentials.
//
// Nothing reached the service when it fails, so a fail-open caller may
// fall back: its errors are the target's and the metadata service's,
// never *Error, but for Dial's own (a client it could not create).
func (n Node) Open(ctx context.Context) (*Conn, error) {
	t, err := n.target()
	if err != nil {
		return nil, err
	}
	if n.Dialing != nil {
		n.Dialing(t)
	}
	c, err := Dial(t, "")
	if err != nil {
		return nil, err
	}
	url := n.IMDSURL
	if url == "" {
		url = imds.DefaultURL
	}
	token, err := imds.NewClient(url).AttestedSignature(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	// No call has been made on c yet, so nothing reads the token while
	// it is set.
	c.token = token
	return c.Fresh()
}

// target is where the node's calls go.
func (n Node) target() (Target, error) {
	nt, err := nodeconfig.ResolveTarget(n.Root.NodeConfig(), n.Root.NBCCmd())
	if err != nil {
		return Target{}, fmt.Errorf("resolve live-patching target: %w", err)
	}
	roots, err := nt.CertPool()
	if nt.Source == nodeconfig.SourceNBCCmd && n.Log != nil {
		if _, serr := os.Stat(n.Root.NodeConfig()); errors.Is(serr, fs.ErrNotExist) {
			n.Log.Info("node config not found, trying nbc-cmd.sh fallback", "path", n.Root.NodeConfig())
		} else {
			n.Log.Info("node config lacks the API server name, trying nbc-cmd.sh fallback", "path", n.Root.NodeConfig())
		}
		if err == nil {
			n.Log.Info("loaded LPS target from nbc-cmd.sh fallback", "host", nt.Host)
		}
	}
	if err != nil {
		return Target{}, err
	}
	return Target{Host: nt.Host, Addr: n.LPSAddr, Roots: roots}, nil
}
