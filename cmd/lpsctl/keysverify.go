package main

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/release"
)

type keysVerifyOpts struct {
	root   string
	output outputFlags
}

func newKeysVerifyCmd(e *env) *cobra.Command {
	var o keysVerifyOpts
	cmd := &cobra.Command{
		Use:   "verify --root FILE [LINK...]",
		Short: "walk a key-set chain from a baked key set, as a node does",
		Long: `verify walks the key-set envelopes LINK..., in order, from the key set
file --root (what the images are baked with), as a node does: each link
must be the next version, signed by the threshold of the version before it
and by its own threshold of its own keys; only the last link's expiry is
checked against now, and at most 16 links are walked. It prints the
resulting key set, or fails (exit 1) naming the first link that does not
verify and why.`,
		Example: "  lpsctl keys verify --root release-keys.pub keyset-2.json keyset-3.json",
		Args:    cobra.ArbitraryArgs,
		PreRunE: o.output.preRun(),
		RunE: func(cmd *cobra.Command, links []string) error {
			if err := required(cmd, "root"); err != nil {
				return err
			}
			return keysVerify(o, links, e)
		},
	}
	cmd.Flags().StringVar(&o.root, "root", "", "key set `file` the chain starts from")
	o.output.register(cmd.Flags())
	return cmd
}

func keysVerify(o keysVerifyOpts, paths []string, e *env) error {
	root, err := readKeySetFile("--root", o.root)
	if err != nil {
		return err
	}
	if len(paths) > release.MaxChain {
		return usagef("%d links: a node walks at most %d", len(paths), release.MaxChain)
	}
	var links [][]byte
	for _, p := range paths {
		data, err := capfile.Read(p, release.MaxKeySetEnvelopeSize+1024)
		if err != nil {
			return fmt.Errorf("link: %w", err)
		}
		links = append(links, bytes.TrimSpace(data))
	}
	ks, err := root.Walk(links, time.Now())
	if err != nil {
		var ce *release.ChainError
		if errors.As(err, &ce) && ce.Link < len(paths) {
			return fmt.Errorf("%s: %w", paths[ce.Link], err)
		}
		return err
	}
	// A policy a node cannot build makes it refuse every release.
	if err := checkLogPolicy(e.stderr, ks.Log()); err != nil {
		return err
	}
	return printKeySet(e.stdout, &o.output, toKeySetJSON(ks, ""), nil)
}
