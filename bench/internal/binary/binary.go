// Package binary builds the module's commands for the benchmarks, the way
// the Makefile builds them (CGO off, -trimpath).
package binary

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"nodehotfix/test/harness"
)

// Build compiles the package pkg (e.g. "./bench/floor/checkfloor") to out,
// passing ldflags (may be empty) to the linker.
func Build(ctx context.Context, pkg, out, ldflags string) error {
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
