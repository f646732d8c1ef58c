package main

import (
	"context"
	"fmt"
	"strings"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/downloadhotfix"
	"nodehotfix/internal/node/layout"
)

func runDownloadHotfix(ctx context.Context, args []string, e *env) int {
	var nf nodeFlags
	fs := newFlagSet("download-hotfix", e)
	// The launcher passes the network overrides to both hotfix commands;
	// download-hotfix talks to neither service but accepts them.
	nf.register(fs, true)
	keys := fs.String("release-keys", "", "trusted release public keys `file` (default <root>/opt/azure/containers/aks-node-controller-release-keys.pub)")
	artifactCA := fs.String("artifact-ca", "", "extra CA bundle `file` (PEM) trusted for artifact downloads, besides the system roots")
	budget := fs.Duration("budget", downloadhotfix.DefaultBudget, "overall time budget")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "unexpected download-hotfix arguments: %s\n", strings.Join(fs.Args(), " "))
		return exitError
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	var caPEM []byte
	if *artifactCA != "" {
		var err error
		if caPEM, err = capfile.Read(*artifactCA, 1<<20); err != nil {
			fmt.Fprintf(e.stderr, "aks-node-controller: --artifact-ca: %v\n", err)
			return exitUsage
		}
	}
	res := downloadhotfix.Run(ctx, downloadhotfix.Config{
		Root:          root,
		Version:       version,
		ReleaseKeys:   *keys,
		ArtifactCAPEM: caPEM,
		Budget:        *budget,
		PackageOutput: e.stderr,
		Log:           log,
	})
	fmt.Fprintln(e.stdout, res.Message())
	return res.ExitCode()
}
