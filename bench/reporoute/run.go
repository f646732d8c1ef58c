package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"nodehotfix/bench/internal/rig"
	"nodehotfix/bench/internal/stats"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/internal/node/pkgrepo"
	"nodehotfix/test/harness"
)

type options struct {
	n, warmup   int
	compression string
	keep        bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("reporoute", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 10, "measured iterations of each")
	fs.IntVar(&o.warmup, "warmup", 2, "unmeasured iterations first")
	fs.StringVar(&o.compression, "compression", "xz", "the .deb's data archive compression (dpkg-deb -Z): xz, zstd, gzip or none")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || o.n < 1 || o.warmup < 0 || !slices.Contains([]string{"xz", "zstd", "gzip", "none"}, o.compression) {
		fmt.Fprintln(stderr, "reporoute: usage: reporoute [-n N] [-warmup N] [-compression xz|zstd|gzip|none] [-keep]")
		return 2
	}
	return rig.Session(ctx, "reporoute", o.keep, stdout, stderr, func(ctx context.Context, dir string) error {
		return bench(ctx, o, dir, stdout)
	})
}

const (
	suite     = "noble"
	component = "main"
)

func bench(ctx context.Context, o options, dir string, out io.Writer) error {
	full := rig.HotfixVersion + "-ubuntu24.04u1"
	baked := filepath.Join(dir, "baked-agent")
	if err := harness.BuildAgent(ctx, baked, rig.BakedVersion); err != nil {
		return err
	}
	hotfixBin := filepath.Join(dir, "hotfix-agent")
	if err := harness.BuildAgent(ctx, hotfixBin, rig.HotfixVersion); err != nil {
		return err
	}
	agent, err := os.ReadFile(hotfixBin)
	if err != nil {
		return err
	}
	g, err := harness.NewGPG(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	deb, err := harness.BuildDeb(ctx, dir, harness.Deb{Name: pkgmgr.PackageName, Version: full, Arch: pkgrepo.Arch(), Compression: o.compression, Files: map[string][]byte{pkgrepo.AgentMember: agent}})
	if err != nil {
		return err
	}
	repo := harness.AptRepo{Dir: filepath.Join(dir, "repo"), Suite: suite, Component: component, Arch: pkgrepo.Arch()}
	if err := harness.WriteAptRepo(ctx, repo, g, []string{deb}, time.Now().Add(24*time.Hour)); err != nil {
		return err
	}
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		return err
	}
	srv, err := harness.StartArtifactServer(repo.Dir, tlsFiles)
	if err != nil {
		return err
	}
	defer srv.Close()
	key, err := g.PublicKey(ctx, false)
	if err != nil {
		return err
	}

	// The node: no release keys, so download-hotfix trusts its apt source.
	node, err := harness.NewNode(filepath.Join(dir, "node"), harness.NodeOptions{BakedAgent: baked, ClusterCA: tlsFiles.CAPEM})
	if err != nil {
		return err
	}
	ptr, err := json.Marshal(hotfix.Pointer{Hotfixes: map[string]string{rig.HotfixVersion[:9]: rig.HotfixVersion}})
	if err != nil {
		return err
	}
	if err := writeFiles(node.Root, map[string][]byte{
		"etc/os-release": []byte("ID=ubuntu\nVERSION_ID=\"24.04\"\n"),
		"etc/apt/sources.list.d/microsoft-prod.list":           fmt.Appendf(nil, "deb [arch=%s signed-by=/usr/share/keyrings/microsoft-prod.gpg] %s %s %s\n", pkgrepo.Arch(), srv.URL, suite, component),
		"usr/share/keyrings/microsoft-prod.gpg":                key,
		"opt/azure/containers/aks-node-controller-hotfix.json": ptr,
	}); err != nil {
		return err
	}
	staged := node.Path("opt/azure/containers/aks-node-controller-hotfix")

	sb := &sandbox{root: filepath.Join(dir, "apt"), ca: tlsFiles.CAFile}
	if err := sb.init(key, srv.URL); err != nil {
		return err
	}

	fmt.Fprintf(out, "repository route vs apt install of the same %s (%.1f MiB agent, .deb %s, %s), HTTPS on loopback; %d iterations after %d warm-up, interleaved\n\n",
		full, float64(len(agent))/(1<<20), sizeOf(deb), o.compression, o.n, o.warmup)
	var route, apt []float64
	for i := -o.warmup; i < o.n; i++ {
		os.Remove(staged)
		res, err := rig.Run(ctx, []string{baked, "download-hotfix", "--root", node.Root, "--artifact-ca", tlsFiles.CAFile})
		if err != nil {
			return err
		}
		if res.Exit != 0 || !bytes.Contains(res.Output, []byte("outcome=staged route=repository")) {
			return fmt.Errorf("download-hotfix did not stage from the repository (exit %d):\n%s", res.Exit, res.Output)
		}
		if b, err := os.ReadFile(staged); err != nil || !bytes.Equal(b, agent) {
			return fmt.Errorf("staged binary differs from the package's agent (%v)", err)
		}
		if err := sb.reset(); err != nil {
			return err
		}
		start := time.Now()
		installed, err := pkgmgr.Install(ctx, sb, pkgmgr.Config{Root: sb.root}, rig.HotfixVersion)
		wall := time.Since(start)
		if err != nil {
			return fmt.Errorf("apt install: %w", err)
		}
		if b, err := os.ReadFile(installed); err != nil || !bytes.Equal(b, agent) {
			return fmt.Errorf("apt installed a different agent (%v)", err)
		}
		if i < 0 {
			continue
		}
		route = append(route, ms(res.Wall))
		apt = append(apt, ms(wall))
	}
	r, a := stats.Of(route), stats.Of(apt)
	fmt.Fprintf(out, "  %-52s %s\n", "download-hotfix, repository route (staged, verified)", r.String("ms"))
	fmt.Fprintf(out, "  %-52s %s\n", "apt: configure, scoped update, madison, install", a.String("ms"))
	fmt.Fprintf(out, "  ratio apt / repository route: %.1fx faster by the route (median)\n", a.Median/r.Median)
	fmt.Fprintln(out, "\n  apt here has an empty dpkg database and one source; on a provisioning node it has")
	fmt.Fprintln(out, "  thousands of packages, contends for the dpkg lock and waits on busy disks, so its cost there is higher.")
	return nil
}

// sandbox runs apt and dpkg against their own root: state, cache, sources
// and the dpkg database under it, installing into it.
type sandbox struct {
	root, ca string
}

func (s *sandbox) init(key []byte, url string) error {
	if err := writeFiles(s.root, map[string][]byte{
		"etc/os-release":                        []byte("ID=ubuntu\nVERSION_ID=\"24.04\"\n"),
		"usr/share/keyrings/microsoft-prod.gpg": key,
	}); err != nil {
		return err
	}
	src := fmt.Appendf(nil, "deb [arch=%s signed-by=%s] %s %s %s\n", pkgrepo.Arch(), filepath.Join(s.root, "usr/share/keyrings/microsoft-prod.gpg"), url, suite, component)
	return writeFiles(s.root, map[string][]byte{"etc/apt/sources.list.d/microsoft-prod.list": src})
}

// reset empties the sandbox's lists, cache and dpkg database, as on a
// node that never ran apt against the repository.
func (s *sandbox) reset() error {
	for _, d := range []string{"var/lib/apt", "var/cache/apt", "var/lib/dpkg", "usr/bin", "var/log/apt"} {
		if err := os.RemoveAll(filepath.Join(s.root, d)); err != nil {
			return err
		}
	}
	for _, d := range []string{"etc/apt/apt.conf.d", "etc/apt/preferences.d", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg/info", "var/lib/dpkg/updates", "var/log/apt"} {
		if err := os.MkdirAll(filepath.Join(s.root, d), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(s.root, "var/lib/dpkg/status"), nil, 0o644)
}

// argv adds the sandbox's options after the program in argv, which
// pkgmgr runs as env VAR=… PROGRAM ARGS.
func (s *sandbox) argv(name string, args []string) []string {
	argv := append([]string{name}, args...)
	i := slices.IndexFunc(argv, func(a string) bool { return a == "apt-get" || a == "apt-cache" || a == "dpkg" })
	if i < 0 {
		return argv
	}
	var opts []string
	if argv[i] == "dpkg" {
		opts = []string{"--root=" + s.root, "--force-not-root"}
	} else {
		opts = []string{
			"-o", "Dir=" + s.root,
			"-o", "Dir::State::status=" + filepath.Join(s.root, "var/lib/dpkg/status"),
			"-o", "Dir::Etc::Parts=" + filepath.Join(s.root, "etc/apt/apt.conf.d"),
			"-o", "Acquire::https::CaInfo=" + s.ca,
			"-o", "DPkg::Options::=--root=" + s.root,
			"-o", "DPkg::Options::=--force-not-root",
			"-o", "Debug::NoLocking=1",
			"-o", "APT::Sandbox::User=root",
		}
	}
	return slices.Concat(argv[:i+1], opts, argv[i+1:])
}

// Run and List implement pkgmgr.Runner with the sandbox's options.
func (s *sandbox) Run(ctx context.Context, name string, args ...string) error {
	argv := s.argv(name, args)
	return pkgmgr.ExecRunner{}.Run(ctx, argv[0], argv[1:]...)
}

func (s *sandbox) List(ctx context.Context, name string, args ...string) ([]byte, error) {
	argv := s.argv(name, args)
	return pkgmgr.ExecRunner{}.List(ctx, argv[0], argv[1:]...)
}

func writeFiles(root string, files map[string][]byte) error {
	for path, b := range files {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func sizeOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(fi.Size())/(1<<20))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
