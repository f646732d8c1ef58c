package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"nodehotfix/internal/hotfix"
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
func runLivePatching(ctx context.Context, args []string, e *env) int {
	var nf nodeFlags
	fs := newFlagSet("live-patching", e)
	nf.register(fs, true)
	asJSON := fs.Bool("json", false, "print the whole response as JSON (componentName, config), with a newline")
	timeout := fs.Duration("timeout", defaultLivePatchingTimeout, "give up after this long, metadata service included")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: aks-node-controller live-patching [flags] <component>   (e.g. aksNodeController, localDNS)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	// Flags may follow the component too (live-patching localDNS --json):
	// parse what follows it, which leaves only extra arguments.
	component, rest := fs.Arg(0), []string{}
	if fs.NArg() > 1 {
		rest = fs.Args()[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return exitUsage
	}
	if component == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintln(e.stderr, "aks-node-controller live-patching: --timeout must be positive")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	t, token, _, err := lpsclient.Node{Root: layout.Root(nf.root), IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr}.Resolve(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller live-patching: %v\n", err)
		return exitError
	}
	t.Component = component
	// Asked as check-hotfix asks, for this image's base, so the agent's
	// component answers what this node would be served.
	if v, err := hotfix.ParseVersion(version); err == nil {
		t.Base = v.Base()
	}
	resp, err := lpsclient.FetchResponse(ctx, t, token)
	if err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller live-patching %s: %v\n", t.Component, err)
		return exitError
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
