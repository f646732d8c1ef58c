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
// Every failure is one of two kinds. An IntegrityError means the
// repository contradicts its own signatures: for apt a bad InRelease
// signature, or one by an unknown key or with a digest apt refuses
// (SHA-1), an expired Release, a .deb whose digest or size differs from
// the signed index, a malformed signed file; for rpm a package rpmkeys
// finds BAD or unsigned; for both a verified package that does not hold
// the agent as a regular file or as a link to one within the package
// (taken as dpkg and rpm install it). The caller must not fall back to
// another route for the same bytes. Anything else (unreachable, a
// timeout, a missing file, no such package, no usable source, unsigned
// rpm metadata that is inconsistent, a key the rpm database lacks, a file
// over one of this route's caps, an agent linked out of its package) is
// operational: the package manager may still succeed, by its own checks.
// So is a Packages index that differs from the signed Release after a
// second try: that is what a mirror mid-sync serves, and apt refuses it
// by its own check. A .deb is different: pool files are immutable, so one
// that differs from the index is not a sync in progress (an unsynced one
// is missing, not different).
package pkgrepo

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/xi2/xz"

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
	// TempDir holds the downloaded index and package while Fetch runs,
	// in files named by the os.CreateTemp pattern TempPattern.
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

// signedMismatch classifies a failed download of bytes whose size and
// SHA-256 signed metadata names: bytes that differ are an IntegrityError;
// anything else (the server's encoding or redirects, the network) is
// operational.
func signedMismatch(name string, err error) error {
	var ve *fetch.VerifyError
	if errors.As(err, &ve) && (ve.Reason == fetch.ReasonSize || ve.Reason == fetch.ReasonDigest) {
		return &IntegrityError{Err: fmt.Errorf("%s: %w", name, err)}
	}
	return fmt.Errorf("%s: %w", name, err)
}

// download fetches p into a new temporary file named by req, checked
// against p's SHA-256 and size (a mismatch is a *fetch.VerifyError). The
// caller discards the file.
func download(ctx context.Context, c *fetch.Client, p Package, req Request) (*os.File, error) {
	if p.Size <= 0 || p.Size > MaxPackage {
		return nil, fmt.Errorf("%s %s: %d bytes, want 1 to %d", p.Name, p.Version, p.Size, MaxPackage)
	}
	return downloadTemp(ctx, c, p.URL, fetch.Want{SHA256: p.SHA256, Size: p.Size}, req)
}

// downloadTemp fetches url, checked against want, into a new temporary
// file named by req, positioned at its start: an index or package is
// read from the disk, so memory does not grow with its size. The caller
// discards the file.
func downloadTemp(ctx context.Context, c *fetch.Client, url string, want fetch.Want, req Request) (*os.File, error) {
	tmp, err := os.CreateTemp(req.TempDir, req.TempPattern)
	if err != nil {
		return nil, err
	}
	if err := c.Download(ctx, url, want, tmp); err != nil {
		discard(tmp)
		return nil, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
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

// Decompression limits. What a decoder allocates is set by the stream
// itself, which for rpm metadata nothing signs, so it is capped: a stream over a cap is refused
// (errOverLimit) and the package manager, with its own limits, installs.
const (
	// maxXZDictionary is xz -7's dictionary; the default preset, -6, uses
	// 8 MiB.
	maxXZDictionary = 16 << 20
	// maxZstdWindow is what zstd levels 1 to 19 write and what the format
	// asks every decoder to support.
	maxZstdWindow = 8 << 20
)

// errOverLimit marks a file refused for exceeding one of this route's
// caps: not a contradiction of any signature, so never an
// IntegrityError.
var errOverLimit = errors.New("over the repository route's limit")

// decompress returns a reader of the expanded form of r, a file named
// name (.xz, .gz, .zst, or none), at most MaxIndexExpanded bytes: more
// reads as errExpanded. A stream that needs a larger dictionary or
// window than the caps above reads as an error wrapping errOverLimit.
func decompress(name string, r io.Reader) (io.Reader, func(), error) {
	done := func() {}
	switch {
	case strings.HasSuffix(name, ".xz"):
		xr, err := xz.NewReader(r, maxXZDictionary)
		if err != nil {
			return nil, nil, overLimit(err)
		}
		r = &decodeErrors{r: xr}
	case strings.HasSuffix(name, ".gz"):
		gr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		r, done = gr, func() { gr.Close() }
	case strings.HasSuffix(name, ".zst"):
		// Low memory: a window plus one block, not two windows.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(MaxIndexExpanded))
		if err != nil {
			return nil, nil, err
		}
		r, done = &decodeErrors{r: zr}, zr.Close
	}
	return &capReader{r: r, n: MaxIndexExpanded}, done, nil
}

// decodeErrors marks a decoder's refusal of a stream over a cap.
type decodeErrors struct{ r io.Reader }

func (d *decodeErrors) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	return n, overLimit(err)
}

// overLimit wraps err in errOverLimit if it is a decoder's refusal of a
// dictionary or window over its cap.
func overLimit(err error) error {
	if errors.Is(err, xz.ErrMemlimit) || errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return fmt.Errorf("%w: %w", errOverLimit, err)
	}
	return err
}

var errExpanded = fmt.Errorf("%w: over %d bytes decompressed", errOverLimit, MaxIndexExpanded)

// capReader reads at most n bytes of r; more is errExpanded.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		// One more byte tells a file of exactly n from a longer one.
		var one [1]byte
		if k, _ := io.ReadFull(c.r, one[:]); k > 0 {
			return 0, errExpanded
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	return k, err
}

// maxCandidates caps the entries of one package a repository's index may
// list: a repository keeps a few hundred versions of the agent.
const maxCandidates = 4096

// pick returns the entry among entries (all of one package) whose
// upstream version is exactly v (pkgmgr.Pick), and its full version.
func pick[E any](entries []E, full func(E) string, v hotfix.Version) (E, string, error) {
	byVersion := make(map[string]E, len(entries))
	all := make([]string, 0, len(entries))
	for _, e := range entries {
		f := full(e)
		byVersion[f] = e
		all = append(all, f)
	}
	f, err := pkgmgr.Pick(all, v)
	if err != nil {
		var zero E
		return zero, "", err
	}
	return byVersion[f], f, nil
}

// entry is one file of a package's payload, from a tar (deb) or cpio
// (rpm) archive.
type entry struct {
	name string
	kind entryKind
	desc string // for errors: tar type or cpio mode
	size int64
	// link is a symlink's target, or the earlier member a tar hard link
	// names.
	link string
	// inode and links group a cpio archive's hard links: regular entries
	// of one inode, of which rpm stores the content with the last.
	inode int64
	links int
}

type entryKind int

const (
	kindOther entryKind = iota
	kindRegular
	kindSymlink
	kindHardlink // tar's: a reference to an earlier member
)

// payload is one reading of a package's payload archive from its start:
// next returns its entries, body reads the current one's content, and
// close ends the reading.
type payload struct {
	next  func() (entry, error)
	body  io.Reader
	close func()
}

// archiveError is a payload archive that does not read: for a .deb whose
// digest the repository signed, an integrity failure; for an rpm, whose
// payload rpm2cpio expands, possibly that tool's.
type archiveError struct{ err error }

func (e *archiveError) Error() string { return "package payload: " + e.err.Error() }
func (e *archiveError) Unwrap() error { return e.err }

// takeMember copies member out of a package's payload into dst, at most
// max bytes, reading the payload from open (once, or three times for a
// member that is a link). A member that is a hard link or a symlink is
// taken as the installer leaves it: a hard link has its target's
// content, a symlink is followed within the package (resolveLink); one
// that does not lead to a regular member of the package is operational.
// A member that is missing, of another type, over max or listed twice is
// an IntegrityError; an archive that does not read, an *archiveError.
func takeMember(open func() (*payload, error), member string, max int64, dst io.Writer) error {
	want := cleanMember(member)
	copied, err := scanMember(open, want, max, dst)
	if err != nil || copied {
		return err
	}
	// A link: list the payload, then copy what it leads to.
	var index members
	if err := scan(open, func(h entry, _ io.Reader) error { index.add(h); return nil }); err != nil {
		return err
	}
	target, err := index.resolve(want)
	if err != nil {
		return fmt.Errorf("package's %s: %w", member, err)
	}
	if copied, err = scanMember(open, target, max, dst); err == nil && !copied {
		err = &archiveError{fmt.Errorf("%s changed between readings", target)}
	}
	return err
}

// scanMember reads the payload to its end for the member want and
// copies its content into dst if it is a regular file with content; it
// reports false, with no error, if want is a link whose content is
// elsewhere. It reads to the end: a member listed twice is refused, since
// an installer keeps the last copy and this would stage the first.
func scanMember(open func() (*payload, error), want string, max int64, dst io.Writer) (bool, error) {
	found, copied := false, false
	err := scan(open, func(h entry, body io.Reader) error {
		if h.name != want {
			return nil
		}
		if found {
			return integrity("package lists %s twice", want)
		}
		found = true
		switch {
		case h.kind == kindSymlink || h.kind == kindHardlink || h.kind == kindRegular && h.size == 0 && h.links > 1:
			return nil
		case h.kind != kindRegular:
			return integrity("package's %s is not a regular file (%s)", want, h.desc)
		case h.size <= 0 || h.size > max:
			return integrity("package's %s: %d bytes, want 1 to %d", want, h.size, max)
		}
		n, err := io.Copy(dst, io.LimitReader(body, h.size))
		if err != nil {
			return fmt.Errorf("extract %s: %w", want, err)
		}
		if n != h.size {
			return &archiveError{fmt.Errorf("%s: %d of %d bytes", want, n, h.size)}
		}
		copied = true
		return nil
	})
	if err == nil && !found {
		err = integrity("package has no %s", want)
	}
	return copied, err
}

// scan reads the payload from open to its end, calling f for each entry
// with its name cleaned; f's error stops it.
func scan(open func() (*payload, error), f func(entry, io.Reader) error) error {
	p, err := open()
	if err != nil {
		return err
	}
	defer p.close()
	for {
		h, err := p.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &archiveError{err}
		}
		h.name = cleanMember(h.name)
		if err := f(h, p.body); err != nil {
			return err
		}
	}
}

// Bounds of resolving a link within a package.
const (
	// maxLinkHops is the kernel's limit of symlinks in one lookup.
	maxLinkHops = 40
	// maxIndexedNames caps the names recorded to resolve a link: the
	// agent's package has a handful.
	maxIndexedNames = 8 << 20
)

// members indexes a payload's entries by name, to resolve a link.
type members struct {
	byName map[string]entry
	bytes  int
	over   bool
}

func (m *members) add(h entry) {
	if m.byName == nil {
		m.byName = make(map[string]entry)
	}
	if m.bytes += len(h.name) + len(h.link); m.bytes > maxIndexedNames {
		m.over = true
		return
	}
	// A name listed twice is refused when it is copied.
	m.byName[h.name] = h
}

// resolve follows name, a member that is a link, to the regular member
// with content that an installed package would have there: through a tar
// hard link to the member it names, through a cpio hard link to the
// member of its inode that holds the content, through a symlink as the
// kernel would within the package's tree. Every error is operational:
// the link leads out of the package or nowhere, which the installed
// package may still resolve.
func (m *members) resolve(name string) (string, error) {
	if m.over {
		return "", fmt.Errorf("a link, in a payload whose names are over %d bytes", maxIndexedNames)
	}
	hops := 0
	for {
		h, ok := m.byName[name]
		switch {
		case !ok:
			return "", fmt.Errorf("a link to %s, which is not in the package", name)
		case h.kind == kindRegular && (h.size > 0 || h.links <= 1):
			return name, nil
		case h.kind == kindRegular:
			for _, o := range m.byName {
				if o.kind == kindRegular && o.inode == h.inode && o.size > 0 {
					return o.name, nil
				}
			}
			return "", fmt.Errorf("a hard link whose content is not in the package")
		case h.kind != kindHardlink && h.kind != kindSymlink:
			return "", fmt.Errorf("a link to %s, which is not a regular file (%s)", name, h.desc)
		}
		if hops++; hops > maxLinkHops {
			return "", fmt.Errorf("over %d links", maxLinkHops)
		}
		if h.kind == kindHardlink {
			name = cleanMember(h.link)
			continue
		}
		target := h.link
		if !strings.HasPrefix(target, "/") {
			target = path.Dir(name) + "/" + target
		}
		var err error
		if name, err = m.walk(target, &hops); err != nil {
			return "", err
		}
	}
}

// walk resolves p's directories as the kernel would within the package's
// tree: a directory that is a symlink of the package is replaced by its
// target, and ".." applies to what it resolved to. The last element is
// left to the caller.
func (m *members) walk(p string, hops *int) (string, error) {
	rest := strings.Split(p, "/")
	at := "" // the package's root
	for len(rest) > 0 {
		elem := rest[0]
		rest = rest[1:]
		switch elem {
		case "", ".":
			continue
		case "..":
			at = path.Dir("/" + at)[1:]
			continue
		}
		next := path.Join(at, elem)
		if h, ok := m.byName[next]; ok && h.kind == kindSymlink && len(rest) > 0 {
			if *hops++; *hops > maxLinkHops {
				return "", fmt.Errorf("over %d links", maxLinkHops)
			}
			if strings.HasPrefix(h.link, "/") {
				at = ""
			}
			rest = append(strings.Split(h.link, "/"), rest...)
			continue
		}
		at = next
	}
	return at, nil
}

// cleanMember is an archive path as installed: no leading "./" or "/",
// "." and ".." resolved.
func cleanMember(name string) string {
	return path.Clean("/" + strings.TrimPrefix(name, "./"))[1:]
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
