package pkgrepo

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"pault.ag/go/debian/control"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/fetch"
)

// Size caps of what a repository sends.
const (
	// MaxInRelease caps the signed Release file; a large archive's is a
	// few hundred KiB.
	MaxInRelease = 4 << 20
	// MaxIndex caps a Packages index as downloaded, and MaxIndexExpanded
	// once decompressed.
	MaxIndex         = 64 << 20
	MaxIndexExpanded = 256 << 20
)

// Apt is one apt repository, as a sources entry names it. Its trust is an
// InRelease signed by a key of Keyring, which vouches for the Packages
// index by SHA-256, which vouches for the .deb the same way.
type Apt struct {
	// URL is the repository's base (https only), e.g.
	// https://packages.microsoft.com/ubuntu/24.04/prod.
	URL string
	// Suite, Component and Arch select the index: dists/SUITE/InRelease,
	// COMPONENT/binary-ARCH/Packages.
	Suite, Component, Arch string
	// Keyring holds the keys the repository's InRelease must be signed by
	// (the sources entry's signed-by keyring).
	Keyring openpgp.EntityList
}

// Attempts at an index that differs from the signed Release. A mirror
// mid-sync serves the previous index under the new InRelease, or the new
// index under an InRelease fetched just before the switch; a second try
// of both, after a pause, gets a consistent pair once the switch is over.
const (
	indexAttempts = 2
	// indexRetryWait is the pause before the second attempt, plus up to
	// as much again of jitter so that a fleet does not retry in step.
	indexRetryWait = 500 * time.Millisecond
)

// errIndexMismatch is an index whose size or SHA-256 differs from the
// signed Release's.
var errIndexMismatch = errors.New("index differs from the signed Release (a mirror mid-sync?)")

// Find returns the package of a that req names (its upstream version is
// exactly req.Version, pkgmgr.Pick), verified from the InRelease signature
// down to the index entry. req.Now is checked against the Release's
// Valid-Until; the index is held in a temporary file named by req. An
// index that differs from the Release, on every attempt, is operational:
// it is indistinguishable from a mirror mid-sync, and apt refuses it by
// its own check.
func (repo Apt) Find(ctx context.Context, c *fetch.Client, req Request) (Package, error) {
	var err error
	attempts := 0
	for attempts < indexAttempts {
		if attempts > 0 && pause(ctx, indexRetryWait) != nil {
			break
		}
		attempts++
		var p Package
		if p, err = repo.find(ctx, c, req); !errors.Is(err, errIndexMismatch) {
			return p, err
		}
	}
	return Package{}, fmt.Errorf("%d attempts: %w", attempts, err)
}

// pause waits d plus up to d of jitter, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d + rand.N(d))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// find is one attempt of Find.
func (repo Apt) find(ctx context.Context, c *fetch.Client, req Request) (Package, error) {
	base := strings.TrimSuffix(repo.URL, "/")
	signed, err := get(ctx, c, base+"/dists/"+repo.Suite+"/InRelease", MaxInRelease)
	if err != nil {
		return Package{}, fmt.Errorf("InRelease: %w", err)
	}
	if len(bytes.TrimSpace(signed)) == 0 {
		// Nothing to judge: a mirror mid-sync or a proxy's empty answer is
		// an outage, not a forgery, and must not halt a release as one.
		return Package{}, errors.New("InRelease is empty")
	}
	release, err := VerifyInRelease(signed, repo.Keyring, req.Now)
	if err != nil {
		return Package{}, err
	}
	index, err := release.index(repo.Component, repo.Arch)
	if err != nil {
		return Package{}, err
	}
	f, err := fetchIndex(ctx, c, base+"/dists/"+repo.Suite, release, index, req)
	if err != nil {
		return Package{}, err
	}
	defer discard(f)
	entries, err := parseIndex(index.Filename, f, req.Name)
	if err != nil {
		return Package{}, err
	}
	return choose(entries, base, req.Name, req.Version)
}

// fetchIndex downloads index, under dir, into a temporary file, checked
// against the Release: by digest first where the Release offers it, as
// apt does (a sync never changes a file under that name), then by name.
// An index that differs wraps errIndexMismatch.
func fetchIndex(ctx context.Context, c *fetch.Client, dir string, r Release, index control.FileHash, req Request) (*os.File, error) {
	want := fetch.Want{SHA256: index.Hash, Size: index.Size}
	var byHashErr error
	if strings.EqualFold(strings.TrimSpace(r.AcquireByHash), "yes") {
		f, err := downloadTemp(ctx, c, dir+"/"+path.Dir(index.Filename)+"/by-hash/SHA256/"+index.Hash, want, req)
		if err == nil || ctx.Err() != nil {
			return f, err
		}
		byHashErr = fmt.Errorf("by hash: %w", err)
	}
	f, err := downloadTemp(ctx, c, dir+"/"+index.Filename, want, req)
	if err == nil {
		return f, nil
	}
	var ve *fetch.VerifyError
	if errors.As(err, &ve) && (ve.Reason == fetch.ReasonSize || ve.Reason == fetch.ReasonDigest) {
		err = fmt.Errorf("%w: %w", errIndexMismatch, err)
	}
	return nil, errors.Join(byHashErr, fmt.Errorf("%s: %w", index.Filename, err))
}

// Release is a verified Release file's part this package reads.
type Release struct {
	Suite      string
	Codename   string
	ValidUntil string `control:"Valid-Until"`
	// AcquireByHash "yes" says the indexes are also served by digest.
	AcquireByHash string                   `control:"Acquire-By-Hash"`
	SHA256        []control.SHA256FileHash `delim:"\n" strip:"\n\r\t "`
}

// aptDigests are the signature digests apt trusts (gpgv.cc's table); it
// refuses MD5, SHA-1 and RIPEMD-160.
var aptDigests = map[crypto.Hash]bool{crypto.SHA224: true, crypto.SHA256: true, crypto.SHA384: true, crypto.SHA512: true}

// VerifyInRelease checks that signed is one clearsigned Release file,
// signed by a key of keyring with a digest apt trusts, and not past its
// Valid-Until at now, and returns it parsed. Every failure is an
// IntegrityError.
func VerifyInRelease(signed []byte, keyring openpgp.EntityList, now time.Time) (Release, error) {
	block, rest := clearsign.Decode(signed)
	if block == nil {
		return Release{}, integrity("InRelease is not a clearsigned message")
	}
	if len(bytes.TrimSpace(rest)) > 0 || !bytes.HasPrefix(bytes.TrimLeft(signed, " \t\r\n"), []byte("-----BEGIN PGP SIGNED MESSAGE-----")) {
		return Release{}, integrity("InRelease has unsigned text around its signed message")
	}
	sig, _, err := openpgp.VerifyDetachedSignature(keyring, bytes.NewReader(block.Bytes), block.ArmoredSignature.Body, nil)
	if err != nil {
		return Release{}, integrity("InRelease signature: %v", err)
	}
	if !aptDigests[sig.Hash] {
		// apt: "The following signatures were invalid", then "is not
		// signed", as for an unknown key; go-crypto accepts SHA-1.
		return Release{}, integrity("InRelease signature: digest %v, which apt refuses", sig.Hash)
	}
	var r Release
	if err := control.Unmarshal(&r, bytes.NewReader(block.Plaintext)); err != nil {
		return Release{}, integrity("Release: %v", err)
	}
	if r.ValidUntil != "" {
		until, err := parseReleaseDate(r.ValidUntil)
		if err != nil {
			return Release{}, integrity("Release Valid-Until %q: %v", r.ValidUntil, err)
		}
		if !now.Before(until) {
			return Release{}, integrity("Release expired at %s (Valid-Until)", until.UTC().Format(time.RFC3339))
		}
	}
	return r, nil
}

// parseReleaseDate reads a Release file's date as apt does: RFC 1123
// with a one- or two-digit day, in UTC only (GMT, UTC, Z or +0000); a
// named zone apt does not know, or another offset, is refused rather than
// read as UTC.
func parseReleaseDate(s string) (time.Time, error) {
	f := strings.Fields(s)
	if len(f) != 6 {
		return time.Time{}, fmt.Errorf("want \"Mon, 2 Jan 2006 15:04:05 UTC\"")
	}
	switch f[5] {
	case "GMT", "UTC", "Z", "+0000":
	default:
		return time.Time{}, fmt.Errorf("zone %q is not UTC", f[5])
	}
	return time.Parse("Mon, 2 Jan 2006 15:04:05", strings.Join(f[:5], " "))
}

// index returns the Release's entry for the component's Packages index,
// preferring xz, then gzip, then none.
func (r Release) index(component, arch string) (control.FileHash, error) {
	dir := component + "/binary-" + arch + "/Packages"
	for _, ext := range []string{".xz", ".gz", ""} {
		for _, h := range r.SHA256 {
			if h.Filename == dir+ext {
				if h.Size <= 0 {
					return control.FileHash{}, integrity("%s: size %d", h.Filename, h.Size)
				}
				if h.Size > MaxIndex {
					// A large index is no contradiction; apt reads it.
					return control.FileHash{}, fmt.Errorf("%s: %w: %d bytes, over %d", h.Filename, errOverLimit, h.Size, MaxIndex)
				}
				return h.FileHash, nil
			}
		}
	}
	return control.FileHash{}, fmt.Errorf("the Release lists no SHA256 of %s{.xz,.gz,}", dir)
}

// parseIndex decompresses a verified Packages index and returns the
// entries of package name, streaming: only their paragraphs are decoded,
// and at most maxCandidates are kept. An index over one of decompress's
// caps is operational; any other failure is an IntegrityError.
func parseIndex(index string, packed io.Reader, name string) ([]control.BinaryIndex, error) {
	r, done, err := decompress(index, packed)
	if err != nil {
		return nil, indexError(index, err)
	}
	defer done()
	pr, err := control.NewParagraphReader(r, nil)
	if err != nil {
		return nil, indexError(index, err)
	}
	var out []control.BinaryIndex
	for {
		p, err := pr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, indexError(index, err)
		}
		if p.Values["Package"] != name {
			continue
		}
		if len(out) == maxCandidates {
			return nil, integrity("%s lists over %d entries of %s", index, maxCandidates, name)
		}
		var e control.BinaryIndex
		if err := control.UnpackFromParagraph(*p, &e); err != nil {
			return nil, integrity("%s: %s: %v", index, name, err)
		}
		out = append(out, e)
	}
}

// indexError classifies a failure to read a verified index: over one of
// this route's caps is operational (apt has its own); a signed index that
// does not read is an IntegrityError.
func indexError(index string, err error) error {
	if errors.Is(err, errOverLimit) {
		return fmt.Errorf("%s: %w", index, err)
	}
	return integrity("%s: %v", index, err)
}

// choose picks name's entry of version v among entries (all of name) and
// checks its fields.
func choose(entries []control.BinaryIndex, base, name string, v hotfix.Version) (Package, error) {
	e, full, err := pick(entries, func(e control.BinaryIndex) string { return e.Version.String() }, v)
	if err != nil {
		return Package{}, err
	}
	if len(e.SHA256) != 64 || e.Size <= 0 || !safeRel(e.Filename) {
		return Package{}, integrity("index entry %s %s: filename %q, sha256 %q, size %d", name, full, e.Filename, e.SHA256, e.Size)
	}
	return Package{Name: name, Version: full, URL: base + "/" + e.Filename, SHA256: strings.ToLower(e.SHA256), Size: int64(e.Size)}, nil
}
