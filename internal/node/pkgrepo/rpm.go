package pkgrepo

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"gopkg.in/ini.v1"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/osrelease"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/internal/node/proc"
)

// Caps of what an rpm repository sends and holds.
const (
	// MaxRepomd caps repodata/repomd.xml, a few KiB in practice.
	MaxRepomd = 1 << 20
	// maxRepoFile caps one .repo file, and maxRepos how many repositories
	// are searched.
	maxRepoFile = 64 << 10
	maxRepos    = 16
)

// RPM is an rpm repository as a dnf/tdnf .repo section names it. Its
// metadata (repomd.xml, then the primary index it lists by SHA-256) only
// finds the package; the package's own OpenPGP signature, checked by
// rpmkeys against the keys in the rpm database under Root, is the trust.
type RPM struct {
	// ID is the .repo section's name; BaseURL the repository's base, with
	// $releasever and $basearch substituted.
	ID, BaseURL string
	// Arch is rpm's architecture (x86_64, aarch64); noarch also matches.
	Arch string
	// Root is the node's root, whose rpm database holds the trusted keys.
	Root string
}

// RPMArch returns rpm's name of this binary's platform, the node's.
func RPMArch() string {
	switch a := Arch(); a {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	default:
		return a
	}
}

// RPMRepos is every repository a node's dnf or tdnf searches, in order;
// Fetch takes the package from the first that lists it.
type RPMRepos []RPM

// FromRepoFiles returns the enabled https repositories of root's
// etc/yum.repos.d/*.repo that check package signatures (gpgcheck=1), at
// most maxRepos. Every error is operational.
func FromRepoFiles(root, arch string) (RPMRepos, error) {
	osr, err := osrelease.Read(root)
	if err != nil {
		return nil, err
	}
	files, _ := filepath.Glob(filepath.Join(root, "etc/yum.repos.d/*.repo"))
	var out RPMRepos
	var skipped []string
	for _, f := range files {
		data, err := capfile.Read(f, maxRepoFile)
		if err != nil {
			return nil, fmt.Errorf("repo file: %w", err)
		}
		cfg, err := ini.LoadSources(ini.LoadOptions{IgnoreInlineComment: true, AllowPythonMultilineValues: true}, data)
		if err != nil {
			return nil, fmt.Errorf("repo file %s: %w", f, err)
		}
		for _, s := range cfg.Sections() {
			if s.Name() == ini.DefaultSection || !boolOption(s.Key("enabled").String(), true) {
				continue
			}
			if !boolOption(s.Key("gpgcheck").String(), false) {
				skipped = append(skipped, s.Name()+" (gpgcheck off)")
				continue
			}
			base := strings.Fields(s.Key("baseurl").String())
			if len(base) == 0 {
				skipped = append(skipped, s.Name()+" (no baseurl)")
				continue
			}
			u := strings.NewReplacer("$releasever", osr.VersionID, "${releasever}", osr.VersionID, "$basearch", arch, "${basearch}", arch).Replace(base[0])
			if strings.Contains(u, "$") || !strings.HasPrefix(u, "https://") {
				skipped = append(skipped, s.Name()+" (baseurl "+u+")")
				continue
			}
			out = append(out, RPM{ID: s.Name(), BaseURL: strings.TrimSuffix(u, "/"), Arch: arch, Root: root})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no enabled https repository with gpgcheck=1 in %s (skipped: %s)", filepath.Join(root, "etc/yum.repos.d"), strings.Join(skipped, ", "))
	}
	if len(out) > maxRepos {
		out = out[:maxRepos]
	}
	return out, nil
}

// boolOption reads a dnf boolean option, def when unset.
func boolOption(v string, def bool) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "yes", "true", "on":
		return true
	case "0", "no", "false", "off":
		return false
	}
	return def
}

// String names the repositories for logs.
func (rs RPMRepos) String() string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return "rpm " + strings.Join(ids, ",")
}

// Fetch takes req's package from the first repository that lists it. An
// IntegrityError stops the search; other errors go on to the next
// repository and, if none has it, are returned joined.
func (rs RPMRepos) Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error) {
	var errs []error
	for _, r := range rs {
		p, err := r.Fetch(ctx, c, req, dst)
		var ie *IntegrityError
		if err == nil || errors.As(err, &ie) || ctx.Err() != nil {
			return p, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.ID, err))
	}
	return Package{}, errors.Join(errs...)
}

// Fetch finds req's package in r's metadata, downloads it checked against
// the SHA-256 and size listed, has rpmkeys check its signature and
// digests, and extracts req.Member from its payload (rpm2cpio) into dst.
func (r RPM) Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error) {
	p, err := r.Find(ctx, c, req)
	if err != nil {
		return Package{}, err
	}
	tmp, err := download(ctx, c, p, req)
	if err != nil {
		return p, err
	}
	defer discard(tmp)
	if err := r.checkSignature(ctx, tmp.Name()); err != nil {
		return p, err
	}
	return p, extractRPM(ctx, tmp.Name(), req.Member, req.Max, dst)
}

// repomd is the part of repodata/repomd.xml read: where the primary
// index is and its digest.
type repomd struct {
	Data []repomdData `xml:"data"`
}

type repomdData struct {
	Type     string `xml:"type,attr"`
	Checksum struct {
		Type  string `xml:"type,attr"`
		Value string `xml:",chardata"`
	} `xml:"checksum"`
	Location struct {
		Href string `xml:"href,attr"`
	} `xml:"location"`
	Size int64 `xml:"size"`
}

// primaryPackage is one <package> of the primary index.
type primaryPackage struct {
	Name    string `xml:"name"`
	Arch    string `xml:"arch"`
	Version struct {
		Epoch string `xml:"epoch,attr"`
		Ver   string `xml:"ver,attr"`
		Rel   string `xml:"rel,attr"`
	} `xml:"version"`
	Checksum struct {
		Type  string `xml:"type,attr"`
		Value string `xml:",chardata"`
	} `xml:"checksum"`
	Size struct {
		Package int64 `xml:"package,attr"`
	} `xml:"size"`
	Location struct {
		Href string `xml:"href,attr"`
	} `xml:"location"`
}

// Find returns the package req names from r's primary index.
func (r RPM) Find(ctx context.Context, c *fetch.Client, req Request) (Package, error) {
	b, err := get(ctx, c, r.BaseURL+"/repodata/repomd.xml", MaxRepomd)
	if err != nil {
		return Package{}, fmt.Errorf("repomd.xml: %w", err)
	}
	var md repomd
	if err := xml.Unmarshal(b, &md); err != nil {
		return Package{}, fmt.Errorf("repomd.xml: %w", err)
	}
	i := slices.IndexFunc(md.Data, func(d repomdData) bool { return d.Type == "primary" })
	if i < 0 {
		return Package{}, errors.New("repomd.xml lists no primary index")
	}
	d := md.Data[i]
	href := d.Location.Href
	if d.Checksum.Type != "sha256" || d.Size <= 0 || d.Size > MaxIndex || !safeRel(href) {
		// Unsigned metadata that the route cannot use: the package
		// manager may; nothing untrusted was accepted.
		return Package{}, fmt.Errorf("repomd.xml's primary index: checksum %s, size %d, href %q; want sha256, 1 to %d bytes, a relative path", d.Checksum.Type, d.Size, href, MaxIndex)
	}
	var packed bytes.Buffer
	err = c.Download(ctx, r.BaseURL+"/"+href, fetch.Want{SHA256: strings.TrimSpace(d.Checksum.Value), Size: d.Size}, &packed)
	var ve *fetch.VerifyError
	if errors.As(err, &ve) {
		return Package{}, &IntegrityError{Err: fmt.Errorf("%s: %w", href, err)}
	}
	if err != nil {
		return Package{}, fmt.Errorf("%s: %w", href, err)
	}
	pkgs, err := parsePrimary(href, packed.Bytes(), req.Name, r.Arch)
	if err != nil {
		return Package{}, err
	}
	byVersion := map[string]primaryPackage{}
	var all []string
	for _, p := range pkgs {
		full := p.Version.Ver + "-" + p.Version.Rel
		if p.Version.Epoch != "" && p.Version.Epoch != "0" {
			full = p.Version.Epoch + ":" + full
		}
		byVersion[full] = p
		all = append(all, full)
	}
	full, err := pkgmgr.Pick(all, req.Version)
	if err != nil {
		return Package{}, err
	}
	p := byVersion[full]
	if p.Checksum.Type != "sha256" || len(strings.TrimSpace(p.Checksum.Value)) != 64 || !safeRel(p.Location.Href) {
		return Package{}, integrity("primary entry %s %s: checksum %s %q, href %q", req.Name, full, p.Checksum.Type, p.Checksum.Value, p.Location.Href)
	}
	return Package{Name: req.Name, Version: full, URL: r.BaseURL + "/" + p.Location.Href, SHA256: strings.ToLower(strings.TrimSpace(p.Checksum.Value)), Size: p.Size.Package}, nil
}

// safeRel reports whether href is a relative path inside the repository.
func safeRel(href string) bool {
	return href != "" && !strings.HasPrefix(href, "/") && !strings.Contains(href, "..") && !strings.Contains(href, "://")
}

// parsePrimary decompresses a verified primary index and returns its
// packages called name of arch or noarch, streaming: the index of a large
// repository is hundreds of MiB expanded.
func parsePrimary(href string, packed []byte, name, arch string) ([]primaryPackage, error) {
	var r io.Reader = bytes.NewReader(packed)
	switch {
	case strings.HasSuffix(href, ".gz"):
		gr, err := gzip.NewReader(r)
		if err != nil {
			return nil, integrity("%s: %v", href, err)
		}
		defer gr.Close()
		r = gr
	case strings.HasSuffix(href, ".xz"):
		xr, err := xz.NewReader(r)
		if err != nil {
			return nil, integrity("%s: %v", href, err)
		}
		r = xr
	case strings.HasSuffix(href, ".zst"):
		zr, err := zstd.NewReader(r)
		if err != nil {
			return nil, integrity("%s: %v", href, err)
		}
		defer zr.Close()
		r = zr
	}
	lr := &io.LimitedReader{R: r, N: MaxIndexExpanded + 1}
	dec := xml.NewDecoder(lr)
	var out []primaryPackage
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if lr.N <= 0 {
			return nil, integrity("%s: over %d bytes decompressed", href, MaxIndexExpanded)
		}
		if err != nil {
			return nil, integrity("%s: %v", href, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "package" {
			continue
		}
		var p primaryPackage
		if err := dec.DecodeElement(&p, &se); err != nil {
			return nil, integrity("%s: %v", href, err)
		}
		if p.Name == name && (p.Arch == arch || p.Arch == "noarch") {
			out = append(out, p)
		}
	}
}

// checkSignature has rpmkeys check the package's signatures and digests
// against the keys in the rpm database under r.Root, requiring a
// signature (an unsigned package passes rpm's default check). A package
// rpmkeys rejects is an IntegrityError; rpmkeys failing to run is not.
func (r RPM) checkSignature(ctx context.Context, pkg string) error {
	root := r.Root
	if root == "" {
		root = "/"
	}
	res, err := proc.Run(ctx, proc.Cmd{Args: []string{"rpmkeys", "--root", root, "--define", "_pkgverify_level signature", "--checksig", "--", pkg}, TailSize: 4 << 10})
	var ce *proc.CmdError
	if errors.As(err, &ce) && ce.ExitCode() > 0 && ctx.Err() == nil {
		return integrity("rpmkeys --checksig: %s", strings.TrimSpace(strings.ReplaceAll(string(res.Tail), pkg, path.Base(pkg))))
	}
	if err != nil {
		return fmt.Errorf("rpmkeys --checksig: %w", err)
	}
	return nil
}

// extractRPM copies member out of the verified package's payload into
// dst, at most max bytes: rpm2cpio decompresses the payload and the cpio
// archive is read here, so no path from the package touches the disk.
func extractRPM(ctx context.Context, pkg, member string, max int64, dst io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := proc.Run(ctx, proc.Cmd{Args: []string{"rpm2cpio", pkg}, Stdout: pw, TailSize: 4 << 10})
		pw.CloseWithError(err)
		done <- err
	}()
	err := copyMember(cpio.NewReader(pr), member, max, dst)
	// Stop rpm2cpio if the member was found before the payload's end.
	pr.Close()
	cancel()
	runErr := <-done
	if err != nil {
		if runErr != nil && !errors.Is(runErr, context.Canceled) && ctx.Err() == nil {
			return fmt.Errorf("rpm2cpio: %w", runErr)
		}
		return err
	}
	return nil
}

// copyMember finds member in a cpio archive and copies it to dst.
func copyMember(r *cpio.Reader, member string, max int64, dst io.Writer) error {
	want := path.Clean(strings.TrimPrefix(member, "/"))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return integrity("package has no %s", member)
		}
		if err != nil {
			var ce *proc.CmdError
			if errors.As(err, &ce) {
				return fmt.Errorf("rpm2cpio: %w", err)
			}
			return integrity("package payload: %v", err)
		}
		if path.Clean(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")) != want {
			continue
		}
		if !h.Mode.IsRegular() {
			return integrity("package's %s is not a regular file (mode %v)", member, h.Mode)
		}
		if h.Size <= 0 || h.Size > max {
			return integrity("package's %s: %d bytes, want 1 to %d", member, h.Size, max)
		}
		n, err := io.Copy(dst, io.LimitReader(r, h.Size))
		if err != nil {
			return fmt.Errorf("extract %s: %w", member, err)
		}
		if n != h.Size {
			return integrity("package's %s: %d of %d bytes", member, n, h.Size)
		}
		return nil
	}
}
