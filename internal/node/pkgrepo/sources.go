package pkgrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"pault.ag/go/debian/control"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/pkgmgr"
)

const (
	// maxSource caps an apt sources file.
	maxSource = 64 << 10
	// maxKeyring caps one keyring file; a distribution's is tens of KiB.
	maxKeyring = 1 << 20
	// maxKeyrings caps how many keyring files a repository's trust is
	// read from (trusted.gpg.d holds a handful).
	maxKeyrings = 64
)

// Arch returns the dpkg architecture of this binary's platform, which is
// the node's: the agent is built per platform.
func Arch() string {
	switch runtime.GOARCH {
	case "386":
		return "i386"
	case "arm":
		return "armhf"
	}
	return runtime.GOARCH
}

// FromSources returns the Microsoft repository as the node's apt sources
// name it, with the keys apt trusts for it, all read under root: the file
// pkgmgr's apt route refreshes (pkgmgr.AptSource), one-line or deb822; the
// first "deb" entry whose architectures include arch; its signed-by
// keyring (a path or, in deb822, an inline key block), or else apt's
// global trust (etc/apt/trusted.gpg and etc/apt/trusted.gpg.d). Every
// error is operational: without a usable source the package manager may
// still install.
func FromSources(root, arch string) (Apt, error) {
	path, err := pkgmgr.AptSource(root)
	if err != nil {
		return Apt{}, err
	}
	data, err := capfile.Read(path, maxSource)
	if err != nil {
		return Apt{}, fmt.Errorf("apt source: %w", err)
	}
	var entries []source
	if strings.HasSuffix(path, ".sources") {
		entries, err = parseDeb822(data)
	} else {
		entries, err = parseOneLine(data)
	}
	if err != nil {
		return Apt{}, fmt.Errorf("apt source %s: %w", path, err)
	}
	for _, e := range entries {
		if len(e.archs) > 0 && !slices.Contains(e.archs, arch) {
			continue
		}
		kr, err := e.keyring(root)
		if err != nil {
			return Apt{}, fmt.Errorf("apt source %s: %w", path, err)
		}
		return Apt{URL: e.uri, Suite: e.suite, Component: e.component, Arch: arch, Keyring: kr}, nil
	}
	return Apt{}, fmt.Errorf("apt source %s: no deb entry for architecture %s", path, arch)
}

// source is one repository of a sources file.
type source struct {
	uri, suite, component string
	archs                 []string
	// signedBy is the entry's signed-by: key file paths, or an armored key
	// block; empty means apt's global trust.
	signedBy string
}

// parseOneLine reads sources.list(5)'s one-line format:
// "deb [opt=v,v opt=v] URI SUITE COMPONENT...".
func parseOneLine(data []byte) ([]source, error) {
	var out []source
	for n, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "deb" {
			continue
		}
		var e source
		fields = fields[1:]
		if len(fields) > 0 && strings.HasPrefix(fields[0], "[") {
			end := slices.IndexFunc(fields, func(f string) bool { return strings.HasSuffix(f, "]") })
			if end < 0 {
				return nil, fmt.Errorf("line %d: options not closed with ]", n+1)
			}
			opts := strings.Fields(strings.Trim(strings.Join(fields[:end+1], " "), "[]"))
			fields = fields[end+1:]
			for _, o := range opts {
				k, v, _ := strings.Cut(o, "=")
				switch k {
				case "arch":
					e.archs = strings.Split(v, ",")
				case "signed-by":
					e.signedBy = strings.ReplaceAll(v, ",", " ")
				}
			}
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("line %d: want deb URI SUITE COMPONENT, got %q", n+1, strings.TrimSpace(line))
		}
		e.uri, e.suite, e.component = fields[0], fields[1], fields[2]
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("no deb entry")
	}
	return out, nil
}

// parseDeb822 reads sources.list(5)'s deb822 format. Field names are
// case-insensitive; an entry lists URIs, Suites and Components, of which
// the first of each is used (the Microsoft repository has one of each).
func parseDeb822(data []byte) ([]source, error) {
	pr, err := control.NewParagraphReader(bytes.NewReader(data), nil)
	if err != nil {
		return nil, err
	}
	paragraphs, err := pr.All()
	if err != nil {
		return nil, err
	}
	var out []source
	for _, p := range paragraphs {
		get := func(key string) string {
			for k, v := range p.Values {
				if strings.EqualFold(k, key) {
					return strings.TrimSpace(v)
				}
			}
			return ""
		}
		if !slices.Contains(strings.Fields(get("Types")), "deb") || !aptBool(get("Enabled"), true) {
			continue
		}
		uris, suites, comps := strings.Fields(get("URIs")), strings.Fields(get("Suites")), strings.Fields(get("Components"))
		if len(uris) == 0 || len(suites) == 0 || len(comps) == 0 {
			return nil, fmt.Errorf("deb entry without URIs, Suites or Components")
		}
		e := source{uri: uris[0], suite: suites[0], component: comps[0], signedBy: get("Signed-By")}
		if a := get("Architectures"); a != "" {
			e.archs = strings.FieldsFunc(a, func(r rune) bool { return r == ',' || r == ' ' })
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("no enabled deb entry")
	}
	return out, nil
}

// keyring reads the keys e trusts.
func (e source) keyring(root string) (openpgp.EntityList, error) {
	if strings.HasPrefix(e.signedBy, "-----BEGIN PGP PUBLIC KEY BLOCK-----") {
		kr, err := openpgp.ReadArmoredKeyRing(strings.NewReader(e.signedBy))
		if err != nil {
			return nil, fmt.Errorf("inline Signed-By key: %w", err)
		}
		return kr, nil
	}
	var paths []string
	if e.signedBy != "" {
		for _, p := range strings.Fields(e.signedBy) {
			if !filepath.IsAbs(p) {
				// A fingerprint restricts which key of the global trust
				// may sign; this route does not implement that.
				return nil, fmt.Errorf("signed-by %q is not a keyring path", p)
			}
			paths = append(paths, filepath.Join(root, p))
		}
	} else {
		paths = append(paths, filepath.Join(root, "etc/apt/trusted.gpg"))
		for _, ext := range []string{"*.gpg", "*.asc"} {
			m, _ := filepath.Glob(filepath.Join(root, "etc/apt/trusted.gpg.d", ext))
			paths = append(paths, m...)
		}
	}
	if len(paths) > maxKeyrings {
		return nil, fmt.Errorf("%d keyring files, at most %d are read", len(paths), maxKeyrings)
	}
	var kr openpgp.EntityList
	var skipped []error
	for _, p := range paths {
		data, err := capfile.Read(p, maxKeyring)
		if errors.Is(err, fs.ErrNotExist) && e.signedBy == "" {
			continue
		}
		if err == nil {
			var keys openpgp.EntityList
			if keys, err = readKeys(data); err == nil {
				kr = append(kr, keys...)
				continue
			}
			err = fmt.Errorf("keyring %s: %w", p, err)
		}
		if e.signedBy != "" {
			return nil, fmt.Errorf("keyring: %w", err)
		}
		// apt skips a global keyring it cannot read, with a warning.
		skipped = append(skipped, err)
	}
	if len(kr) == 0 {
		return nil, errors.Join(append([]error{errors.New("no apt keyring holds a key")}, skipped...)...)
	}
	return kr, nil
}

// aptBool reads an apt boolean option as apt's StringToBool does, def
// when empty or unknown.
func aptBool(v string, def bool) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "no", "false", "without", "off", "disable", "0":
		return false
	case "yes", "true", "with", "on", "enable", "1":
		return true
	}
	return def
}

// readKeys reads a keyring file, armored (.asc) or binary (.gpg).
func readKeys(data []byte) (openpgp.EntityList, error) {
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN PGP")) {
		return openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
	}
	return openpgp.ReadKeyRing(bytes.NewReader(data))
}
