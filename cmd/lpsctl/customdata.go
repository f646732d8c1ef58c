package main

import (
	"context"
	"fmt"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/customdata"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/nodeconfig"
)

type customDataOpts struct {
	config, pointer, nbcCmd, root string
}

func runCustomData(_ context.Context, args []string, e *env) error {
	var o customDataOpts
	fs := newFlagSet("customdata", "--config FILE [--pointer FILE] [--nbc-cmd FILE]", e)
	fs.StringVar(&o.config, "config", "", "node config `file` (aks-node-controller-config.json, protojson)")
	fs.StringVar(&o.pointer, "pointer", "", "hotfix pointer `file` to stage at boot (optional)")
	fs.StringVar(&o.nbcCmd, "nbc-cmd", "", "bootstrap command line `file` (nbc-cmd.sh, optional)")
	fs.StringVar(&o.root, "root", "/", "`directory` the node's paths resolve under (demos and tests only)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := required([2]string{"config", o.config}); err != nil {
		return err
	}
	// Unlike the node, which carries on with a partial config, a
	// config that does not parse must not be rendered.
	cfg, err := nodeconfig.Load(o.config)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	in := customdata.Input{Config: cfg, Root: o.root}
	if o.pointer != "" {
		if in.Pointer, err = capfile.Read(o.pointer, hotfix.MaxPointerSize); err != nil {
			return fmt.Errorf("--pointer: %w", err)
		}
		if _, err := hotfix.ParsePointer(in.Pointer); err != nil {
			return fmt.Errorf("--pointer %s: %w", o.pointer, err)
		}
	}
	if o.nbcCmd != "" {
		b, err := capfile.Read(o.nbcCmd, nodeconfig.MaxConfigSize)
		if err != nil {
			return fmt.Errorf("--nbc-cmd: %w", err)
		}
		in.NBCCmd = string(b)
	}
	out, err := customdata.Render(in)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(out)
	return err
}
