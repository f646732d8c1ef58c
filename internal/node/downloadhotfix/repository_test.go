package downloadhotfix

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/pkgrepo"
	"nodehotfix/test/harness"
)

// repoNode is a node without release keys whose apt source names a real
// signed repository (harness.WriteAptRepo) served over HTTPS, with fake
// apt tools on PATH for the fallback that record whether they ran.
type repoNode struct {
	*fixture
	repo   harness.AptRepo
	srv    *httptest.Server
	serve  http.Handler
	record string
	deb    string
}

func newRepoNode(t *testing.T, g *harness.GPG, files map[string][]byte) *repoNode {
	t.Helper()
	return newRepoNodeOf(t, g, harness.Deb{Files: files})
}

// newRepoNodeOf is newRepoNode with the agent's package made of pkg's
// files and links.
func newRepoNodeOf(t *testing.T, g *harness.GPG, pkg harness.Deb) *repoNode {
	t.Helper()
	n := &repoNode{fixture: newFixture(t)}
	root := string(n.root)
	n.repo = harness.AptRepo{Dir: t.TempDir(), Suite: "noble", Component: "main", Arch: pkgrepo.Arch()}
	pkg.Name, pkg.Version, pkg.Arch, pkg.Compression = "aks-node-controller", target+"-ubuntu24.04u1", pkgrepo.Arch(), "zstd"
	deb, err := harness.BuildDeb(t.Context(), t.TempDir(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.WriteAptRepo(t.Context(), n.repo, g, []string{deb}, time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	n.deb = deb
	n.serve = http.FileServer(http.Dir(n.repo.Dir))
	n.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.serve.ServeHTTP(w, r) }))
	t.Cleanup(n.srv.Close)
	n.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: n.srv.Certificate().Raw})
	key, err := g.PublicKey(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	for path, b := range map[string][]byte{
		"etc/os-release": []byte("ID=ubuntu\nVERSION_ID=\"24.04\"\n"),
		"etc/apt/sources.list.d/microsoft-prod.list": fmt.Appendf(nil, "deb [arch=%s signed-by=/usr/share/keyrings/microsoft-prod.gpg] %s noble main\n", pkgrepo.Arch(), n.srv.URL),
		"usr/share/keyrings/microsoft-prod.gpg":      key,
	} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755)
		if err := os.WriteFile(filepath.Join(root, path), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fallback := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(fallback, fakeAgent(t, target), 0o755)
	n.record = fakeTools(t, map[string]string{
		"dpkg":      "exit 0",
		"apt-cache": `echo " aks-node-controller | ` + target + `-ubuntu24.04u1 | x"`,
		"apt-get":   fmt.Sprintf(`case "$1" in install) mkdir -p %[1]s/usr/bin && cp %[2]s %[1]s/usr/bin/aks-node-controller;; esac`, root, fallback),
	})
	n.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
	return n
}

func (n *repoNode) aptRan() bool {
	argv, _ := os.ReadFile(n.record)
	return len(argv) > 0
}

// midSync leaves n's repository as a mirror caught mid-sync: the new
// InRelease over the previous Packages index by name, which listed
// another package; with byHash the indexes are served by digest too.
func (n *repoNode) midSync(t *testing.T, g *harness.GPG, byHash bool) {
	t.Helper()
	other, err := harness.BuildDeb(t.Context(), t.TempDir(), harness.Deb{Name: "moby-runc", Version: "1.1.12-ubuntu24.04u1", Arch: pkgrepo.Arch(), Files: map[string][]byte{"usr/bin/runc": []byte("runc")}})
	if err != nil {
		t.Fatal(err)
	}
	prev := n.repo
	prev.Dir = t.TempDir()
	if err := harness.WriteAptRepo(t.Context(), prev, g, []string{other}, time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if byHash {
		n.repo.ByHash = true
		if err := harness.WriteAptRepo(t.Context(), n.repo, g, []string{n.deb}, time.Now().Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"Packages", "Packages.xz"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(prev.Index()), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(n.repo.Index()), name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// pool returns the path of the repository's one .deb.
func (n *repoNode) pool(t *testing.T) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(n.repo.Dir, "pool/main/a/aks-node-controller/*.deb"))
	if len(m) != 1 {
		t.Fatalf("pool holds %v", m)
	}
	return m[0]
}

// TestRunRepositoryRoute: without release keys the agent is staged
// straight from the node's signed apt repository; only an operational
// failure of that route falls back to the package manager, and an
// integrity failure is its own outcome with nothing staged.
func TestRunRepositoryRoute(t *testing.T) {
	g, err := harness.NewGPG(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	agent := map[string][]byte{pkgrepo.AgentMember: nil}

	t.Run("staged from the repository", func(t *testing.T) {
		agent[pkgrepo.AgentMember] = fakeAgent(t, target)
		n := newRepoNode(t, g, agent)
		res := n.run()
		if res.Outcome != Staged || res.Route != RouteRepository || res.RepositoryErr != nil {
			t.Fatalf("Run = %+v", res)
		}
		if n.aptRan() {
			t.Error("the package manager ran although the repository route staged the agent")
		}
		if got, _ := n.staged(); got != string(fakeAgent(t, target)) {
			t.Error("staged binary is not the package's agent")
		}
		if fi, err := os.Stat(n.root.HotfixBinary()); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("staged mode = %v, %v; want the baked binary's 0750", fi.Mode(), err)
		}
		if got, want := res.Message(), "download-hotfix outcome=staged route=repository version="+target; got != want {
			t.Errorf("Message() = %q, want %q", got, want)
		}
		n.noTemps()
	})

	integrity := map[string]func(t *testing.T, n *repoNode){
		"a .deb that differs from the index": func(t *testing.T, n *repoNode) {
			b, _ := os.ReadFile(n.pool(t))
			b[len(b)-1] ^= 1
			os.WriteFile(n.pool(t), b, 0o644)
		},
		"an InRelease signed by another key": func(t *testing.T, n *repoNode) {
			other, err := harness.NewGPG(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			key, _ := other.PublicKey(t.Context(), false)
			os.WriteFile(filepath.Join(string(n.root), "usr/share/keyrings/microsoft-prod.gpg"), key, 0o644)
		},
	}
	for name, mutate := range integrity {
		t.Run(name, func(t *testing.T) {
			agent[pkgrepo.AgentMember] = fakeAgent(t, target)
			n := newRepoNode(t, g, agent)
			mutate(t, n)
			res := n.run()
			var ie *pkgrepo.IntegrityError
			if res.Outcome != RepositoryIntegrity || res.Route != RouteRepository || !errors.As(res.Err, &ie) || !res.Failed() || res.ExitCode() != 1 {
				t.Fatalf("Run = %+v, want repositoryIntegrity", res)
			}
			if n.aptRan() {
				t.Error("fell back to the package manager after an integrity failure")
			}
			if _, ok := n.staged(); ok {
				t.Error("something was staged")
			}
			n.noTemps()
		})
	}

	t.Run("a package without the agent", func(t *testing.T) {
		n := newRepoNode(t, g, map[string][]byte{"usr/bin/other": []byte("x")})
		if res := n.run(); res.Outcome != RepositoryIntegrity || n.aptRan() || !strings.Contains(res.Err.Error(), "package has no "+pkgrepo.AgentMember) {
			t.Fatalf("Run = %+v, apt ran %v; want repositoryIntegrity naming the missing agent", res, n.aptRan())
		}
		n.noTemps()
	})

	t.Run("an agent reporting another version", func(t *testing.T) {
		// Verified bytes the package manager would install too: a
		// failure, and no second route.
		agent[pkgrepo.AgentMember] = fakeAgent(t, "202604.01.7")
		n := newRepoNode(t, g, agent)
		res := n.run()
		if res.Outcome != ArtifactIntegrity || res.Route != RouteRepository || n.aptRan() || !strings.Contains(res.Err.Error(), "reports version") {
			t.Fatalf("Run = %+v, apt ran %v", res, n.aptRan())
		}
		if _, ok := n.staged(); ok {
			t.Error("staged an agent of the wrong version")
		}
		n.noTemps()
	})

	t.Run("an agent installed as a symlink", func(t *testing.T) {
		n := newRepoNodeOf(t, g, harness.Deb{
			Files:    map[string][]byte{"usr/lib/aks-node-controller/aks-node-controller": fakeAgent(t, target)},
			Symlinks: map[string]string{pkgrepo.AgentMember: "../lib/aks-node-controller/aks-node-controller"},
		})
		if res := n.run(); res.Outcome != Staged || res.Route != RouteRepository || n.aptRan() {
			t.Fatalf("Run = %+v, apt ran %v; want staged from the symlink's target", res, n.aptRan())
		}
		if got, _ := n.staged(); got != string(fakeAgent(t, target)) {
			t.Error("staged binary is not the symlink's target")
		}
		n.noTemps()
	})

	t.Run("an agent symlinked out of its package", func(t *testing.T) {
		// The installed package may resolve it (to another package's
		// file): the package manager decides, and its copy is checked.
		n := newRepoNodeOf(t, g, harness.Deb{
			Files:    map[string][]byte{"usr/lib/other": []byte("x")},
			Symlinks: map[string]string{pkgrepo.AgentMember: "/usr/local/bin/aks-node-controller"},
		})
		if res := n.run(); res.Outcome != Staged || res.Route != RoutePackageManager || res.RepositoryErr == nil || !n.aptRan() {
			t.Fatalf("Run = %+v, apt ran %v; want staged by the package manager", res, n.aptRan())
		}
		n.noTemps()
	})

	t.Run("a mirror mid-sync, by hash", func(t *testing.T) {
		agent[pkgrepo.AgentMember] = fakeAgent(t, target)
		n := newRepoNode(t, g, agent)
		n.midSync(t, g, true)
		if res := n.run(); res.Outcome != Staged || res.Route != RouteRepository || n.aptRan() {
			t.Fatalf("Run = %+v, apt ran %v; want staged from the index by hash", res, n.aptRan())
		}
		n.noTemps()
	})

	// An index that differs from the Release is what a mirror mid-sync
	// serves: apt refuses it by its own check, and may find a consistent
	// mirror.
	operational := map[string]func(t *testing.T, n *repoNode){
		"the repository down": func(t *testing.T, n *repoNode) { n.srv.Close() },
		"no such package": func(t *testing.T, n *repoNode) {
			n.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.2"}})
		},
		"a repository that hangs": func(t *testing.T, n *repoNode) {
			n.serve = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		},
		"no usable source": func(t *testing.T, n *repoNode) {
			os.WriteFile(filepath.Join(string(n.root), "etc/apt/sources.list.d/microsoft-prod.list"), []byte("deb [arch=none] https://x noble main\n"), 0o644)
		},
		"a Packages index that differs from the Release": func(t *testing.T, n *repoNode) {
			b, _ := os.ReadFile(n.repo.Index())
			b[len(b)-1] ^= 1
			os.WriteFile(n.repo.Index(), b, 0o644)
		},
		"a mirror mid-sync": func(t *testing.T, n *repoNode) { n.midSync(t, g, false) },
	}
	for name, mutate := range operational {
		t.Run(name, func(t *testing.T) {
			agent[pkgrepo.AgentMember] = fakeAgent(t, target)
			n := newRepoNode(t, g, agent)
			mutate(t, n)
			// The hanging repository gets half of this budget; the
			// package manager, the rest.
			res := Run(within(t, 8*time.Second), Config{Root: n.root, Version: n.version, ArtifactCAPEM: n.caPEM})
			if name == "no such package" {
				// The fake apt has no .2 either.
				if res.Outcome != NoPackage || res.Route != RoutePackageManager || res.RepositoryErr == nil {
					t.Fatalf("Run = %+v", res)
				}
				return
			}
			if res.Outcome != Staged || res.Route != RoutePackageManager || res.RepositoryErr == nil || !n.aptRan() {
				t.Fatalf("Run = %+v, want staged by the package manager after the repository route failed", res)
			}
			if !strings.Contains(res.Message(), "repositoryFallback=") {
				t.Errorf("Message() = %q does not say why the repository route was not used", res.Message())
			}
			n.noTemps()
		})
	}
}

// TestRunRepositoryRouteTrickle: a repository that trickles a file, a
// byte at a time and never stalling long enough for the download's stall
// timer, is cut when its share of the budget is spent, so the package
// manager still stages the agent inside the budget.
func TestRunRepositoryRouteTrickle(t *testing.T) {
	g, err := harness.NewGPG(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	for name, slow := range map[string]func(path string) bool{
		"its InRelease": func(p string) bool { return strings.HasSuffix(p, "/InRelease") },
		"its package":   func(p string) bool { return strings.HasSuffix(p, ".deb") },
	} {
		t.Run(name, func(t *testing.T) {
			n := newRepoNode(t, g, map[string][]byte{pkgrepo.AgentMember: fakeAgent(t, target)})
			files := n.serve
			n.serve = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !slow(r.URL.Path) {
					files.ServeHTTP(w, r)
					return
				}
				b, err := os.ReadFile(filepath.Join(n.repo.Dir, filepath.FromSlash(r.URL.Path)))
				if err != nil {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Length", fmt.Sprint(len(b)))
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for i := range b {
					select {
					case <-r.Context().Done():
						return
					case <-tick.C:
					}
					w.Write(b[i : i+1])
					w.(http.Flusher).Flush()
				}
			})
			ctx := within(t, 6*time.Second)
			res := Run(ctx, Config{Root: n.root, Version: n.version, ArtifactCAPEM: n.caPEM})
			if res.Outcome != Staged || res.Route != RoutePackageManager || !n.aptRan() {
				t.Fatalf("Run = %+v, want staged by the package manager", res)
			}
			if !errors.Is(res.RepositoryErr, errRepositoryShare) {
				t.Errorf("RepositoryErr = %v, want the route cut at its share of the budget", res.RepositoryErr)
			}
			if ctx.Err() != nil {
				t.Errorf("Run returned after its budget: %v", ctx.Err())
			}
			n.noTemps()
		})
	}
}

// TestRunRepositoryRouteRPM: on Azure Linux the agent comes from the
// node's signed rpm repository (rpmkeys against the node's rpm database),
// with dnf only as the fallback.
func TestRunRepositoryRouteRPM(t *testing.T) {
	g, err := harness.NewGPG(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	setup := func(t *testing.T, files map[string][]byte) (*fixture, string, *httptest.Server, string) {
		f := newFixture(t)
		root := string(f.root)
		rpm, err := harness.BuildRPM(t.Context(), t.TempDir(), harness.RPM{Name: "aks-node-controller", Version: target, Release: "1.azl3", Arch: pkgrepo.RPMArch(), Files: files})
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.SignRPM(t.Context(), g, rpm); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := harness.WriteRPMRepo(t.Context(), dir, []string{rpm}); err != nil {
			t.Fatal(err)
		}
		if err := harness.ImportRPMKey(t.Context(), g, root); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewTLSServer(http.FileServer(http.Dir(dir)))
		t.Cleanup(srv.Close)
		f.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		os.MkdirAll(filepath.Join(root, "etc/yum.repos.d"), 0o755)
		os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=azurelinux\nVERSION_ID=\"3.0\"\n"), 0o644)
		os.WriteFile(filepath.Join(root, "etc/yum.repos.d/azurelinux-official-base.repo"), fmt.Appendf(nil, "[base]\nbaseurl=%s\ngpgcheck=1\nenabled=1\n", srv.URL), 0o644)
		fallback := filepath.Join(t.TempDir(), "agent")
		os.WriteFile(fallback, fakeAgent(t, target), 0o755)
		// dnf too, so that a machine with a real dnf does not run it.
		tool := fmt.Sprintf(`case "$1" in list) echo "aks-node-controller.x86_64 %[3]s-1.azl3 base";; install) mkdir -p %[1]s/usr/bin && cp %[2]s %[1]s/usr/bin/aks-node-controller;; esac`, root, fallback, target)
		record := fakeTools(t, map[string]string{"dnf": tool, "tdnf": tool})
		f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
		return f, dir, srv, record
	}
	t.Run("staged from the repository", func(t *testing.T) {
		f, _, _, record := setup(t, map[string][]byte{pkgrepo.AgentMember: fakeAgent(t, target)})
		res := f.run()
		if argv, _ := os.ReadFile(record); res.Outcome != Staged || res.Route != RouteRepository || len(argv) > 0 {
			t.Fatalf("Run = %+v; dnf calls: %s", res, argv)
		}
		if got, _ := f.staged(); got != string(fakeAgent(t, target)) {
			t.Error("staged binary is not the package's agent")
		}
		f.noTemps()
	})
	t.Run("a package that fails its signature", func(t *testing.T) {
		f, dir, _, record := setup(t, map[string][]byte{pkgrepo.AgentMember: fakeAgent(t, target)})
		m, _ := filepath.Glob(filepath.Join(dir, "Packages/*.rpm"))
		b, _ := os.ReadFile(m[0])
		b[len(b)-1] ^= 1
		tampered := filepath.Join(t.TempDir(), filepath.Base(m[0]))
		os.WriteFile(tampered, b, 0o644)
		if err := harness.WriteRPMRepo(t.Context(), dir, []string{tampered}); err != nil {
			t.Fatal(err)
		}
		res := f.run()
		if argv, _ := os.ReadFile(record); res.Outcome != RepositoryIntegrity || len(argv) > 0 || !strings.Contains(res.Err.Error(), "rpmkeys -K: BAD") {
			t.Fatalf("Run = %+v; dnf calls: %s", res, argv)
		}
		if _, ok := f.staged(); ok {
			t.Error("something was staged")
		}
		f.noTemps()
	})
	t.Run("the repository down", func(t *testing.T) {
		f, _, srv, record := setup(t, map[string][]byte{pkgrepo.AgentMember: fakeAgent(t, target)})
		srv.Close()
		res := f.run()
		if argv, _ := os.ReadFile(record); res.Outcome != Staged || res.Route != RoutePackageManager || res.RepositoryErr == nil || !strings.Contains(string(argv), "dnf install") {
			t.Fatalf("Run = %+v; dnf calls: %s", res, argv)
		}
	})
}
