package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/localdns"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/release"
)

// Budgets of the localDNS commands. The fetch runs during bootstrap, so it
// is bounded as check-hotfix is: metadata service, connect, handshake and
// call together. Reading a config from stdin waits at most readConfigTimeout
// for the writer.
const (
	defaultFetchLocalDNSTimeout = 10 * time.Second
	applyLocalDNSBudget         = 30 * time.Second
	readConfigTimeout           = 10 * time.Second
)

// runFetchLocalDNSConfig is the reference's `fetch-localdns-config
// --output PATH`: fetch the localDNS config this node is served, stage the
// Corefile it selects, print the outcome (applied, alreadyCurrent,
// notFound, noCorefileData, failed) as the last line of stdout, and exit 0
// whatever happened: its bootstrap caller is fail-open and reads the line.
func runFetchLocalDNSConfig(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("fetch-localdns-config", e)
	nf.register(fs, true)
	output := fs.String("output", "", "where to write the Corefile (default <root>/opt/azure/containers/localdns/livepatched.localdns.corefile); its version goes to PATH.version")
	keys := fs.String("release-keys", "", "trusted release public keys `file` (default <root>/opt/azure/containers/aks-node-controller-release-keys.pub); with keys, only a signed config is applied")
	timeout := fs.Duration("timeout", defaultFetchLocalDNSTimeout, "give up after this long, metadata service included")
	if err := fs.Parse(args); err != nil {
		// Fail-open even on a bad flag: the outcome line still comes.
		fmt.Fprintln(e.stdout, localdns.Failed)
		return exitOK
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "fetch-localdns-config", fs.Args())
	budget := *timeout
	if budget <= 0 {
		budget = defaultFetchLocalDNSTimeout
	}
	cfg := localdns.Config{Root: root, Output: *output, ReleaseKeys: *keys}
	res := localdns.FetchTask(budget).Run(ctx, recorder(root, log), func(ctx context.Context) localdns.Result {
		return localdns.Fetch(ctx, cfg, lpsclient.Node{Root: root, IMDSURL: nf.imdsURL, LPSAddr: nf.lpsAddr})
	})
	fmt.Fprintln(e.stdout, res.Outcome)
	return exitOK
}

// runApplyLocalDNSConfig is the reference's `apply-localdns-config`: apply
// a localDNS config given in a file (--config) or on stdin (- or no
// --config) as fetch-localdns-config applies a served one, and print the
// outcome line. Exit 1 when the outcome is failed, else 0.
func runApplyLocalDNSConfig(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("apply-localdns-config", e)
	nf.register(fs, false)
	config := fs.String("config", "-", "the localDNS config `file` (- for stdin)")
	output := fs.String("output", "", "where to write the Corefile (default <root>/opt/azure/containers/localdns/livepatched.localdns.corefile)")
	keys := fs.String("release-keys", "", "trusted release public keys `file` (default under --root); with keys, only a signed config is applied")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	root := layout.Root(nf.root)
	log, closeLog := logger(root, e)
	defer closeLog()
	warnExtraArgs(log, "apply-localdns-config", fs.Args())
	cfg := localdns.Config{Root: root, Output: *output, ReleaseKeys: *keys}
	res := localdns.ApplyTask(applyLocalDNSBudget).Run(ctx, recorder(root, log), func(ctx context.Context) localdns.Result {
		text, err := readConfig(ctx, *config, os.Stdin)
		if err != nil {
			return localdns.Result{Outcome: localdns.Failed, Err: err}
		}
		return localdns.Apply(cfg, text)
	})
	fmt.Fprintln(e.stdout, res.Outcome)
	if res.Failed() {
		return exitError
	}
	return exitOK
}

// maxConfigInput caps a config read from a file or stdin: a served one is
// never larger.
const maxConfigInput = release.MaxComponentServedSize

// readConfig reads the config at path, or from stdin for "-", at most
// maxConfigInput bytes and, from stdin, for at most readConfigTimeout.
func readConfig(ctx context.Context, path string, stdin io.Reader) (string, error) {
	if path != "-" {
		data, err := capfile.Read(path, maxConfigInput)
		if err != nil {
			return "", fmt.Errorf("read localDNS config: %w", err)
		}
		return string(data), nil
	}
	ctx, cancel := context.WithTimeout(ctx, readConfigTimeout)
	defer cancel()
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(stdin, maxConfigInput+1))
		done <- read{data, err}
	}()
	select {
	case <-ctx.Done():
		return "", fmt.Errorf("read localDNS config from stdin: %w", context.Cause(ctx))
	case r := <-done:
		switch {
		case r.err != nil:
			return "", fmt.Errorf("read localDNS config from stdin: %w", r.err)
		case len(r.data) > maxConfigInput:
			return "", errors.New("read localDNS config from stdin: more than the largest config served")
		}
		return string(r.data), nil
	}
}
