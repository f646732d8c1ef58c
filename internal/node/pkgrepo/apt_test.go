package pkgrepo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/test/harness"
)

const (
	agentName = "aks-node-controller"
	wantFull  = "202608.26.2-ubuntu24.04u1"
)

// newGPG is a real gpg with a fresh signing key, removed after t.
func newGPG(t *testing.T) *harness.GPG {
	t.Helper()
	g, err := harness.NewGPG(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func keyring(t *testing.T, g *harness.GPG) openpgp.EntityList {
	t.Helper()
	b, err := g.PublicKey(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := openpgp.ReadKeyRing(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// agentBody is the agent file of version's package.
func agentBody(version string) []byte { return []byte("#!/bin/sh\necho " + version + "\n") }

// buildDeb makes a real .deb of the agent with dpkg-deb, its data archive
// compressed by comp (dpkg-deb -Z), and returns its bytes.
func buildDeb(t *testing.T, name, version, comp string) string {
	t.Helper()
	p, err := harness.BuildDeb(t.Context(), t.TempDir(), harness.Deb{
		Name: name, Version: version, Compression: comp,
		Files: map[string][]byte{AgentMember: agentBody(version)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// repo is a signed repository on disk served over HTTPS.
type repo struct {
	harness.AptRepo
	srv *httptest.Server
	// serve answers srv's requests: the repository's files.
	serve  http.Handler
	client *fetch.Client
	deb    string
	debs   []string
}

// newRepo builds a repository with the real tools (harness.WriteAptRepo):
// the agent's .deb beside a decoy version (.20, a prefix trap for .2) and
// another package, signed by g.
func newRepo(t *testing.T, g *harness.GPG, validUntil time.Time) *repo {
	t.Helper()
	r := &repo{AptRepo: harness.AptRepo{Dir: t.TempDir(), Suite: "noble", Component: "main", Arch: "amd64"}}
	r.deb = buildDeb(t, agentName, wantFull, "xz")
	r.debs = []string{r.deb, buildDeb(t, agentName, "202608.26.20-ubuntu24.04u1", "xz"), buildDeb(t, "moby-runc", "1.1.12-ubuntu24.04u1", "xz")}
	if err := harness.WriteAptRepo(t.Context(), r.AptRepo, g, r.debs, validUntil); err != nil {
		t.Fatal(err)
	}
	r.serve = http.FileServer(http.Dir(r.Dir))
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve.ServeHTTP(w, req) }))
	t.Cleanup(r.srv.Close)
	var err error
	r.client, err = fetch.New(fetch.Config{ExtraRootsPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *repo) apt(kr openpgp.EntityList) Apt {
	return Apt{URL: r.srv.URL, Suite: r.Suite, Component: r.Component, Arch: r.Arch, Keyring: kr}
}

func (r *repo) find(t *testing.T, kr openpgp.EntityList, v string, now time.Time) (Package, error) {
	t.Helper()
	return r.apt(kr).Find(t.Context(), r.client, Request{Name: agentName, Version: hotfix.MustParseVersion(v), TempDir: t.TempDir(), TempPattern: "index-*", Now: now})
}

// edit rewrites a file of the repository.
func (r *repo) edit(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func flipLast(b []byte) []byte {
	b = bytes.Clone(b)
	b[len(b)-1] ^= 1
	return b
}

func TestFind(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	r := newRepo(t, g, time.Now().Add(24*time.Hour))
	p, err := r.find(t, keyring(t, g), "202608.26.2", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	deb, _ := os.ReadFile(r.deb)
	sum := sha256.Sum256(deb)
	if p.Version != wantFull || p.SHA256 != hex.EncodeToString(sum[:]) || p.Size != int64(len(deb)) || !strings.HasSuffix(p.URL, "_"+wantFull+"_amd64.deb") {
		t.Errorf("Find = %+v", p)
	}
}

func TestFetch(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	r := newRepo(t, g, time.Now().Add(24*time.Hour))
	tmp := t.TempDir()
	req := Request{Name: agentName, Version: hotfix.MustParseVersion("202608.26.2"), Member: AgentMember, Max: 1 << 20, TempDir: tmp, TempPattern: "pkg-*", Now: time.Now()}
	var out bytes.Buffer
	p, err := r.apt(keyring(t, g)).Fetch(t.Context(), r.client, req, &out)
	if err != nil || p.Version != wantFull || !bytes.Equal(out.Bytes(), agentBody(wantFull)) {
		t.Fatalf("Fetch = %+v, %v, %q", p, err, out.String())
	}
	// A .deb that differs from the index is never opened.
	deb := filepath.Join(r.Dir, strings.TrimPrefix(p.URL, r.srv.URL))
	r.edit(t, deb, flipLast)
	out.Reset()
	_, err = r.apt(keyring(t, g)).Fetch(t.Context(), r.client, req, &out)
	var ie *IntegrityError
	if !errors.As(err, &ie) || out.Len() != 0 {
		t.Errorf("Fetch of a tampered .deb = %v, wrote %d bytes; want an IntegrityError and nothing", err, out.Len())
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("Fetch left %d files in its temp dir", len(left))
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
		"another key": func(r *repo) (openpgp.EntityList, time.Time) { return keyring(t, other), now },
		"tampered release": func(r *repo) (openpgp.EntityList, time.Time) {
			r.edit(t, r.InRelease(), func(b []byte) []byte { return bytes.Replace(b, []byte("Suite: noble"), []byte("Suite: nobl3"), 1) })
			return keyring(t, g), now
		},
		"unsigned text before the message": func(r *repo) (openpgp.EntityList, time.Time) {
			r.edit(t, r.InRelease(), func(b []byte) []byte {
				return append([]byte("SHA256:\n evil 1 main/binary-amd64/Packages.xz\n"), b...)
			})
			return keyring(t, g), now
		},
		"not signed at all": func(r *repo) (openpgp.EntityList, time.Time) {
			r.edit(t, r.InRelease(), func([]byte) []byte { return []byte("Suite: noble\n") })
			return keyring(t, g), now
		},
		"expired release": func(r *repo) (openpgp.EntityList, time.Time) { return keyring(t, g), now.Add(48 * time.Hour) },
		"a SHA-1 signature": func(r *repo) (openpgp.EntityList, time.Time) {
			r.edit(t, r.InRelease(), func(b []byte) []byte {
				block, _ := clearsign.Decode(b)
				signed, err := g.Run(t.Context(), append(block.Plaintext, '\n'), "--clearsign", "--digest-algo", "SHA1")
				if err != nil {
					t.Fatal(err)
				}
				return signed
			})
			return keyring(t, g), now
		},
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
		"no InRelease": {func(r *repo) { os.Remove(r.InRelease()) }, "202608.26.2", nil},
		"an empty InRelease": {func(r *repo) {
			r.edit(t, r.InRelease(), func([]byte) []byte { return []byte("\n") })
		}, "202608.26.2", nil},
		"no index": {func(r *repo) { os.Remove(r.Index()) }, "202608.26.2", nil},
		"index differs from the release": {func(r *repo) {
			r.edit(t, r.Index(), flipLast)
		}, "202608.26.2", nil},
		"no such patch":   {func(*repo) {}, "202608.26.3", pkgmgr.ErrNoPackage},
		"repository down": {func(r *repo) { r.srv.Close() }, "202608.26.2", nil},
	}
	for name, tc := range operational {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRepo(t, g, now.Add(24*time.Hour))
			tc.mutate(r)
			_, err := r.find(t, keyring(t, g), tc.v, now)
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Find = %v, want an operational error (%v)", err, tc.is)
			}
		})
	}
}

// TestExtractLinks: an agent path that is a link in the data archive is
// taken as dpkg installs it: a hard link has its target's content, a
// symlink is followed within the package (relative, absolute, through a
// symlinked directory, a chain) to a regular member. One that leads out
// of the package, to a directory, or round a loop is refused as
// operational, not as a contradiction of the signature: the package
// manager may still install it.
func TestExtractLinks(t *testing.T) {
	t.Parallel()
	body := agentBody(wantFull)
	lib := map[string][]byte{"usr/lib/aks/agent": body}
	for name, tc := range map[string]struct {
		deb harness.Deb
		ok  bool
	}{
		"a hard link":           {harness.Deb{Files: map[string][]byte{"opt/aks/agent": body}, Hardlinks: map[string]string{AgentMember: "opt/aks/agent"}}, true},
		"a relative symlink":    {harness.Deb{Files: lib, Symlinks: map[string]string{AgentMember: "../lib/aks/agent"}}, true},
		"an absolute symlink":   {harness.Deb{Files: lib, Symlinks: map[string]string{AgentMember: "/usr/lib/aks/agent"}}, true},
		"a chain of symlinks":   {harness.Deb{Files: lib, Symlinks: map[string]string{AgentMember: "aks-node-controller.real", "usr/bin/aks-node-controller.real": "../lib/aks/agent"}}, true},
		"a symlinked directory": {harness.Deb{Files: map[string][]byte{"usr/lib/aks-1/agent": body}, Symlinks: map[string]string{"usr/lib/aks": "aks-1", AgentMember: "../lib/aks/../aks/agent"}}, true},
		"out of the package":    {harness.Deb{Files: lib, Symlinks: map[string]string{AgentMember: "/usr/local/bin/aks-node-controller"}}, false},
		"to a directory":        {harness.Deb{Files: lib, Symlinks: map[string]string{AgentMember: "../lib/aks"}}, false},
		"a loop":                {harness.Deb{Files: lib, Symlinks: map[string]string{AgentMember: "aks-node-controller"}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.deb.Name, tc.deb.Version = agentName, wantFull
			p, err := harness.BuildDeb(t.Context(), t.TempDir(), tc.deb)
			if err != nil {
				t.Fatal(err)
			}
			pkg, _ := os.ReadFile(p)
			var out bytes.Buffer
			err = Extract(bytes.NewReader(pkg), AgentMember, 1<<20, &out)
			var ie *IntegrityError
			switch {
			case tc.ok && (err != nil || !bytes.Equal(out.Bytes(), body)):
				t.Errorf("Extract = %v, %q; want the agent", err, out.String())
			case !tc.ok && (err == nil || errors.As(err, &ie) || out.Len() != 0):
				t.Errorf("Extract = %v, wrote %d bytes; want an operational error and nothing", err, out.Len())
			}
		})
	}
}

// TestVerifyInReleaseDigest: apt refuses an InRelease whose signature
// hashes with a weak digest ("The following signatures were invalid",
// then "The repository ... is not signed"; apt 2.6 here, SHA-1), as it
// refuses one by an unknown key: both are IntegrityErrors.
func TestVerifyInReleaseDigest(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	kr := keyring(t, g)
	release := []byte("Suite: noble\nCodename: noble\nSHA256:\n " + strings.Repeat("0", 64) + " 1 main/binary-amd64/Packages\n")
	for _, tc := range []struct {
		digest string
		ok     bool
	}{{"SHA1", false}, {"RIPEMD160", false}, {"SHA224", true}, {"SHA256", true}, {"SHA512", true}} {
		signed, err := g.Run(t.Context(), release, "--clearsign", "--digest-algo", tc.digest)
		if err != nil {
			t.Fatal(err)
		}
		_, err = VerifyInRelease(signed, kr, time.Now())
		var ie *IntegrityError
		if tc.ok && err != nil || !tc.ok && !errors.As(err, &ie) {
			t.Errorf("VerifyInRelease of a %s signature = %v, want ok %v (else an IntegrityError)", tc.digest, err, tc.ok)
		}
	}
}

// midSync puts r in the state of a mirror caught mid-sync: its InRelease
// is the new one, but its Packages index by name is still the previous
// one, which did not list the agent. With byHash, r serves indexes by
// digest too, the new one included.
func (r *repo) midSync(t *testing.T, g *harness.GPG, byHash bool) {
	t.Helper()
	prev := harness.AptRepo{Dir: t.TempDir(), Suite: r.Suite, Component: r.Component, Arch: r.Arch}
	if err := harness.WriteAptRepo(t.Context(), prev, g, r.debs[2:], time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if byHash {
		r.ByHash = true
		if err := harness.WriteAptRepo(t.Context(), r.AptRepo, g, r.debs, time.Now().Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"Packages", "Packages.xz"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(prev.Index()), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(r.Index()), name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFindMidSync: an index that differs from the signed Release is what
// a mirror serves mid-sync, or between fetching the InRelease and the
// index: Find fetches it by digest where the Release offers that, and
// otherwise once more; still differing, it is operational (apt would say
// "Hash Sum mismatch" and the package manager may still install), never
// an IntegrityError.
func TestFindMidSync(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	now := time.Now()
	t.Run("by hash", func(t *testing.T) {
		t.Parallel()
		r := newRepo(t, g, now.Add(24*time.Hour))
		r.midSync(t, g, true)
		if p, err := r.find(t, keyring(t, g), "202608.26.2", now); err != nil || p.Version != wantFull {
			t.Errorf("Find = %+v, %v; want the agent, through the index by hash", p, err)
		}
	})
	t.Run("no by-hash", func(t *testing.T) {
		t.Parallel()
		r := newRepo(t, g, now.Add(24*time.Hour))
		r.midSync(t, g, false)
		_, err := r.find(t, keyring(t, g), "202608.26.2", now)
		var ie *IntegrityError
		var ve *fetch.VerifyError
		if errors.As(err, &ie) || !errors.As(err, &ve) || ve.Reason != fetch.ReasonSize && ve.Reason != fetch.ReasonDigest {
			t.Errorf("Find = %v, want an operational error saying the index differs", err)
		}
	})
	t.Run("sync ends between tries", func(t *testing.T) {
		t.Parallel()
		r := newRepo(t, g, now.Add(24*time.Hour))
		fresh := http.FileServer(http.Dir(r.Dir))
		stale := t.TempDir()
		os.CopyFS(stale, os.DirFS(r.Dir))
		(&repo{AptRepo: harness.AptRepo{Dir: stale, Suite: r.Suite, Component: r.Component, Arch: r.Arch}, debs: r.debs}).midSync(t, g, false)
		var indexes atomic.Int32
		r.serve = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/Packages") && indexes.Add(1) == 1 {
				http.FileServer(http.Dir(stale)).ServeHTTP(w, req)
				return
			}
			fresh.ServeHTTP(w, req)
		})
		if p, err := r.find(t, keyring(t, g), "202608.26.2", now); err != nil || p.Version != wantFull || indexes.Load() != 2 {
			t.Errorf("Find = %+v, %v after %d index fetches; want the agent on the second", p, err, indexes.Load())
		}
	})
}

func TestExtract(t *testing.T) {
	t.Parallel()
	for _, comp := range []string{"xz", "zstd", "gzip", "none"} {
		t.Run(comp, func(t *testing.T) {
			t.Parallel()
			pkg, _ := os.ReadFile(buildDeb(t, agentName, wantFull, comp))
			var out bytes.Buffer
			if err := Extract(bytes.NewReader(pkg), AgentMember, 1<<20, &out); err != nil || !bytes.Equal(out.Bytes(), agentBody(wantFull)) {
				t.Fatalf("Extract = %v, %q", err, out.String())
			}
		})
	}
	pkg, _ := os.ReadFile(buildDeb(t, agentName, wantFull, "xz"))
	var ie *IntegrityError
	for name, err := range map[string]error{
		"no such member": Extract(bytes.NewReader(pkg), "usr/bin/other", 1<<20, io.Discard),
		"over the cap":   Extract(bytes.NewReader(pkg), AgentMember, 4, io.Discard),
		"not a package":  Extract(strings.NewReader("!<arch>\ngarbage"), AgentMember, 1<<20, io.Discard),
		"truncated":      Extract(bytes.NewReader(pkg[:len(pkg)/2]), AgentMember, 1<<20, io.Discard),
	} {
		if !errors.As(err, &ie) {
			t.Errorf("%s: Extract = %v, want an IntegrityError", name, err)
		}
	}
}
