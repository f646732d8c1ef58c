package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/customdata"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/nodeconfig"
)

type customDataOpts struct {
	config, pointer, nbcCmd, root string
}

func newCustomDataCmd(e *env) *cobra.Command {
	var o customDataOpts
	cmd := &cobra.Command{
		Use:   "customdata --config FILE [--pointer FILE] [--nbc-cmd FILE]",
		Short: "render a node's custom data",
		Long: `customdata prints a node's cloud-init custom data (a boothook script) to
stdout: the node config (protojson aks-node-controller-config.json; it must
parse), an optional hotfix pointer to stage at boot, and an optional
nbc-cmd.sh command line.`,
		Example: "  lpsctl customdata --config aks-node-controller-config.json --pointer pointer.json > custom-data.sh",
		GroupID: groupOffline,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "config"); err != nil {
				return err
			}
			return customData(o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.config, "config", "", "node config `file` (aks-node-controller-config.json, protojson)")
	fs.StringVar(&o.pointer, "pointer", "", "hotfix pointer `file` to stage at boot (optional)")
	fs.StringVar(&o.nbcCmd, "nbc-cmd", "", "bootstrap command line `file` (nbc-cmd.sh, optional)")
	fs.StringVar(&o.root, "root", "/", "`directory` the node's paths resolve under (demos and tests only)")
	return cmd
}

func customData(o customDataOpts, e *env) error {
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
