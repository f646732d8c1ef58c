// Package pkgmgr installs an exact agent version with the node's package
// manager.
package pkgmgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"nodehotfix/internal/hotfix"
)

// packageName is the agent's package in the Microsoft repositories.
const packageName = "aks-node-controller"

// Config holds the optional settings of Install; the zero Config works.
type Config struct {
	// Root is the directory under which os-release, the apt source files
	// and the installed binary are found. Empty: "/". The commands
	// themselves act on the running system.
	Root string
	// Backoff is the base wait between attempts of a command; it doubles
	// per attempt (at most 30 s) and is jittered. Zero: 3 s.
	Backoff time.Duration
}

// Install installs exactly version of the agent with the node's package
// manager (see Choose) and returns the path of the installed binary,
// <root>/usr/bin/aks-node-controller. Each command is tried up to 5 times,
// each try limited to 60 s, all within ctx; the caller sets the overall
// deadline. A malformed version wraps hotfix.ErrMalformedVersion and an
// unsupported OS ErrUnsupportedOS, both before any command runs; a failed
// command is a *proc.CmdError, which keeps the package manager's exit code.
func Install(ctx context.Context, r Runner, cfg Config, version string) (string, error) {
	// Only a parsed version reaches argv, so the pin cannot carry an option,
	// a glob or a second package.
	v, err := hotfix.ParseVersion(version)
	if err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	osr, err := ReadOSRelease(root)
	if err != nil {
		return "", fmt.Errorf("install agent %s: %w", v, err)
	}
	_, lookErr := exec.LookPath(string(DNF))
	mgr, err := Choose(osr, lookErr == nil)
	if err != nil {
		return "", fmt.Errorf("install agent %s: %w", v, err)
	}
	cmds, err := commands(root, mgr, v)
	if err != nil {
		return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
	}
	backoff := cfg.Backoff
	if backoff == 0 {
		backoff = defaultBackoff
	}
	for _, argv := range cmds {
		err := retry(ctx, backoff, func(ctx context.Context) error {
			return r.Run(ctx, argv[0], argv[1:]...)
		})
		if err != nil {
			return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
		}
	}
	bin := filepath.Join(root, "usr/bin", packageName)
	fi, err := os.Lstat(bin)
	if err != nil {
		return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("install agent %s with %s: %s is not a regular file", v, mgr, bin)
	}
	return bin, nil
}

// commands returns the argv of each step, in order.
func commands(root string, mgr Manager, v hotfix.Version) ([][]string, error) {
	switch mgr {
	case APT:
		src, err := aptSource(root)
		if err != nil {
			return nil, err
		}
		apt := func(args ...string) []string {
			return append([]string{"env", "DEBIAN_FRONTEND=noninteractive"}, args...)
		}
		return [][]string{
			// Finish any install an earlier, interrupted run left behind;
			// apt refuses to work until it is done.
			apt("dpkg", "--configure", "-a", "--force-confdef", "--force-confold"),
			// Refresh only the Microsoft repository: faster, and a broken
			// third-party source cannot fail the hotfix.
			apt("apt-get", "update", "-o", "Dpkg::Options::=--force-confold",
				"-o", "Dir::Etc::sourcelist="+src, "-o", "Dir::Etc::sourceparts=-"),
			// An exact pin: the reference's "=<v>*" also matched 01.30 for 01.3.
			apt("apt-get", "install", "-y", "--allow-downgrades",
				"-o", "Dpkg::Options::=--force-confold", packageName+"="+v.String()),
		}, nil
	case DNF, TDNF:
		return [][]string{
			{string(mgr), "install", "-y", "--refresh", "--allowerasing", packageName + "-" + v.String()},
		}, nil
	}
	return nil, fmt.Errorf("%w: package manager %q", ErrUnsupportedOS, mgr)
}

// aptSource returns the Microsoft repository's source file, preferring the
// one-line format to deb822.
func aptSource(root string) (string, error) {
	dir := filepath.Join(root, "etc/apt/sources.list.d")
	for _, name := range []string{"microsoft-prod.list", "microsoft-prod.sources"} {
		p := filepath.Join(dir, name)
		_, err := os.Stat(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("find apt source: %w", err)
		}
	}
	return "", fmt.Errorf("find apt source: no microsoft-prod.list or microsoft-prod.sources in %s", dir)
}
