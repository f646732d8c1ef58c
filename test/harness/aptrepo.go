package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ulikunitz/xz"
)

// GPG is a real gpg with its own home directory and one ed25519 signing
// key, for signing test repositories.
type GPG struct {
	Home string
	// Name is the key's user ID.
	Name string
}

// NewGPG makes a gpg home and generates its key. Close removes it.
func NewGPG(ctx context.Context) (*GPG, error) {
	if _, err := exec.LookPath("gpg"); err != nil {
		return nil, fmt.Errorf("gpg (Debian package gnupg): %w", err)
	}
	// Short and under /tmp: gpg-agent's socket path must fit a sockaddr.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		return nil, err
	}
	g := &GPG{Home: home, Name: "nodehotfix test <test@example.invalid>"}
	if _, err := g.Run(ctx, nil, "--quick-gen-key", g.Name, "ed25519", "sign", "never"); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Run runs gpg with args on g's home, stdin from stdin, and returns its
// stdout.
func (g *GPG) Run(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, "gpg", append([]string{"--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
	c.Env = append(os.Environ(), "GNUPGHOME="+g.Home)
	c.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("gpg %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes(), nil
}

// PublicKey exports the public key, binary (a .gpg keyring) or armored.
func (g *GPG) PublicKey(ctx context.Context, armor bool) ([]byte, error) {
	if armor {
		return g.Run(ctx, nil, "--armor", "--export")
	}
	return g.Run(ctx, nil, "--export")
}

// Close stops g's agent and removes its home.
func (g *GPG) Close() {
	c := exec.Command("gpgconf", "--kill", "gpg-agent")
	c.Env = append(os.Environ(), "GNUPGHOME="+g.Home)
	c.Run()
	os.RemoveAll(g.Home)
}

// Deb is a package for BuildDeb.
type Deb struct {
	Name, Version, Arch string
	// Files maps a path in the package (usr/bin/aks-node-controller) to its
	// content, installed with mode 0755.
	Files map[string][]byte
	// Compression is dpkg-deb's -Z: xz (empty), zstd, gzip or none.
	Compression string
	// Symlinks maps a path in the package to a symlink's target, as
	// written; Hardlinks maps a path to another path of Files it is a
	// hard link of (dpkg-deb archives the first of the two in its order
	// with the content, the other as a hard link to it).
	Symlinks, Hardlinks map[string]string
}

// BuildDeb builds p with the real dpkg-deb into dir and returns the
// .deb's path.
func BuildDeb(ctx context.Context, dir string, p Deb) (string, error) {
	if p.Arch == "" {
		p.Arch = "amd64"
	}
	if p.Compression == "" {
		p.Compression = "xz"
	}
	root, err := os.MkdirTemp(dir, "debroot")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(root)
	files := map[string][]byte{
		"DEBIAN/control": fmt.Appendf(nil, "Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: test <test@example.invalid>\nDescription: test package\n", p.Name, p.Version, p.Arch),
	}
	for path, content := range p.Files {
		files[path] = content
	}
	for path, content := range files {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, content, 0o755); err != nil {
			return "", err
		}
	}
	for path, target := range p.Symlinks {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.Symlink(target, full); err != nil {
			return "", err
		}
	}
	for path, target := range p.Hardlinks {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.Link(filepath.Join(root, target), full); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, fmt.Sprintf("%s_%s_%s.deb", p.Name, p.Version, p.Arch))
	if b, err := exec.CommandContext(ctx, "dpkg-deb", "--root-owner-group", "-Z"+p.Compression, "--build", root, out).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb: %w\n%s", err, b)
	}
	return out, nil
}

// AptRepo is an apt repository on disk in the layout of
// packages.microsoft.com: pool/main/<first letter>/<name>/*.deb, and
// dists/<Suite>/InRelease over <Component>/binary-<Arch>/Packages{,.xz}.
type AptRepo struct {
	Dir                    string
	Suite, Component, Arch string
	// ByHash also writes each index under by-hash/SHA256/<digest> beside
	// it, kept across rewrites, and says "Acquire-By-Hash: yes" in the
	// Release, as a mirror that serves indexes by digest does.
	ByHash bool
}

// InRelease and Index are where r's signed release and xz index are.
func (r AptRepo) InRelease() string { return filepath.Join(r.Dir, "dists", r.Suite, "InRelease") }
func (r AptRepo) Index() string {
	return filepath.Join(r.Dir, "dists", r.Suite, r.Component, "binary-"+r.Arch, "Packages.xz")
}

// WriteAptRepo copies debs into r's pool and indexes and signs it with the
// real tools: apt-ftparchive writes the Packages index and the Release
// file, to which a Valid-Until is added, and g clearsigns it as InRelease.
func WriteAptRepo(ctx context.Context, r AptRepo, g *GPG, debs []string, validUntil time.Time) error {
	if _, err := exec.LookPath("apt-ftparchive"); err != nil {
		return fmt.Errorf("apt-ftparchive (Debian package apt-utils): %w", err)
	}
	for _, deb := range debs {
		name := strings.SplitN(filepath.Base(deb), "_", 2)[0]
		pool := filepath.Join(r.Dir, "pool", r.Component, name[:1], name)
		if err := os.MkdirAll(pool, 0o755); err != nil {
			return err
		}
		b, err := os.ReadFile(deb)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pool, filepath.Base(deb)), b, 0o644); err != nil {
			return err
		}
	}
	ftp := func(args ...string) ([]byte, error) {
		c := exec.CommandContext(ctx, "apt-ftparchive", args...)
		c.Dir = r.Dir
		var errOut bytes.Buffer
		c.Stderr = &errOut
		out, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("apt-ftparchive %s: %w\n%s", args[0], err, errOut.String())
		}
		return out, nil
	}
	packages, err := ftp("packages", "pool")
	if err != nil {
		return err
	}
	index := filepath.Dir(r.Index())
	if err := os.MkdirAll(index, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(index, "Packages"), packages, 0o644); err != nil {
		return err
	}
	var packed bytes.Buffer
	xw, err := xz.NewWriter(&packed)
	if err != nil {
		return err
	}
	xw.Write(packages)
	if err := xw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(r.Index(), packed.Bytes(), 0o644); err != nil {
		return err
	}
	release, err := ftp("-o", "APT::FTPArchive::Release::Suite="+r.Suite, "-o", "APT::FTPArchive::Release::Codename="+r.Suite,
		"-o", "APT::FTPArchive::Release::Components="+r.Component, "-o", "APT::FTPArchive::Release::Architectures="+r.Arch,
		"release", filepath.Join("dists", r.Suite))
	if err != nil {
		return err
	}
	if !validUntil.IsZero() {
		release = append(fmt.Appendf(nil, "Valid-Until: %s\n", validUntil.UTC().Format(time.RFC1123)), release...)
	}
	if r.ByHash {
		// After the release: its hashes are of the indexes by name only.
		byHash := filepath.Join(index, "by-hash", "SHA256")
		if err := os.MkdirAll(byHash, 0o755); err != nil {
			return err
		}
		for _, b := range [][]byte{packages, packed.Bytes()} {
			sum := sha256.Sum256(b)
			if err := os.WriteFile(filepath.Join(byHash, hex.EncodeToString(sum[:])), b, 0o644); err != nil {
				return err
			}
		}
		release = append([]byte("Acquire-By-Hash: yes\n"), release...)
	}
	signed, err := g.Run(ctx, release, "--clearsign", "--digest-algo", "SHA256")
	if err != nil {
		return err
	}
	return os.WriteFile(r.InRelease(), signed, 0o644)
}
