package pkgrepo

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/test/harness"
)

const rpmFull = "202608.26.2-1.azl3"

// rpmRepo is a signed rpm repository built with the real tools (rpmbuild,
// rpmsign, createrepo_c), served over HTTPS under /3.0/prod/x86_64, and a
// node root whose rpm database trusts its key.
type rpmRepo struct {
	dir, root string
	srv       *httptest.Server
	client    *fetch.Client
	g         *harness.GPG
}

func buildRPM(t *testing.T, g *harness.GPG, name, version, release string, files map[string][]byte) string {
	t.Helper()
	p, err := harness.BuildRPM(t.Context(), t.TempDir(), harness.RPM{Name: name, Version: version, Release: release, Arch: "x86_64", Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if g != nil {
		if err := harness.SignRPM(t.Context(), g, p); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func newRPMRepo(t *testing.T, g *harness.GPG) *rpmRepo {
	t.Helper()
	r := &rpmRepo{dir: t.TempDir(), root: t.TempDir(), g: g}
	rpms := []string{
		buildRPM(t, g, agentName, "202608.26.2", "1.azl3", map[string][]byte{AgentMember: agentBody(rpmFull)}),
		buildRPM(t, g, agentName, "202608.26.20", "1.azl3", map[string][]byte{AgentMember: agentBody("decoy")}),
		buildRPM(t, g, "moby-runc", "1.1.12", "1.azl3", map[string][]byte{"usr/bin/runc": []byte("runc")}),
	}
	if err := harness.WriteRPMRepo(t.Context(), r.dir, rpms); err != nil {
		t.Fatal(err)
	}
	if err := harness.ImportRPMKey(t.Context(), g, r.root); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/3.0/prod/x86_64/", http.StripPrefix("/3.0/prod/x86_64", http.FileServer(http.Dir(r.dir))))
	r.srv = httptest.NewTLSServer(mux)
	t.Cleanup(r.srv.Close)
	var err error
	r.client, err = fetch.New(fetch.Config{ExtraRootsPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})})
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(r.root, "etc/yum.repos.d"), 0o755)
	os.WriteFile(filepath.Join(r.root, "etc/os-release"), []byte("ID=azurelinux\nVERSION_ID=\"3.0\"\n"), 0o644)
	r.writeRepoFile(t, fmt.Sprintf("[azurelinux-official-base]\nname=Azure Linux $releasever $basearch\nbaseurl=%s/$releasever/prod/$basearch\ngpgkey=file:///etc/pki/rpm-gpg/MICROSOFT-RPM-GPG-KEY\ngpgcheck=1\nrepo_gpgcheck=1\nenabled=1\n", r.srv.URL))
	return r
}

func (r *rpmRepo) writeRepoFile(t *testing.T, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.root, "etc/yum.repos.d/azurelinux-official-base.repo"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *rpmRepo) fetch(t *testing.T, version string, dst io.Writer) (Package, error) {
	t.Helper()
	repos, err := FromRepoFiles(r.root, "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	return repos.Fetch(t.Context(), r.client, Request{
		Name: agentName, Version: hotfix.MustParseVersion(version), Member: AgentMember, Max: 1 << 20,
		TempDir: t.TempDir(), TempPattern: "pkg-*", Now: time.Now(),
	}, dst)
}

// pkg is the path of the repository's agent package of version.
func (r *rpmRepo) pkg(version string) string {
	return filepath.Join(r.dir, "Packages", agentName+"-"+version+".x86_64.rpm")
}

func TestRPMFetch(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	r := newRPMRepo(t, g)
	var out bytes.Buffer
	p, err := r.fetch(t, "202608.26.2", &out)
	if err != nil || p.Version != rpmFull || !bytes.Equal(out.Bytes(), agentBody(rpmFull)) {
		t.Fatalf("Fetch = %+v, %v, %q", p, err, out.String())
	}
	if !strings.HasSuffix(p.URL, "/3.0/prod/x86_64/Packages/"+agentName+"-"+rpmFull+".x86_64.rpm") {
		t.Errorf("URL = %s", p.URL)
	}
}

// TestRPMFetchLinks: as TestExtractLinks, in an rpm's cpio payload,
// where a hard link set's content is stored with its last member in path
// order, so the agent's own entry is empty.
func TestRPMFetchLinks(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	body := agentBody("202608.26.3-1.azl3")
	lib := map[string][]byte{"usr/lib/aks/agent": body}
	for name, tc := range map[string]struct {
		rpm harness.RPM
		ok  bool
	}{
		"a hard link":        {harness.RPM{Files: lib, Hardlinks: map[string]string{AgentMember: "usr/lib/aks/agent"}}, true},
		"a relative symlink": {harness.RPM{Files: lib, Symlinks: map[string]string{AgentMember: "../lib/aks/agent"}}, true},
		"out of the package": {harness.RPM{Files: lib, Symlinks: map[string]string{AgentMember: "/usr/local/bin/aks-node-controller"}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRPMRepo(t, g)
			tc.rpm.Name, tc.rpm.Version, tc.rpm.Release, tc.rpm.Arch = agentName, "202608.26.3", "1.azl3", "x86_64"
			p, err := harness.BuildRPM(t.Context(), t.TempDir(), tc.rpm)
			if err != nil {
				t.Fatal(err)
			}
			if err := harness.SignRPM(t.Context(), g, p); err != nil {
				t.Fatal(err)
			}
			if err := harness.WriteRPMRepo(t.Context(), r.dir, []string{p}); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_, err = r.fetch(t, "202608.26.3", &out)
			var ie *IntegrityError
			switch {
			case tc.ok && (err != nil || !bytes.Equal(out.Bytes(), body)):
				t.Errorf("Fetch = %v, %q; want the agent", err, out.String())
			case !tc.ok && (err == nil || errors.As(err, &ie) || out.Len() != 0):
				t.Errorf("Fetch = %v, wrote %d bytes; want an operational error and nothing", err, out.Len())
			}
		})
	}
}

// TestRPMFetchRefuses: every way the package can contradict its own
// signature is an IntegrityError and nothing is written. The metadata is
// not signed, so bytes that differ from it, and a key the rpm database
// lacks (dnf imports gpgkey= and checks again), only make the route
// unavailable.
func TestRPMFetchRefuses(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	other := newGPG(t)
	reindex := func(t *testing.T, r *rpmRepo, pkg string) {
		if err := harness.WriteRPMRepo(t.Context(), r.dir, []string{pkg}); err != nil {
			t.Fatal(err)
		}
	}
	integrityCases := map[string]func(t *testing.T, r *rpmRepo){
		"tampered payload, re-indexed": func(t *testing.T, r *rpmRepo) {
			b, _ := os.ReadFile(r.pkg(rpmFull))
			tampered := filepath.Join(t.TempDir(), filepath.Base(r.pkg(rpmFull)))
			os.WriteFile(tampered, flipLast(b), 0o644)
			reindex(t, r, tampered)
		},
		"truncated package, re-indexed": func(t *testing.T, r *rpmRepo) {
			b, _ := os.ReadFile(r.pkg(rpmFull))
			truncated := filepath.Join(t.TempDir(), filepath.Base(r.pkg(rpmFull)))
			os.WriteFile(truncated, b[:len(b)-64], 0o644) // the header stays whole, so it is indexed
			reindex(t, r, truncated)
		},
		"unsigned package": func(t *testing.T, r *rpmRepo) {
			reindex(t, r, buildRPM(t, nil, agentName, "202608.26.2", "1.azl3", map[string][]byte{AgentMember: agentBody(rpmFull)}))
		},
		"signed package without the agent": func(t *testing.T, r *rpmRepo) {
			reindex(t, r, buildRPM(t, g, agentName, "202608.26.2", "1.azl3", map[string][]byte{"usr/bin/other": []byte("x")}))
		},
	}
	for name, mutate := range integrityCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRPMRepo(t, g)
			mutate(t, r)
			var out bytes.Buffer
			_, err := r.fetch(t, "202608.26.2", &out)
			var ie *IntegrityError
			if !errors.As(err, &ie) || out.Len() != 0 {
				t.Errorf("Fetch = %v, wrote %d bytes; want an IntegrityError and nothing", err, out.Len())
			}
		})
	}
	operational := map[string]struct {
		mutate func(t *testing.T, r *rpmRepo)
		v      string
		is     error
	}{
		"package differs from the metadata": {func(t *testing.T, r *rpmRepo) {
			b, _ := os.ReadFile(r.pkg(rpmFull))
			os.WriteFile(r.pkg(rpmFull), flipLast(b), 0o644)
		}, "202608.26.2", nil},
		"signed by a key the node does not trust": {func(t *testing.T, r *rpmRepo) {
			reindex(t, r, buildRPM(t, other, agentName, "202608.26.2", "1.azl3", map[string][]byte{AgentMember: agentBody(rpmFull)}))
		}, "202608.26.2", nil},
		"primary index differs from repomd.xml": {func(t *testing.T, r *rpmRepo) {
			m, _ := filepath.Glob(filepath.Join(r.dir, "repodata/*primary.xml.*"))
			for _, p := range m {
				b, _ := os.ReadFile(p)
				os.WriteFile(p, flipLast(b), 0o644)
			}
		}, "202608.26.2", nil},
		"no such patch":   {func(*testing.T, *rpmRepo) {}, "202608.26.3", pkgmgr.ErrNoPackage},
		"repository down": {func(_ *testing.T, r *rpmRepo) { r.srv.Close() }, "202608.26.2", nil},
		"no repomd.xml":   {func(_ *testing.T, r *rpmRepo) { os.Remove(filepath.Join(r.dir, "repodata/repomd.xml")) }, "202608.26.2", nil},
		"repomd.xml not xml": {func(_ *testing.T, r *rpmRepo) {
			os.WriteFile(filepath.Join(r.dir, "repodata/repomd.xml"), []byte("<repomd"), 0o644)
		}, "202608.26.2", nil},
		"a Content-Encoding label on the index, as Apache's AddEncoding x-gzip .gz sets": {func(_ *testing.T, r *rpmRepo) {
			inner := r.srv.Config.Handler
			r.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if strings.HasSuffix(req.URL.Path, ".gz") {
					w.Header().Set("Content-Encoding", "x-gzip")
				}
				inner.ServeHTTP(w, req)
			})
		}, "202608.26.2", nil},
		"an rpm database that does not open": {func(_ *testing.T, r *rpmRepo) {
			db, _ := filepath.Glob(filepath.Join(r.root, "root/.rpmdb/*"))
			for _, f := range db {
				os.WriteFile(f, []byte("garbage"), 0o644)
			}
		}, "202608.26.2", nil},
	}
	for name, tc := range operational {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRPMRepo(t, g)
			tc.mutate(t, r)
			_, err := r.fetch(t, tc.v, io.Discard)
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Fetch = %v, want an operational error (%v)", err, tc.is)
			}
		})
	}
}

func TestFromRepoFiles(t *testing.T) {
	t.Parallel()
	osr := map[string][]byte{"etc/os-release": []byte("ID=azurelinux\nVERSION_ID=\"3.0\"\n")}
	with := func(repo string) map[string][]byte {
		return map[string][]byte{"etc/os-release": osr["etc/os-release"], "etc/yum.repos.d/a.repo": []byte(repo)}
	}
	repos, err := FromRepoFiles(node(t, with(
		"[off]\nbaseurl=https://off\ngpgcheck=1\nenabled=0\n"+
			"[nosig]\nbaseurl=https://nosig\ngpgcheck=0\n"+
			"[plain]\nbaseurl=http://plain\ngpgcheck=1\n"+
			"[unknownvar]\nbaseurl=https://x/$contentdir\ngpgcheck=1\n"+
			"[base]\nname=Base # not a comment\nbaseurl=https://packages.microsoft.com/azurelinux/$releasever/prod/base/${basearch}/\n  https://mirror\ngpgcheck=True\n"+
			"[ms]\nbaseurl=https://packages.microsoft.com/azurelinux/3.0/prod/ms-oss/x86_64\ngpgcheck=yes\nenabled=1\n")), "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	if len(repos) != 2 || repos[0].ID != "base" || repos[0].BaseURL != "https://packages.microsoft.com/azurelinux/3.0/prod/base/x86_64" || repos[1].ID != "ms" {
		t.Errorf("FromRepoFiles = %+v", repos)
	}
	for name, files := range map[string]map[string][]byte{
		"no repo files":  osr,
		"none usable":    with("[nosig]\nbaseurl=https://nosig\ngpgcheck=0\n"),
		"no os-release":  {"etc/yum.repos.d/a.repo": []byte("[a]\nbaseurl=https://a\ngpgcheck=1\n")},
		"huge repo file": with(strings.Repeat("#", maxRepoFile+1)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromRepoFiles(node(t, files), "x86_64")
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) {
				t.Errorf("FromRepoFiles = %v, want an operational error", err)
			}
		})
	}
}
