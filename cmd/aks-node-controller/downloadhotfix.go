package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"nodehotfix/internal/node/downloadhotfix"
	"nodehotfix/internal/node/layout"
)

// downloadFlags are download-hotfix's own flags; launch takes them too.
type downloadFlags struct {
	keys       string
	artifactCA string
	budget     time.Duration
}

// register adds the flags; budgetFlag names the budget's ("budget" for
// download-hotfix, "download-budget" for launch).
func (f *downloadFlags) register(fs *flag.FlagSet, budgetFlag string) {
	fs.StringVar(&f.keys, "release-keys", "", "trusted release public keys `file` (default <root>/opt/azure/containers/aks-node-controller-release-keys.pub)")
	fs.StringVar(&f.artifactCA, "artifact-ca", "", "extra CA bundle `file` (PEM) trusted for artifact downloads, besides the system roots")
	fs.DurationVar(&f.budget, budgetFlag, downloadhotfix.DefaultBudget, "download-hotfix's overall time budget")
}

func runDownloadHotfix(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	var df downloadFlags
	fs := newFlagSet("download-hotfix", e)
	// The launcher passes the network overrides to both hotfix commands;
	// download-hotfix talks to neither service but accepts them.
	nf.register(fs, true)
	df.register(fs, "budget")
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
	caPEM, err := downloadhotfix.ReadArtifactCA(df.artifactCA)
	if err != nil {
		fmt.Fprintf(e.stderr, "aks-node-controller: --artifact-ca: %v\n", err)
		return exitUsage
	}
	res := downloadhotfix.Task(df.budget).Run(ctx, recorder(root, log), func(ctx context.Context) downloadhotfix.Result {
		return downloadhotfix.Run(ctx, downloadhotfix.Config{
			Root: root, Version: version, ReleaseKeys: df.keys, ArtifactCAPEM: caPEM, PackageOutput: e.stderr, Log: log,
		})
	})
	fmt.Fprintln(e.stdout, res.Message())
	return res.ExitCode()
}
