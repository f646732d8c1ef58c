package aptrepo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ulikunitz/xz"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/pkgmgr"
)

// gpg is a real gpg with its own home and one signing key.
type gpg struct {
	t    *testing.T
	home string
}

func newGPG(t *testing.T) *gpg {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("no gpg (Debian package gnupg)")
	}
	// Short: gpg-agent's socket path must fit in a sockaddr.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	g := &gpg{t: t, home: home}
	t.Cleanup(func() {
		c := exec.Command("gpgconf", "--kill", "gpg-agent")
		c.Env = append(os.Environ(), "GNUPGHOME="+home)
		c.Run()
		os.RemoveAll(home)
	})
	g.run(nil, "--quick-gen-key", "nodehotfix test <test@example.invalid>", "ed25519", "sign", "never")
	return g
}

func (g *gpg) run(stdin []byte, args ...string) []byte {
	g.t.Helper()
	c := exec.Command("gpg", append([]string{"--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
	c.Env = append(os.Environ(), "GNUPGHOME="+g.home)
	c.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		g.t.Fatalf("gpg %v: %v\n%s", args, err, errOut.String())
	}
	return out.Bytes()
}

func (g *gpg) keyring() openpgp.EntityList {
	g.t.Helper()
	kr, err := openpgp.ReadKeyRing(bytes.NewReader(g.run(nil, "--export")))
	if err != nil {
		g.t.Fatal(err)
	}
	return kr
}

func (g *gpg) clearsign(text string) []byte {
	g.t.Helper()
	return g.run([]byte(text), "--clearsign", "--digest-algo", "SHA256")
}

// repo is a repository tree served over HTTPS.
type repo struct {
	files  map[string][]byte
	srv    *httptest.Server
	client *fetch.Client
	deb    []byte
}

const (
	agentName = "aks-node-controller"
	wantFull  = "202608.26.2-ubuntu24.04u1"
)

// newRepo builds a signed repository: a real .deb (dpkg-deb), its
// Packages.xz beside a decoy version (.30 for .3's prefix trap) and another
// package, and a Release listing the index, clearsigned by g.
func newRepo(t *testing.T, g *gpg, validUntil time.Time) *repo {
	t.Helper()
	r := &repo{files: map[string][]byte{}}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, ok := r.files[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(r.srv.Close)
	var err error
	r.client, err = fetch.New(fetch.Config{ExtraRootsPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})})
	if err != nil {
		t.Fatal(err)
	}
	r.deb = buildDeb(t, wantFull)
	debPath := "pool/main/a/" + agentName + "/" + agentName + "_" + wantFull + "_amd64.deb"
	r.files["/"+debPath] = r.deb
	var packages strings.Builder
	for _, p := range []struct {
		name, version, file string
		body                []byte
	}{
		{agentName, wantFull, debPath, r.deb},
		{agentName, "202608.26.20-ubuntu24.04u1", "pool/main/a/x_20.deb", []byte("decoy")},
		{"moby-runc", "1.1.12-ubuntu24.04u1", "pool/main/m/runc.deb", []byte("other")},
	} {
		sum := sha256.Sum256(p.body)
		fmt.Fprintf(&packages, "Package: %s\nVersion: %s\nArchitecture: amd64\nFilename: %s\nSize: %d\nSHA256: %s\nDescription: test\n\n", p.name, p.version, p.file, len(p.body), hex.EncodeToString(sum[:]))
	}
	var packed bytes.Buffer
	xw, err := xz.NewWriter(&packed)
	if err != nil {
		t.Fatal(err)
	}
	xw.Write([]byte(packages.String()))
	xw.Close()
	r.files["/dists/noble/main/binary-amd64/Packages.xz"] = packed.Bytes()
	sum := sha256.Sum256(packed.Bytes())
	release := fmt.Sprintf("Origin: test\nSuite: noble\nCodename: noble\nDate: %s\nValid-Until: %s\nArchitectures: amd64\nComponents: main\nSHA256:\n %s %d main/binary-amd64/Packages.xz\n",
		time.Now().UTC().Format(time.RFC1123), validUntil.UTC().Format(time.RFC1123), hex.EncodeToString(sum[:]), packed.Len())
	r.files["/dists/noble/InRelease"] = g.clearsign(release)
	return r
}

// buildDeb makes a .deb holding an agent binary with dpkg-deb.
func buildDeb(t *testing.T, version string) []byte {
	t.Helper()
	return buildDebWith(t, version, "xz")
}

// buildDebWith makes the .deb with its data archive compressed by comp
// (dpkg-deb -Z: xz, zstd, gzip or none).
func buildDebWith(t *testing.T, version, comp string) []byte {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for path, content := range map[string]string{
		"DEBIAN/control": fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: test <test@example.invalid>\nDescription: test agent\n", agentName, version),
		AgentMember:      "#!/bin/sh\necho " + version + "\n",
	} {
		p := filepath.Join(root, path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "agent.deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Z"+comp, "--build", root, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *repo) find(t *testing.T, kr openpgp.EntityList, v string, now time.Time) (Package, error) {
	t.Helper()
	return Find(t.Context(), r.client, Repo{URL: r.srv.URL, Suite: "noble", Component: "main", Arch: "amd64", Keyring: kr}, agentName, hotfix.MustParseVersion(v), now)
}

func TestFind(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	r := newRepo(t, g, time.Now().Add(24*time.Hour))
	p, err := r.find(t, g.keyring(), "202608.26.2", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(r.deb)
	if p.Version != wantFull || p.SHA256 != hex.EncodeToString(sum[:]) || p.Size != int64(len(r.deb)) || !strings.HasSuffix(p.URL, "_amd64.deb") {
		t.Errorf("Find = %+v", p)
	}
	// The .deb it names downloads and verifies.
	var got bytes.Buffer
	if err := r.client.Download(t.Context(), p.URL, fetch.Want{SHA256: p.SHA256, Size: p.Size}, &got); err != nil || !bytes.Equal(got.Bytes(), r.deb) {
		t.Errorf("download the found .deb: %v", err)
	}
}

// TestFindRefuses: every way the repository can contradict its signature is
// an IntegrityError; what only makes the route unavailable is not.
func TestFindRefuses(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	other := newGPG(t)
	now := time.Now()
	integrityCases := map[string]func(r *repo) (openpgp.EntityList, time.Time){
		"another key": func(r *repo) (openpgp.EntityList, time.Time) { return other.keyring(), now },
		"tampered release": func(r *repo) (openpgp.EntityList, time.Time) {
			r.files["/dists/noble/InRelease"] = bytes.Replace(r.files["/dists/noble/InRelease"], []byte("Suite: noble"), []byte("Suite: nobl3"), 1)
			return g.keyring(), now
		},
		"unsigned text before the message": func(r *repo) (openpgp.EntityList, time.Time) {
			r.files["/dists/noble/InRelease"] = append([]byte("SHA256:\n evil 1 main/binary-amd64/Packages.xz\n"), r.files["/dists/noble/InRelease"]...)
			return g.keyring(), now
		},
		"not signed at all": func(r *repo) (openpgp.EntityList, time.Time) {
			r.files["/dists/noble/InRelease"] = []byte("Suite: noble\n")
			return g.keyring(), now
		},
		"index differs from the release": func(r *repo) (openpgp.EntityList, time.Time) {
			b := r.files["/dists/noble/main/binary-amd64/Packages.xz"]
			r.files["/dists/noble/main/binary-amd64/Packages.xz"] = append(bytes.Clone(b[:len(b)-1]), b[len(b)-1]^1)
			return g.keyring(), now
		},
		"expired release": func(r *repo) (openpgp.EntityList, time.Time) { return g.keyring(), now.Add(48 * time.Hour) },
	}
	for name, mutate := range integrityCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRepo(t, g, now.Add(24*time.Hour))
			kr, at := mutate(r)
			_, err := r.find(t, kr, "202608.26.2", at)
			var ie *IntegrityError
			if !errors.As(err, &ie) {
				t.Errorf("Find = %v, want an IntegrityError", err)
			}
		})
	}
	operational := map[string]struct {
		mutate func(r *repo)
		v      string
		is     error
	}{
		"no InRelease":    {func(r *repo) { delete(r.files, "/dists/noble/InRelease") }, "202608.26.2", nil},
		"no index":        {func(r *repo) { delete(r.files, "/dists/noble/main/binary-amd64/Packages.xz") }, "202608.26.2", nil},
		"no such patch":   {func(*repo) {}, "202608.26.3", pkgmgr.ErrNoPackage},
		"repository down": {func(r *repo) { r.srv.Close() }, "202608.26.2", nil},
	}
	for name, tc := range operational {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRepo(t, g, now.Add(24*time.Hour))
			tc.mutate(r)
			_, err := r.find(t, g.keyring(), tc.v, now)
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Find = %v, want an operational error (%v)", err, tc.is)
			}
		})
	}
}

func TestExtract(t *testing.T) {
	t.Parallel()
	for _, comp := range []string{"xz", "zstd", "gzip", "none"} {
		t.Run(comp, func(t *testing.T) {
			t.Parallel()
			pkg := buildDebWith(t, wantFull, comp)
			var out bytes.Buffer
			if err := Extract(pkg, AgentMember, 1<<20, &out); err != nil || out.String() != "#!/bin/sh\necho "+wantFull+"\n" {
				t.Fatalf("Extract = %v, %q", err, out.String())
			}
		})
	}
	pkg := buildDeb(t, wantFull)
	var ie *IntegrityError
	for name, err := range map[string]error{
		"no such member": Extract(pkg, "usr/bin/other", 1<<20, io.Discard),
		"over the cap":   Extract(pkg, AgentMember, 4, io.Discard),
		"not a package":  Extract([]byte("!<arch>\ngarbage"), AgentMember, 1<<20, io.Discard),
		"truncated":      Extract(pkg[:len(pkg)/2], AgentMember, 1<<20, io.Discard),
	} {
		if !errors.As(err, &ie) {
			t.Errorf("%s: Extract = %v, want an IntegrityError", name, err)
		}
	}
}
