package pkgrepo

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"pault.ag/go/debian/deb"

	"nodehotfix/internal/node/fetch"
)

// Extract copies member (a path such as AgentMember) out of the data
// archive (xz, zstd, gzip or none) of the verified .deb in pkg into dst,
// at most max bytes (takeMember). The package's digest was checked
// before, so an archive that does not read, or that does not hold the
// member as a regular file or a link to one, is an IntegrityError: the
// repository signed something that is not the agent's package. A link
// that leads out of the package is operational, as is writing dst.
func Extract(pkg io.ReaderAt, member string, max int64, dst io.Writer) error {
	open := func() (*payload, error) {
		d, err := deb.Load(pkg, "package.deb")
		if err != nil {
			return nil, &archiveError{err}
		}
		next := func() (entry, error) {
			h, err := d.Data.Next()
			if err != nil {
				return entry{}, err
			}
			e := entry{name: h.Name, desc: fmt.Sprintf("tar type %q", h.Typeflag), size: h.Size, link: h.Linkname}
			switch h.Typeflag {
			case tar.TypeReg:
				e.kind = kindRegular
			case tar.TypeSymlink:
				e.kind = kindSymlink
			case tar.TypeLink:
				e.kind = kindHardlink
			}
			return e, nil
		}
		return &payload{next: next, body: d.Data, close: func() { d.Close() }}, nil
	}
	err := takeMember(open, member, max, dst)
	var ae *archiveError
	if errors.As(err, &ae) {
		return &IntegrityError{Err: ae}
	}
	return err
}

// Fetch finds req's package in repo (Find), downloads its .deb, checked
// against the index's SHA-256 and size, and extracts req.Member from it
// into dst. A package whose bytes differ from the index, or that does not
// hold the member, is an IntegrityError.
func (repo Apt) Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error) {
	p, err := repo.Find(ctx, c, req)
	if err != nil {
		return Package{}, err
	}
	tmp, err := download(ctx, c, p, req)
	if err != nil {
		return p, signedMismatch(path.Base(p.URL), err)
	}
	defer discard(tmp)
	return p, Extract(tmp, req.Member, req.Max, dst)
}

// String names repo for logs.
func (repo Apt) String() string {
	return "apt " + repo.URL + " " + repo.Suite + " " + repo.Component + " " + repo.Arch
}
