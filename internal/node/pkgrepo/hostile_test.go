package pkgrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/test/harness"
)

// arMember appends one ar(5) member to b.
func arMember(b *bytes.Buffer, name string, data []byte) {
	fmt.Fprintf(b, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", name, 0, 0, 0, "100644", len(data))
	b.Write(data)
	if len(data)%2 == 1 {
		b.WriteByte('\n')
	}
}

func tarOf(entries ...[2]string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o755, Size: int64(len(e[1])), Typeflag: tar.TypeReg})
		tw.Write([]byte(e[1]))
	}
	tw.Close()
	return b.Bytes()
}

// TestExtractMemberListedTwice: dpkg unpacks in order and keeps the last
// copy of a path, so a package listing the agent twice (here once as
// usr/bin/../bin/…) is refused rather than staged as its first copy.
func TestExtractMemberListedTwice(t *testing.T) {
	t.Parallel()
	var deb bytes.Buffer
	deb.WriteString("!<arch>\n")
	arMember(&deb, "debian-binary", []byte("2.0\n"))
	arMember(&deb, "control.tar", tarOf([2]string{"./control", "Package: aks-node-controller\nVersion: 1\nArchitecture: amd64\n"}))
	arMember(&deb, "data.tar", tarOf([2]string{"./usr/bin/aks-node-controller", "FIRST"}, [2]string{"./usr/bin/../bin/aks-node-controller", "SECOND"}))
	err := Extract(bytes.NewReader(deb.Bytes()), AgentMember, 1<<20, io.Discard)
	var ie *IntegrityError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("Extract = %v, want an IntegrityError: listed twice", err)
	}
}

// hostilePrimary serves an unsigned repomd.xml over a primary.xml.gz of
// the test's choosing.
func hostilePrimary(t *testing.T, primary []byte) (RPM, *fetch.Client) {
	t.Helper()
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(primary)
	zw.Close()
	return hostileRPMRepo(t, "repodata/primary.xml.gz", gz.Bytes())
}

// hostileRPMRepo serves an unsigned repomd.xml naming packed, served at
// href, as the primary index, with its true digest and size.
func hostileRPMRepo(t *testing.T, href string, packed []byte) (RPM, *fetch.Client) {
	t.Helper()
	sum := sha256.Sum256(packed)
	repomd := fmt.Sprintf(`<repomd><data type="primary"><checksum type="sha256">%s</checksum><location href="%s"/><size>%d</size></data></repomd>`, hex.EncodeToString(sum[:]), href, len(packed))
	mux := http.NewServeMux()
	mux.HandleFunc("/repodata/repomd.xml", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(repomd)) })
	mux.HandleFunc("/"+href, func(w http.ResponseWriter, r *http.Request) { w.Write(packed) })
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	c, err := fetch.New(fetch.Config{ExtraRootsPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})})
	if err != nil {
		t.Fatal(err)
	}
	return RPM{ID: "hostile", BaseURL: srv.URL, Arch: "x86_64"}, c
}

// TestPrimaryHostile: a primary index nested without end (the decoder
// keeps a frame per open element) or listing the package a million times
// is refused as it streams, as operational errors: the index is not
// signed.
func TestPrimaryHostile(t *testing.T) {
	t.Parallel()
	entry := `<package><name>aks-node-controller</name><arch>noarch</arch><version epoch="0" ver="202608.26.2" rel="%d"/><checksum type="sha256">` + strings.Repeat("0", 64) + `</checksum><size package="1"/><location href="p.rpm"/></package>`
	var many strings.Builder
	many.WriteString("<metadata>")
	for i := range maxCandidates + 1 {
		fmt.Fprintf(&many, entry, i)
	}
	many.WriteString("</metadata>")
	for name, tc := range map[string]struct {
		primary []byte
		want    string
	}{
		"deep nesting":     {append([]byte("<metadata>"), bytes.Repeat([]byte("<a>"), 1<<20)...), "nested"},
		"many entries":     {[]byte(many.String()), "entries of"},
		"entry not sha256": {[]byte(`<metadata>` + strings.Replace(fmt.Sprintf(entry, 1), `type="sha256"`, `type="md5"`, 1) + `</metadata>`), "checksum md5"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, c := hostilePrimary(t, tc.primary)
			_, err := r.Find(t.Context(), c, Request{Name: agentName, Version: hotfix.MustParseVersion("202608.26.2")})
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Find = %.300v, want an operational error saying %q", err, tc.want)
			}
		})
	}
}

// maxFindAlloc is the memory a hostile primary index may make Find
// allocate, in total: the route's stated cap.
const maxFindAlloc = 64 << 20

// packed compresses head, then n bytes of fill repeated, then tail, as a
// file of type ext (zst, xz) would be, streaming, so the test never holds
// the expanded form.
func packed(t *testing.T, ext, head, fill string, n int, tail string, zopts ...zstd.EOption) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.WriteCloser
	switch ext {
	case "zst":
		zw, err := zstd.NewWriter(&b, append([]zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1)}, zopts...)...)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	case "xz":
		xw, err := xz.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		w = xw
	}
	io.WriteString(w, head)
	if n > 0 {
		chunk := strings.Repeat(fill, max(1, (1<<20)/len(fill)))
		for written := 0; written < n; written += len(chunk) {
			io.WriteString(w, chunk)
		}
	}
	io.WriteString(w, tail)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// singleSegment is packed's zst as one single-segment frame, whose window
// is its whole content.
func singleSegment(t *testing.T, head, fill string, n int, tail string) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll([]byte(head+strings.Repeat(fill, n/len(fill))+tail), nil)
}

// xzDictionary rewrites the dictionary size that the first block of an xz
// stream declares (the LZMA2 filter's property byte; code 36 is 1 GiB) and
// that block header's CRC32.
func xzDictionary(t *testing.T, stream []byte, code byte) []byte {
	t.Helper()
	b := bytes.Clone(stream)
	hdr := b[12:] // after the stream header
	size := (int(hdr[0]) + 1) * 4
	pos := 2
	for _, present := range []bool{hdr[1]&0x40 != 0, hdr[1]&0x80 != 0} {
		if present {
			for hdr[pos]&0x80 != 0 {
				pos++
			}
			pos++
		}
	}
	if hdr[pos] != 0x21 || hdr[pos+1] != 1 {
		t.Fatalf("first filter is %#x, not LZMA2", hdr[pos])
	}
	hdr[pos+2] = code
	binary.LittleEndian.PutUint32(hdr[size-4:], crc32.ChecksumIEEE(hdr[:size-4]))
	return b
}

// allocated is how many bytes f allocates in total.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestPrimaryMemory: a primary index of a few tens of KiB that expands to
// one enormous text node, attribute or comment, declares an enormous
// decompression window, or lists the agent with enormous fields is
// refused, operationally, before Find allocates maxFindAlloc in total.
// Not parallel: TotalAlloc counts the whole process.
func TestPrimaryMemory(t *testing.T) {
	const pkg = `<package><name>aks-node-controller</name><arch>x86_64</arch><version epoch="0" ver="202608.26.2" rel="1"/><checksum type="sha256">` + "%064d" + `</checksum><size package="1"/><location href="`
	long := func(n int) string {
		var b strings.Builder
		b.WriteString("<metadata>")
		for i := range n {
			fmt.Fprintf(&b, pkg, i)
			b.WriteString(strings.Repeat("p", 60<<10) + `"/></package>`)
		}
		return b.String() + "</metadata>"
	}(64)
	smallXZ := packed(t, "xz", "<metadata>", "<a/>", 1<<10, "</metadata>")
	for _, tc := range []struct {
		name, ext string
		packed    []byte
	}{
		{"a text node of 255 MiB", "zst", packed(t, "zst", "<metadata><package><name>", "y", 255<<20, "</name></package></metadata>")},
		{"a text node of 24 MiB", "xz", packed(t, "xz", "<metadata><package><name>", "y", 24<<20, "</name></package></metadata>")},
		{"a 256 MiB window", "zst", packed(t, "zst", "<metadata>", "<a/>", 64<<20, "</metadata>", zstd.WithWindowSize(256<<20))},
		{"a 1 GiB dictionary", "xz", xzDictionary(t, smallXZ, 36)},
		{"a single segment of 32 MiB", "zst", singleSegment(t, "<metadata>", "<a/>", 32<<20, "</metadata>")},
		{"an attribute of 255 MiB", "zst", packed(t, "zst", fmt.Sprintf("<metadata>"+pkg, 0), "p", 255<<20, `"/></package></metadata>`)},
		{"a name split by comments", "zst", packed(t, "zst", "<metadata><package><name>", strings.Repeat("y", 1000)+"<!---->", 64<<20, "</name></package></metadata>")},
		{"a comment of 255 MiB", "zst", packed(t, "zst", "<metadata><!--", "y", 255<<20, "--></metadata>")},
		{"the agent with long fields", "zst", packed(t, "zst", "", long, 4096*len(long)/64, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := hostileRPMRepo(t, "repodata/primary.xml."+tc.ext, tc.packed)
			var err error
			n := allocated(func() {
				_, err = r.Find(t.Context(), c, Request{Name: agentName, Version: hotfix.MustParseVersion("202608.26.2"), TempDir: t.TempDir(), TempPattern: "primary-*"})
			})
			t.Logf("%d KiB %s: %d MiB allocated; %.200v", len(tc.packed)>>10, tc.ext, n>>20, err)
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) {
				t.Errorf("Find = %.300v, want an operational error", err)
			}
			if n > maxFindAlloc {
				t.Errorf("Find allocated %d MiB, want at most %d MiB", n>>20, maxFindAlloc>>20)
			}
		})
	}
}

func TestParseReleaseDate(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, s := range []string{"Tue, 01 Dec 2026 10:00:00 UTC", "Tue, 1 Dec 2026 10:00:00 GMT", "Tue, 01 Dec 2026 10:00:00 Z", "Tue, 01 Dec 2026 10:00:00 +0000"} {
		if got, err := parseReleaseDate(s); err != nil || !got.Equal(want) {
			t.Errorf("parseReleaseDate(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"Tue, 01 Dec 2026 10:00:00 CEST", "Tue, 01 Dec 2026 12:00:00 +0200", "2026-12-01T10:00:00Z", "", "Tue, 01 Dec 2026 10:00:00"} {
		if got, err := parseReleaseDate(s); err == nil {
			t.Errorf("parseReleaseDate(%q) = %v, want an error", s, got)
		}
	}
}

// TestRPMReposStopAfterPartialWrite: a repository that fails after part
// of the agent was written ends the search, so a second repository never
// appends its agent to the first one's partial copy (download-hotfix
// then falls back to dnf with a fresh file).
func TestRPMReposStopAfterPartialWrite(t *testing.T) {
	g := newGPG(t)
	r := newRPMRepo(t, g)
	big := bytes.Repeat([]byte("A"), 256<<10)
	if err := harness.WriteRPMRepo(t.Context(), r.dir, []string{buildRPM(t, g, agentName, "202608.26.2", "1.azl3", map[string][]byte{AgentMember: big})}); err != nil {
		t.Fatal(err)
	}
	real, err := exec.LookPath("rpm2cpio")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	// The first call dies 100 kB into the payload, the second works.
	once := filepath.Join(bin, "once")
	os.WriteFile(filepath.Join(bin, "rpm2cpio"), fmt.Appendf(nil, "#!/bin/sh\nif [ ! -e %[1]s ]; then touch %[1]s; %[2]s \"$1\" | head -c 100000; exit 1; fi\nexec %[2]s \"$1\"\n", once, real), 0o755)
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	repos, err := FromRepoFiles(r.root, "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	mirror := repos[0]
	mirror.ID = "mirror"
	repos = append(repos, mirror)
	var out bytes.Buffer
	_, err = repos.Fetch(t.Context(), r.client, Request{Name: agentName, Version: hotfix.MustParseVersion("202608.26.2"), Member: AgentMember, Max: 1 << 20, TempDir: t.TempDir(), TempPattern: "pkg-*", Now: time.Now()}, &out)
	var ie *IntegrityError
	if err == nil || errors.As(err, &ie) || strings.Contains(err.Error(), "mirror") {
		t.Errorf("Fetch = %v with %d bytes written; want the first repository's operational error, and no second try", err, out.Len())
	}
}

func TestGlobalKeyringsSkipTheUnreadable(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	key, _ := g.PublicKey(t.Context(), false)
	root := node(t, map[string][]byte{
		"etc/apt/sources.list.d/microsoft-prod.list": []byte("deb https://a noble main\n"),
		"etc/apt/trusted.gpg.d/a-keybox.gpg":         []byte("KBXfnot a keyring"),
		"etc/apt/trusted.gpg.d/microsoft.gpg":        key,
	})
	repo, err := FromSources(root, "amd64")
	if err != nil || len(repo.Keyring) != 1 {
		t.Errorf("FromSources = %+v, %v; want the readable keyring's key", repo, err)
	}
}

// TestFromRepoFilesRaw: values are read as written; ini's %(name)s
// references, which dnf does not have, are not expanded (they double per
// round: a 55-byte file would take gigabytes).
func TestFromRepoFilesRaw(t *testing.T) {
	t.Parallel()
	root := node(t, map[string][]byte{
		"etc/os-release":         []byte("ID=azurelinux\nVERSION_ID=3.0\n"),
		"etc/yum.repos.d/a.repo": []byte("[a]\nx=%(x)s%(x)s\nbaseurl=https://h/%(x)s\ngpgcheck=1\n"),
	})
	repos, err := FromRepoFiles(root, "x86_64")
	if err != nil || len(repos) != 1 || repos[0].BaseURL != "https://h/%(x)s" {
		t.Errorf("FromRepoFiles = %+v, %v", repos, err)
	}
}

func FuzzSources(f *testing.F) {
	f.Add([]byte("deb [arch=amd64 signed-by=/k.gpg] https://a noble main\n"))
	f.Add([]byte("Types: deb\nURIs: https://a\nSuites: noble\nComponents: main\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, parse := range []func([]byte) ([]source, error){parseOneLine, parseDeb822} {
			entries, err := parse(data)
			if err == nil && len(entries) == 0 {
				t.Error("no error and no entry")
			}
			for _, e := range entries {
				if e.uri == "" || e.suite == "" || e.component == "" {
					t.Errorf("entry %+v lacks a field", e)
				}
			}
		}
	})
}

func FuzzVerifyInRelease(f *testing.F) {
	f.Add([]byte("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nSuite: noble\n-----BEGIN PGP SIGNATURE-----\n\nxx\n-----END PGP SIGNATURE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// No keys: nothing verifies, whatever the bytes.
		if _, err := VerifyInRelease(data, nil, time.Now()); err == nil {
			t.Error("verified without a key")
		}
	})
}

func FuzzParsePrimary(f *testing.F) {
	f.Add([]byte(`<metadata><package><name>aks-node-controller</name><arch>x86_64</arch><version ver="1" rel="1"/></package></metadata>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		pkgs, err := parsePrimary("primary.xml", bytes.NewReader(data), agentName, "x86_64")
		if err == nil && len(pkgs) > maxCandidates {
			t.Errorf("%d entries", len(pkgs))
		}
		for _, p := range pkgs {
			if p.Name != agentName {
				t.Errorf("entry of %q", p.Name)
			}
		}
	})
}

// TestDecompressCap: an index expanding past MaxIndexExpanded reads as
// errExpanded, whatever its compression.
func TestDecompressCap(t *testing.T) {
	t.Parallel()
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	chunk := make([]byte, 1<<20)
	for range MaxIndexExpanded>>20 + 1 {
		zw.Write(chunk)
	}
	zw.Close()
	for name, packed := range map[string][]byte{
		"Packages.gz":      gz.Bytes(),
		"primary.xml.zst":  packed(t, "zst", "", "y", MaxIndexExpanded+1, ""),
		"Packages (plain)": make([]byte, MaxIndexExpanded+1),
	} {
		r, done, err := decompress(name, bytes.NewReader(packed))
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		done()
		if !errors.Is(err, errExpanded) || !errors.Is(err, errOverLimit) || n != MaxIndexExpanded {
			t.Errorf("%s: read %d bytes, %v; want %d, then errExpanded", name, n, err, MaxIndexExpanded)
		}
	}
}

// TestIndexOverLimit: a signed Packages index that needs more memory than
// this route allows is operational (apt has its own limits), not a
// contradiction of the signature; one that does not decompress is.
func TestIndexOverLimit(t *testing.T) {
	t.Parallel()
	xzIndex := packed(t, "xz", "Package: aks-node-controller\n", "", 0, "")
	_, err := parseIndex("Packages.xz", bytes.NewReader(xzDictionary(t, xzIndex, 36)), agentName)
	var ie *IntegrityError
	if !errors.Is(err, errOverLimit) || errors.As(err, &ie) {
		t.Errorf("parseIndex with a 1 GiB dictionary = %v, want an operational error", err)
	}
	if _, err := parseIndex("Packages.xz", strings.NewReader("not xz"), agentName); !errors.As(err, &ie) {
		t.Errorf("parseIndex of garbage = %v, want an IntegrityError", err)
	}
}

func TestCapReader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size    int
		wantErr error
	}{{10, nil}, {11, errExpanded}} {
		b, err := io.ReadAll(&capReader{r: iotest.OneByteReader(bytes.NewReader(make([]byte, tc.size))), n: 10})
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && len(b) != 10) {
			t.Errorf("%d bytes under a cap of 10: %d read, %v; want %v", tc.size, len(b), err, tc.wantErr)
		}
	}
}
