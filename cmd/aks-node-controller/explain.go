package main

import (
	"context"
	"encoding/json"
	"fmt"

	"nodehotfix/internal/node/explain"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/quote"
)

func runExplain(ctx context.Context, args []string, e *stdio) int {
	var nf nodeFlags
	fs := newFlagSet("explain", e)
	nf.register(fs, false)
	keys := fs.String("release-keys", "", "trusted release public keys `file` (default under --root)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	r := explain.Run(ctx, explain.Config{Root: layout.Root(nf.root), Version: version, ReleaseKeys: *keys})
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "baked agent %s\n", r.Version)
	for _, s := range r.Steps {
		mark := "ok  "
		if !s.OK {
			mark = "NO  "
		}
		// Details carry strings from the service and the staged binary.
		fmt.Fprintf(e.stdout, "  %s %-13s %s\n", mark, s.Step, quote.Text(s.Detail))
	}
	fmt.Fprintf(e.stdout, "launch would provision with the %s agent (%s)\n", r.Binary, r.Reason)
	return exitOK
}
