// Package e2e runs nodehotfix end to end: the real binaries as processes
// (imds-emulator, lpsd, lpsctl, the agent and the launcher) on loopback
// sockets, one hermetic node root per scenario.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nodehotfix/test/harness"
)

const (
	bakedVersion = "202604.01.0"
	hotfix1      = "202604.01.1"
	hotfix2      = "202604.01.2"
	// crashingHotfix verifies and stages, then panics in provision.
	crashingHotfix = "202604.01.3"
)

// env holds what TestMain builds once for every scenario.
var env struct {
	bins     harness.Binaries
	baked    string // baked agent binary
	artifact string // directory of hotfix agents, one file per version
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "nodehotfix-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := build(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e build:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func build(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bins, err := harness.Build(ctx, dir)
	if err != nil {
		return err
	}
	env.bins = bins
	env.baked = filepath.Join(dir, "agent-"+bakedVersion)
	env.artifact = filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(env.artifact, 0o755); err != nil {
		return err
	}
	if err := harness.BuildAgent(ctx, env.baked, bakedVersion); err != nil {
		return err
	}
	for _, v := range []string{hotfix1, hotfix2} {
		if err := harness.BuildAgent(ctx, filepath.Join(env.artifact, "aks-node-controller-"+v), v); err != nil {
			return err
		}
	}
	return harness.GoBuild(ctx, "./test/e2e/testdata/crashagent", filepath.Join(env.artifact, "aks-node-controller-"+crashingHotfix), "-X main.version="+crashingHotfix)
}

func integration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: runs real processes")
	}
}
