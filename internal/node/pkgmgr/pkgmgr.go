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
	"nodehotfix/internal/node/osrelease"
)

// PackageName is the agent's package in the Microsoft repositories.
const PackageName = "aks-node-controller"

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
// <root>/usr/bin/aks-node-controller.
//
// Real packages carry a distribution revision (202608.26.2-ubuntu24.04u1,
// 202608.26.2-1.azl3), so Install asks the package manager which versions
// its repositories have and installs the one whose upstream version is
// exactly version, pinned in full: ErrNoPackage when none is, and
// ErrAmbiguousPackage when several are. Each command is tried up to 5 times,
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
	mgr, err := Detect(root)
	if err != nil {
		return "", fmt.Errorf("install agent %s: %w", v, err)
	}
	backoff := cfg.Backoff
	if backoff == 0 {
		backoff = defaultBackoff
	}
	run := func(argv []string) error {
		return retry(ctx, backoff, func(ctx context.Context) error { return r.Run(ctx, argv[0], argv[1:]...) })
	}
	list := func(argv []string) ([]byte, error) {
		var out []byte
		err := retry(ctx, backoff, func(ctx context.Context) error {
			var err error
			out, err = r.List(ctx, argv[0], argv[1:]...)
			return err
		})
		return out, err
	}
	p, err := plan(root, mgr)
	if err != nil {
		return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
	}
	for _, argv := range p.prepare {
		if err := run(argv); err != nil {
			return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
		}
	}
	listing, err := list(p.list)
	if err != nil {
		return "", fmt.Errorf("install agent %s with %s: list versions: %w", v, mgr, err)
	}
	full, err := pick(listing, p.parse, v)
	if err != nil {
		return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
	}
	if err := run(p.install(full)); err != nil {
		return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
	}
	bin := filepath.Join(root, "usr/bin", PackageName)
	fi, err := os.Lstat(bin)
	if err != nil {
		return "", fmt.Errorf("install agent %s with %s: %w", v, mgr, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("install agent %s with %s: %s is not a regular file", v, mgr, bin)
	}
	return bin, nil
}

// steps is how one package manager installs an exact version: commands to
// run first, the command that lists the versions the repositories have, a
// parser for its output, and the install of one full version.
type steps struct {
	prepare [][]string
	list    []string
	parse   func(listing []byte) []string
	install func(full string) []string
}

// plan returns mgr's steps.
func plan(root string, mgr Manager) (steps, error) {
	switch mgr {
	case APT:
		src, err := AptSource(root)
		if err != nil {
			return steps{}, err
		}
		apt := func(args ...string) []string {
			return append([]string{"env", "DEBIAN_FRONTEND=noninteractive"}, args...)
		}
		return steps{
			prepare: [][]string{
				// Finish any install an earlier, interrupted run left
				// behind; apt refuses to work until it is done.
				apt("dpkg", "--configure", "-a", "--force-confdef", "--force-confold"),
				// Refresh only the Microsoft repository: faster, and a
				// broken third-party source cannot fail the hotfix.
				apt("apt-get", "update", "-o", "Dpkg::Options::=--force-confold",
					"-o", "Dir::Etc::sourcelist="+src, "-o", "Dir::Etc::sourceparts=-"),
			},
			list:  apt("apt-cache", "madison", PackageName),
			parse: debVersions,
			// The full version, pinned: the reference's "=<v>*" also
			// matched 01.30 for 01.3.
			install: func(full string) []string {
				return apt("apt-get", "install", "-y", "--allow-downgrades",
					"-o", "Dpkg::Options::=--force-confold", PackageName+"="+full)
			},
		}, nil
	case DNF, TDNF:
		m := string(mgr)
		return steps{
			list:  []string{m, "list", "--refresh", "--showduplicates", PackageName},
			parse: rpmVersions,
			install: func(full string) []string {
				return []string{m, "install", "-y", "--allowerasing", PackageName + "-" + full}
			},
		}, nil
	}
	return steps{}, fmt.Errorf("%w: package manager %q", ErrUnsupportedOS, mgr)
}

// AptSource returns the Microsoft repository's source file, preferring the
// one-line format to deb822.
func AptSource(root string) (string, error) {
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

// Detect returns the package manager of the node under root: Choose on
// its os-release, with dnf if it is on PATH.
func Detect(root string) (Manager, error) {
	osr, err := osrelease.Read(root)
	if err != nil {
		return "", err
	}
	_, lookErr := exec.LookPath(string(DNF))
	return Choose(osr, lookErr == nil)
}

// ErrUnsupportedOS is returned (wrapped) when the node's OS has no package
// manager this package installs with.
var ErrUnsupportedOS = errors.New("unsupported OS")

// Manager is a package manager command.
type Manager string

// Package managers Install can drive.
const (
	APT  Manager = "apt-get"
	DNF  Manager = "dnf"
	TDNF Manager = "tdnf"
)

// Choose returns the package manager for osr: apt-get on Ubuntu; on Azure
// Linux and Mariner, dnf if hasDNF (it is on PATH) and tdnf otherwise.
// Azure Container Linux, by ID or by the azurelinux VARIANT_ID, is
// immutable and, like every other OS, gets an error wrapping
// ErrUnsupportedOS.
func Choose(osr osrelease.OSRelease, hasDNF bool) (Manager, error) {
	switch {
	case osr.VariantID == "azurecontainerlinux":
		return "", fmt.Errorf("%w: %s variant %s", ErrUnsupportedOS, osr.ID, osr.VariantID)
	case osr.ID == "ubuntu":
		return APT, nil
	case osr.ID == "azurelinux" || osr.ID == "mariner":
		if hasDNF {
			return DNF, nil
		}
		return TDNF, nil
	}
	return "", fmt.Errorf("%w: %s", ErrUnsupportedOS, osr.ID)
}
