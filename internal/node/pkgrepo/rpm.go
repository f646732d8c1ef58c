package pkgrepo

import (
	"bufio"
	"cmp"
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
	"gopkg.in/ini.v1"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/osrelease"
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
			// Value, not String: String expands ini's %(name)s
			// references, which dnf does not have and which grow
			// exponentially.
			if s.Name() == ini.DefaultSection || !dnfBool(s.Key("enabled").Value(), true) {
				continue
			}
			if !dnfBool(s.Key("gpgcheck").Value(), false) {
				skipped = append(skipped, s.Name()+" (gpgcheck off)")
				continue
			}
			base := strings.Fields(s.Key("baseurl").Value())
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

// dnfBool reads a dnf boolean option, def when unset.
func dnfBool(v string, def bool) bool {
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
// IntegrityError stops the search, and so does a failure after part of
// the agent was written to dst; other errors go on to the next repository
// and, if none has it, are returned joined.
func (rs RPMRepos) Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error) {
	var errs []error
	cw := &countingWriter{w: dst}
	for _, r := range rs {
		p, err := r.Fetch(ctx, c, req, cw)
		var ie *IntegrityError
		if err == nil || errors.As(err, &ie) || ctx.Err() != nil || cw.n > 0 {
			return p, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.ID, err))
	}
	return Package{}, errors.Join(errs...)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Fetch finds req's package in r's metadata, downloads it checked against
// the SHA-256 and size listed, has rpmkeys check its signature and
// digests, and extracts req.Member from its payload (rpm2cpio) into dst.
// The metadata is not signed: only the package's signature can be
// contradicted, so only rpmkeys' verdict and what the verified package
// holds are IntegrityErrors; a metadata or download failure leaves dnf to
// decide.
func (r RPM) Fetch(ctx context.Context, c *fetch.Client, req Request, dst io.Writer) (Package, error) {
	p, err := r.Find(ctx, c, req)
	if err != nil {
		return Package{}, err
	}
	tmp, err := download(ctx, c, p, req)
	if err != nil {
		return p, fmt.Errorf("%s: %w", path.Base(p.URL), err)
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

// Find returns the package req names from r's primary index, which is
// held in a temporary file named by req.
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
		return Package{}, fmt.Errorf("repomd.xml's primary index: checksum %s, size %d, href %q; want sha256, 1 to %d bytes, a relative path", d.Checksum.Type, d.Size, href, MaxIndex)
	}
	f, err := downloadTemp(ctx, c, r.BaseURL+"/"+href, fetch.Want{SHA256: strings.TrimSpace(d.Checksum.Value), Size: d.Size}, req)
	if err != nil {
		return Package{}, fmt.Errorf("%s: %w", href, err)
	}
	defer discard(f)
	pkgs, err := parsePrimary(href, f, req.Name, r.Arch)
	if err != nil {
		return Package{}, err
	}
	p, full, err := pick(pkgs, primaryPackage.full, req.Version)
	if err != nil {
		return Package{}, err
	}
	if p.Checksum.Type != "sha256" || len(strings.TrimSpace(p.Checksum.Value)) != 64 || !safeRel(p.Location.Href) {
		return Package{}, fmt.Errorf("primary entry %s %s: checksum %s %q, href %q", req.Name, full, p.Checksum.Type, p.Checksum.Value, p.Location.Href)
	}
	return Package{Name: req.Name, Version: full, URL: r.BaseURL + "/" + p.Location.Href, SHA256: strings.ToLower(strings.TrimSpace(p.Checksum.Value)), Size: p.Size.Package}, nil
}

// full is p's version as dnf lists it: [EPOCH:]VERSION-RELEASE.
func (p primaryPackage) full() string {
	full := p.Version.Ver + "-" + p.Version.Rel
	if p.Version.Epoch != "" && p.Version.Epoch != "0" {
		full = p.Version.Epoch + ":" + full
	}
	return full
}

// safeRel reports whether href is a relative path inside the repository.
func safeRel(href string) bool {
	return href != "" && !strings.HasPrefix(href, "/") && !strings.Contains(href, "..") && !strings.Contains(href, "://")
}

// Bounds of the primary index's XML, which is not signed. The decoder
// keeps a frame per open element and a token's bytes in one buffer, and
// decoding a <package> copies the text of the fields kept, so each of
// these bounds what one element can make it allocate.
const (
	// maxXMLDepth bounds nesting: a package's fields are
	// <metadata><package><format><rpm:provides><rpm:entry>.
	maxXMLDepth = 8
	// maxPrimaryEntry bounds the bytes of one <package>, and of any token
	// between packages. An entry is a few KiB; this leaves room for one
	// listing tens of thousands of provides.
	maxPrimaryEntry = 4 << 20
	// maxKeptEntry bounds the fields of an entry of the agent, which is
	// kept until the index ends: a few hundred bytes in practice.
	maxKeptEntry = 1 << 10
)

// parsePrimary decompresses the primary index and returns its packages
// called name of arch or noarch, streaming: the index of a large
// repository is hundreds of MiB expanded. Every error is operational (the
// index is not signed; dnf reads it afresh).
func parsePrimary(href string, packed io.Reader, name, arch string) ([]primaryPackage, error) {
	r, done, err := decompress(href, packed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", href, err)
	}
	defer done()
	in := &boundedInput{r: bufio.NewReader(r), limit: maxPrimaryEntry}
	dec := xml.NewTokenDecoder(&primaryTokens{d: xml.NewDecoder(in), in: in})
	var out []primaryPackage
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", href, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "package" {
			continue
		}
		var p primaryPackage
		if err := dec.DecodeElement(&p, &se); err != nil {
			return nil, fmt.Errorf("%s: %w", href, err)
		}
		if p.Name == name && (p.Arch == arch || p.Arch == "noarch") {
			if len(out) == maxCandidates {
				return nil, fmt.Errorf("%s lists over %d entries of %s", href, maxCandidates, name)
			}
			if n := p.kept(); n > maxKeptEntry {
				return nil, fmt.Errorf("%s: an entry of %s has %d bytes of fields, over %d", href, name, n, maxKeptEntry)
			}
			out = append(out, p)
		}
	}
}

// kept is the size of p's fields that parsePrimary keeps.
func (p primaryPackage) kept() int {
	return len(p.Name) + len(p.Arch) + len(p.Version.Epoch) + len(p.Version.Ver) + len(p.Version.Rel) +
		len(p.Checksum.Type) + len(p.Checksum.Value) + len(p.Location.Href)
}

// errEntrySize is an element or token of the primary index over
// maxPrimaryEntry bytes.
var errEntrySize = fmt.Errorf("%w: a <package> or token over %d bytes", errOverLimit, maxPrimaryEntry)

// boundedInput is the primary index as the XML decoder reads it: an
// io.ByteReader, so the decoder adds no buffer of its own and every byte
// it takes is counted, and reading past limit fails with errEntrySize.
type boundedInput struct {
	r        *bufio.Reader
	n, limit int64
}

func (in *boundedInput) ReadByte() (byte, error) {
	if in.n >= in.limit {
		return 0, errEntrySize
	}
	b, err := in.r.ReadByte()
	if err == nil {
		in.n++
	}
	return b, err
}

func (in *boundedInput) Read(p []byte) (int, error) {
	if in.n >= in.limit {
		return 0, errEntrySize
	}
	if int64(len(p)) > in.limit-in.n {
		p = p[:in.limit-in.n]
	}
	k, err := in.r.Read(p)
	in.n += int64(k)
	return k, err
}

// primaryTokens passes the decoder's tokens on, failing past maxXMLDepth
// open elements, and gives in a new limit after each token that starts
// outside a <package>: a package's tokens share one maxPrimaryEntry.
type primaryTokens struct {
	d     *xml.Decoder
	in    *boundedInput
	depth int
}

func (l *primaryTokens) Token() (xml.Token, error) {
	outside := l.depth <= 1
	tok, err := l.d.RawToken()
	switch tok.(type) {
	case xml.StartElement:
		if l.depth++; l.depth > maxXMLDepth {
			return nil, fmt.Errorf("elements nested over %d deep", maxXMLDepth)
		}
	case xml.EndElement:
		l.depth--
	}
	if outside {
		l.in.limit = l.in.n + maxPrimaryEntry
	}
	return tok, err
}

// checkSignature has rpmkeys check the package's signatures and digests
// against the keys in the rpm database under r.Root, requiring a
// signature (an unsigned package passes rpm's default check). A digest
// that differs (BAD) or a package without any signature is an
// IntegrityError. A signature by a key the database lacks (NOKEY) is not:
// dnf and tdnf import a repository's gpgkey= and check again, and refuse
// the package if that key did not sign it. Neither is rpmkeys failing to
// run or to read the database.
func (r RPM) checkSignature(ctx context.Context, pkg string) error {
	root := cmp.Or(r.Root, "/")
	res, err := proc.Run(ctx, proc.Cmd{Args: []string{"rpmkeys", "--root", root, "--define", "_pkgverify_level signature", "-Kv", "--", pkg}, TailSize: 8 << 10})
	if err == nil {
		return nil
	}
	out := strings.ReplaceAll(string(res.Tail), pkg, path.Base(pkg))
	var ce *proc.CmdError
	if !errors.As(err, &ce) || ce.ExitCode() <= 0 || ctx.Err() != nil {
		return fmt.Errorf("rpmkeys: %w", err)
	}
	verdict := checksigVerdict(out)
	switch verdict {
	case "BAD", "unsigned":
		return integrity("rpmkeys -K: %s: %s", verdict, compact(out))
	case "NOKEY":
		return fmt.Errorf("rpmkeys -K: signed by a key not in the rpm database (NOKEY): %s", compact(out))
	}
	return fmt.Errorf("rpmkeys -K: exit %d: %s", ce.ExitCode(), compact(out))
}

// checksigVerdict reads `rpmkeys -Kv` output: "BAD" if a signature or
// digest does not match, else "NOKEY" if a signature's key is unknown,
// else "unsigned" if every digest is OK but no signature was found, else
// "".
func checksigVerdict(out string) string {
	var bad, nokey, signed, digestsOK bool
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.Contains(line, ": BAD"), strings.HasSuffix(line, ": NOTTRUSTED"):
			bad = true
		case strings.HasSuffix(line, ": NOKEY"):
			nokey = true
		case strings.Contains(line, "Signature, key ID") && strings.HasSuffix(line, ": OK"):
			signed = true
		case strings.Contains(line, "digest: OK"):
			digestsOK = true
		}
	}
	switch {
	case bad:
		return "BAD"
	case nokey:
		return "NOKEY"
	case !signed && digestsOK:
		return "unsigned"
	}
	return ""
}

// compact joins a tool's output lines for one log line.
func compact(s string) string { return strings.Join(strings.Fields(s), " ") }

// extractRPM copies member out of the verified package's payload into
// dst, at most max bytes (takeMember): rpm2cpio expands the payload and
// the cpio archive is read here, so no path from the package touches the
// disk. rpmkeys verified the payload's digest, so an archive that does
// not read is rpm2cpio's failure (say, a compressor it lacks), which dnf,
// reading the payload itself, may not share: operational.
func extractRPM(ctx context.Context, pkg, member string, max int64, dst io.Writer) error {
	open := func() (*payload, error) {
		ctx, cancel := context.WithCancel(ctx)
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := proc.Run(ctx, proc.Cmd{Args: []string{"rpm2cpio", pkg}, Stdout: pw, TailSize: 4 << 10})
			pw.CloseWithError(err)
			done <- err
		}()
		cr := cpio.NewReader(pr)
		next := func() (entry, error) {
			h, err := cr.Next()
			if err != nil {
				return entry{}, err
			}
			e := entry{name: h.Name, desc: "mode " + h.Mode.String(), size: h.Size, link: h.Linkname, inode: h.Inode, links: h.Links}
			switch {
			case h.Mode.IsRegular():
				e.kind = kindRegular
			case h.Mode&cpio.ModeType == cpio.TypeSymlink:
				e.kind = kindSymlink
			}
			return e, nil
		}
		// Read to the archive's end, or stopped on an error: either way
		// rpm2cpio has nothing more to give.
		return &payload{next: next, body: cr, close: func() { pr.Close(); cancel(); <-done }}, nil
	}
	return takeMember(open, member, max, dst)
}
