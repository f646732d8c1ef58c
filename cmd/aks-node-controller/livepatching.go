package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/component"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
)

// defaultLivePatchingTimeout bounds the probe: metadata service, connect,
// handshake and call.
const defaultLivePatchingTimeout = 30 * time.Second

// runLivePatching prints the configuration the live-patching service serves
// this node for one component, as the reference's `live-patching
// <component>` does: the raw config on stdout with no trailing newline,
// nothing for an empty one. It is an operator's probe, not fail-open: every
// failure, NotFound and the other codes check-hotfix treats as benign
// included, exits 1 with the reason on stderr.
func runLivePatching(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("live-patching", e)
	nf.register(fs, true)
	asJSON := fs.Bool("json", false, "print the whole response as JSON (componentName, config), with a newline")
	timeout := fs.Duration("timeout", defaultLivePatchingTimeout, "give up after this long, metadata service included")
	keysPath := fs.String("release-keys", "", "trusted release public keys `file` a signed component config must verify against (default <root>/opt/azure/containers/aks-node-controller-release-keys.pub)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: aks-node-controller live-patching [flags] <component>   (e.g. aksNodeController, localDNS)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	// Flags may follow the component too (live-patching localDNS --json):
	// parse what follows it, which leaves only extra arguments.
	name, rest := fs.Arg(0), []string{}
	if fs.NArg() > 1 {
		rest = fs.Args()[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return exitUsage
	}
	if name == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintln(e.stderr, "aks-node-controller live-patching: --timeout must be positive")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	root := layout.Root(nf.root)
	c, err := lpsclient.Node{Root: root, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr}.Open(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller live-patching: %v\n", err)
		return exitError
	}
	defer c.Close()
	req := lpsclient.Request{Component: name}
	// Asked as check-hotfix asks, for this image's base, so the agent's
	// component answers what this node would be served.
	if v, err := hotfix.ParseVersion(version); err == nil {
		req.Base = v.Base()
	}
	resp, err := c.FetchResponse(ctx, req)
	if err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller live-patching %s: %v\n", name, err)
		return exitError
	}
	// Another component's config may carry its signature (our lpsd signs
	// them): a node with release keys verifies it, and prints nothing of
	// one that fails. The agent's own releases are verified where used.
	if name != lpsclient.Component {
		if err := verifyComponent(root, *keysPath, name, resp.GetConfig()); err != nil {
			fmt.Fprintf(e.stderr, "aks-node-controller live-patching %s: %v\n", name, err)
			return exitError
		}
	}
	if *asJSON {
		// encoding/json, not protojson, whose spacing is deliberately
		// unstable: scripts compare this output.
		out, err := json.Marshal(struct {
			ComponentName string `json:"componentName"`
			Config        string `json:"config"`
		}{resp.GetComponentName(), resp.GetConfig()})
		if err == nil {
			_, err = fmt.Fprintf(e.stdout, "%s\n", out)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "aks-node-controller live-patching: write the response: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if _, err := io.WriteString(e.stdout, resp.GetConfig()); err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller live-patching: write the config: %v\n", err)
		return exitError
	}
	return exitOK
}

// verifyComponent checks the signature a served component config carries,
// when the node has release keys (keysPath, or the image's under root).
func verifyComponent(root layout.Root, keysPath, name, served string) error {
	if keysPath == "" {
		keysPath = root.ReleaseKeys()
	}
	keys, err := component.LoadKeys(keysPath)
	if err != nil {
		return err
	}
	_, err = component.Open(served, name, keys, time.Now(), false)
	return err
}
