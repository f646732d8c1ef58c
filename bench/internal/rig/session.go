package rig

import (
	"context"
	"fmt"
	"io"
	"os"

	"nodehotfix/bench/internal/procstat"
)

// Session runs one benchmark tool's body in a fresh work directory (kept
// when keep is set), reports how busy the machine was during it, and
// returns the tool's exit code.
func Session(ctx context.Context, name string, keep bool, stdout, stderr io.Writer, body func(ctx context.Context, dir string) error) int {
	dir, err := os.MkdirTemp("", "bench-"+name+"-")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if keep {
		fmt.Fprintln(stdout, "work directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	meter := procstat.NewMeter()
	if err := body(ctx, dir); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stdout, "\nduring the run: %s\n", meter.Stop())
	return 0
}
