package pkgrepo

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"pault.ag/go/debian/deb"

	"nodehotfix/internal/node/fetch"
)

// Extract copies member (a path such as AgentMember) out of the data
// archive (xz, zstd, gzip or none) of the verified .deb in pkg into dst,
// at most max bytes. The package's digest was checked before, so a package
// that does not hold member as a regular file of at most max bytes, or
// does not parse, is an IntegrityError: the repository signed something
// that is not the agent.
func Extract(pkg io.ReaderAt, member string, max int64, dst io.Writer) error {
	d, err := deb.Load(pkg, "package.deb")
	if err != nil {
		return integrity("package: %v", err)
	}
	defer d.Close()
	want := path.Clean(strings.TrimPrefix(member, "/"))
	for {
		h, err := d.Data.Next()
		if errors.Is(err, io.EOF) {
			return integrity("package has no %s", member)
		}
		if err != nil {
			return integrity("package data: %v", err)
		}
		if path.Clean(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")) != want {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return integrity("package's %s is not a regular file (type %q)", member, h.Typeflag)
		}
		if h.Size <= 0 || h.Size > max {
			return integrity("package's %s: %d bytes, want 1 to %d", member, h.Size, max)
		}
		n, err := io.Copy(dst, io.LimitReader(d.Data, h.Size))
		if err != nil {
			return fmt.Errorf("extract %s: %w", member, err)
		}
		if n != h.Size {
			return integrity("package's %s: %d of %d bytes", member, n, h.Size)
		}
		return nil
	}
}

// Fetch finds req's package in repo (Find), downloads its .deb, checked
// against the index's SHA-256 and size, and extracts req.Member from it
// into dst. A package whose bytes differ from the index, or that does not
// hold the member, is an IntegrityError.
func (repo Apt) Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error) {
	p, err := repo.Find(ctx, c, req.Name, req.Version, req.Now)
	if err != nil {
		return Package{}, err
	}
	tmp, err := download(ctx, c, p, req)
	if err != nil {
		return p, err
	}
	defer discard(tmp)
	return p, Extract(tmp, req.Member, req.Max, dst)
}

// String names repo for logs.
func (repo Apt) String() string {
	return "apt " + repo.URL + " " + repo.Suite + " " + repo.Component + " " + repo.Arch
}
