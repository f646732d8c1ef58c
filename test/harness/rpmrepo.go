package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// RPM is a package for BuildRPM.
type RPM struct {
	// Name, Version and Release make the package's NVR; Arch is rpm's
	// (x86_64, aarch64).
	Name, Version, Release, Arch string
	// Files maps a path in the package (usr/bin/aks-node-controller) to its
	// content, installed with mode 0755.
	Files map[string][]byte
	// Symlinks maps a path to a symlink's target, as written; Hardlinks
	// maps a path to another path of Files it is a hard link of (rpm
	// stores the content with the last of a set in path order, the
	// others empty).
	Symlinks, Hardlinks map[string]string
}

// BuildRPM builds p with the real rpmbuild (zstd payload, as Azure Linux's
// packages have) into dir and returns the .rpm's path. The package is
// unsigned; SignRPM signs it.
func BuildRPM(ctx context.Context, dir string, p RPM) (string, error) {
	if _, err := exec.LookPath("rpmbuild"); err != nil {
		return "", fmt.Errorf("rpmbuild (Debian package rpm): %w", err)
	}
	// Not under dir: rpmbuild runs the spec's %install through the shell,
	// and dir may hold a test's name with quotes in it.
	top, err := os.MkdirTemp("", "rpmbuild")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(top)
	src := filepath.Join(top, "src")
	var install, files strings.Builder
	paths := make([]string, 0, len(p.Files))
	for path := range p.Files {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		full := filepath.Join(src, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, p.Files[path], 0o755); err != nil {
			return "", err
		}
		fmt.Fprintf(&install, "mkdir -p %%{buildroot}/%s\ncp %s %%{buildroot}/%s\n", filepath.Dir(path), full, path)
		fmt.Fprintf(&files, "%%attr(0755,root,root) /%s\n", path)
	}
	for _, links := range []struct {
		m    map[string]string
		ln   string
		root string
	}{{p.Symlinks, "ln -s", ""}, {p.Hardlinks, "ln", "%{buildroot}/"}} {
		for path, target := range links.m {
			fmt.Fprintf(&install, "mkdir -p %%{buildroot}/%s\n%s %s%s %%{buildroot}/%s\n", filepath.Dir(path), links.ln, links.root, target, path)
			fmt.Fprintf(&files, "/%s\n", path)
		}
	}
	spec := filepath.Join(top, p.Name+".spec")
	body := fmt.Sprintf("Name: %s\nVersion: %s\nRelease: %s\nSummary: test package\nLicense: MIT\n%%description\ntest package\n%%install\n%s%%files\n%s",
		p.Name, p.Version, p.Release, install.String(), files.String())
	if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
		return "", err
	}
	c := exec.CommandContext(ctx, "rpmbuild", "-bb", "--define", "_topdir "+top, "--define", "_binary_payload w19.zstdio",
		"--define", "__strip /bin/true", "--define", "debug_package %{nil}", "--target", p.Arch, spec)
	if b, err := c.CombinedOutput(); err != nil {
		return "", fmt.Errorf("rpmbuild: %w\n%s", err, b)
	}
	name := fmt.Sprintf("%s-%s-%s.%s.rpm", p.Name, p.Version, p.Release, p.Arch)
	built, err := os.ReadFile(filepath.Join(top, "RPMS", p.Arch, name))
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	return out, os.WriteFile(out, built, 0o644)
}

// SignRPM signs the package at path in place with the real rpmsign and g's
// key.
func SignRPM(ctx context.Context, g *GPG, path string) error {
	c := exec.CommandContext(ctx, "rpmsign", "--addsign",
		"--define", "__gpg "+mustLook("gpg"),
		"--define", "_gpg_name "+g.Name,
		"--define", "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase ''",
		path)
	c.Env = append(os.Environ(), "GNUPGHOME="+g.Home)
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("rpmsign: %w\n%s", err, b)
	}
	return nil
}

// ImportRPMKey imports g's public key into the rpm database under root,
// as a node's image has the keys of its repositories.
func ImportRPMKey(ctx context.Context, g *GPG, root string) error {
	key, err := g.PublicKey(ctx, true)
	if err != nil {
		return err
	}
	f := filepath.Join(root, ".import.asc")
	if err := os.WriteFile(f, key, 0o644); err != nil {
		return err
	}
	defer os.Remove(f)
	if b, err := exec.CommandContext(ctx, "rpmkeys", "--root", root, "--import", f).CombinedOutput(); err != nil {
		return fmt.Errorf("rpmkeys --import: %w\n%s", err, b)
	}
	return nil
}

// WriteRPMRepo copies rpms into dir/Packages and indexes dir with the real
// createrepo_c (repodata/repomd.xml over primary.xml.gz).
func WriteRPMRepo(ctx context.Context, dir string, rpms []string) error {
	if _, err := exec.LookPath("createrepo_c"); err != nil {
		return fmt.Errorf("createrepo_c (Debian package createrepo-c): %w", err)
	}
	pool := filepath.Join(dir, "Packages")
	if err := os.MkdirAll(pool, 0o755); err != nil {
		return err
	}
	for _, p := range rpms {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pool, filepath.Base(p)), b, 0o644); err != nil {
			return err
		}
	}
	var out bytes.Buffer
	c := exec.CommandContext(ctx, "createrepo_c", "--quiet", dir)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return fmt.Errorf("createrepo_c: %w\n%s", err, out.String())
	}
	return nil
}

func mustLook(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name
}
