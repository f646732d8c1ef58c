// Package pkgrepo fetches the agent straight from a package repository the
// node already trusts, verified by that repository's own signatures and
// without the package manager, which takes minutes on a busy node. It is
// download-hotfix's repository route:
//
//   - apt (Apt): the repository's InRelease, checked by OpenPGP against
//     the keyring its sources entry names, vouches for its Packages index
//     by SHA-256, and the index vouches for the .deb the same way; the
//     agent is taken from the package's data archive.
//   - rpm (RPM): the repository's metadata finds the package and its
//     SHA-256; the package's own signature is checked by rpmkeys against
//     the keys in the node's rpm database; the agent is taken from its
//     payload.
//
// Every failure is one of two kinds. An IntegrityError (a bad or unknown
// signature, an expired Release, a digest or size that differs, a
// malformed index or package, a package without the agent) means the
// repository or the path to it cannot be trusted: the caller must not fall
// back to another route for the same bytes. Anything else (unreachable, a
// timeout, a missing file, no such package, no usable source) is
// operational: the package manager may still succeed.
package pkgrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/internal/release"
)

// AgentMember is where the aks-node-controller package installs the agent,
// so where it sits in a package's payload.
const AgentMember = "usr/bin/aks-node-controller"

// MaxPackage caps a package as downloaded: the agent compressed, with room.
const MaxPackage = release.MaxArtifactSize

// Source is a repository the agent can be fetched from.
type Source interface {
	// Fetch finds req's package, downloads it into a temporary file
	// (removed before Fetch returns), verifies it and copies req.Member
	// out of it into dst.
	Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error)
	// String names the repository for logs.
	String() string
}

// Request is what Fetch gets from a repository.
type Request struct {
	// Name and Version select the package: the one whose upstream version
	// is exactly Version (pkgmgr.Pick).
	Name    string
	Version hotfix.Version
	// Member is the file taken out of it (AgentMember), at most Max bytes.
	Member string
	Max    int64
	// TempDir holds the downloaded package while Fetch runs, in a file
	// named by the os.CreateTemp pattern TempPattern.
	TempDir, TempPattern string
	// Now is checked against signatures' and metadata's validity.
	Now time.Time
}

// Package is a package a repository's metadata lists.
type Package struct {
	Name, Version string
	// URL is where the package is; SHA256 and Size are what it must be.
	URL    string
	SHA256 string
	Size   int64
}

// IntegrityError is a repository that contradicts its own signatures.
type IntegrityError struct{ Err error }

func (e *IntegrityError) Error() string { return "repository integrity: " + e.Err.Error() }
func (e *IntegrityError) Unwrap() error { return e.Err }

func integrity(format string, a ...any) error {
	return &IntegrityError{Err: fmt.Errorf(format, a...)}
}

// get fetches a file of unknown size, at most max bytes.
func get(ctx context.Context, c *fetch.Client, url string, max int64) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.Get(ctx, url, max, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// download fetches p into a new temporary file named by req, checked
// against p's SHA-256 and size; a mismatch is an IntegrityError. The
// caller closes and removes the file (discard).
func download(ctx context.Context, c *fetch.Client, p Package, req Request) (*os.File, error) {
	if p.Size <= 0 || p.Size > MaxPackage {
		return nil, integrity("%s %s: %d bytes, want 1 to %d", p.Name, p.Version, p.Size, MaxPackage)
	}
	tmp, err := os.CreateTemp(req.TempDir, req.TempPattern)
	if err != nil {
		return nil, err
	}
	err = c.Download(ctx, p.URL, fetch.Want{SHA256: p.SHA256, Size: p.Size}, tmp)
	var ve *fetch.VerifyError
	switch {
	case errors.As(err, &ve):
		err = &IntegrityError{Err: fmt.Errorf("%s: %w", path.Base(p.URL), err)}
	case err != nil:
		err = fmt.Errorf("%s: %w", path.Base(p.URL), err)
	}
	if err != nil {
		discard(tmp)
		return nil, err
	}
	return tmp, nil
}

// discard closes and removes a file download made.
func discard(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}

// FromNode returns the repository that mgr, the node's package manager,
// installs the agent from, read under root: for apt the Microsoft source
// (FromSources), for dnf and tdnf every enabled repository that checks
// signatures (FromRepoFiles). An error is operational: the package manager
// may still install.
func FromNode(root string, mgr pkgmgr.Manager) (Source, error) {
	switch mgr {
	case pkgmgr.APT:
		return FromSources(root, Arch())
	case pkgmgr.DNF, pkgmgr.TDNF:
		return FromRepoFiles(root, RPMArch())
	}
	return nil, fmt.Errorf("no repository route for %s", mgr)
}
