package pkgrepo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodehotfix/internal/node/pkgmgr"
)

// node writes files under a fresh root.
func node(t *testing.T, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	for path, b := range files {
		p := filepath.Join(root, path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFromSources(t *testing.T) {
	t.Parallel()
	g := newGPG(t)
	bin, err := g.PublicKey(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	armored, err := g.PublicKey(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	// deb822 continuation lines: a blank line of the key is " .".
	var inline strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(string(armored)), "\n") {
		if l == "" {
			l = "."
		}
		inline.WriteString(" " + l + "\n")
	}
	const list = "etc/apt/sources.list.d/microsoft-prod.list"
	const sources = "etc/apt/sources.list.d/microsoft-prod.sources"
	for name, files := range map[string]map[string][]byte{
		"one-line, signed-by": {
			list:                                    []byte("# comment\ndeb [arch=amd64,arm64,armhf signed-by=/usr/share/keyrings/microsoft-prod.gpg] https://packages.microsoft.com/ubuntu/24.04/prod noble main\n"),
			"usr/share/keyrings/microsoft-prod.gpg": bin,
		},
		"one-line, global trust": {
			list:                                  []byte("deb [arch=amd64] https://packages.microsoft.com/ubuntu/24.04/prod noble main # trailing\n"),
			"etc/apt/trusted.gpg.d/microsoft.asc": armored,
		},
		"one-line, other architectures first": {
			list: []byte("deb [arch=arm64] https://example.invalid/arm64 noble main\n" +
				"deb [signed-by=/k.gpg] https://packages.microsoft.com/ubuntu/24.04/prod noble main\n"),
			"k.gpg": bin,
		},
		"deb822, signed-by path": {
			sources:                                 []byte("Types: deb\nURIs: https://packages.microsoft.com/ubuntu/24.04/prod\nSuites: noble\nComponents: main\nArchitectures: amd64 arm64\nSigned-By: /usr/share/keyrings/microsoft-prod.gpg\n"),
			"usr/share/keyrings/microsoft-prod.gpg": bin,
		},
		"deb822, inline key, disabled entries first": {
			sources: []byte("Types: deb\nURIs: https://example.invalid/\nSuites: x\nComponents: y\nEnabled: no\n\n" +
				"Types: deb\nURIs: https://disabled.invalid/\nSuites: x\nComponents: y\nEnabled: false\n\n" +
				"types: deb deb-src\nuris: https://packages.microsoft.com/ubuntu/24.04/prod\nsuites: noble\ncomponents: main\nsigned-by:\n" + inline.String()),
		},
	} {
		t.Run(name, func(t *testing.T) {
			repo, err := FromSources(node(t, files), "amd64")
			if err != nil {
				t.Fatal(err)
			}
			if repo.URL != "https://packages.microsoft.com/ubuntu/24.04/prod" || repo.Suite != "noble" || repo.Component != "main" || repo.Arch != "amd64" || len(repo.Keyring) != 1 {
				t.Errorf("FromSources = %+v", repo)
			}
		})
	}
	for name, files := range map[string]map[string][]byte{
		"no source file":     {},
		"malformed line":     {list: []byte("deb x\n")},
		"options not closed": {list: []byte("deb [arch=amd64 https://a noble main\n")},
		"only other arch":    {list: []byte("deb [arch=arm64 signed-by=/k.gpg] https://a noble main\n"), "k.gpg": bin},
		"missing keyring":    {list: []byte("deb [signed-by=/k.gpg] https://a noble main\n")},
		"garbage keyring":    {list: []byte("deb [signed-by=/k.gpg] https://a noble main\n"), "k.gpg": []byte("not a key")},
		"no global keys":     {list: []byte("deb https://a noble main\n")},
		"fingerprint":        {list: []byte("deb [signed-by=0123456789ABCDEF] https://a noble main\n")},
		"deb822 incomplete":  {sources: []byte("Types: deb\nURIs: https://a\n")},
		"huge source":        {list: make([]byte, maxSource+1)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromSources(node(t, files), "amd64")
			var ie *IntegrityError
			if err == nil || errors.As(err, &ie) {
				t.Errorf("FromSources = %v, want an operational error", err)
			}
		})
	}
	// The file pkgmgr's apt route refreshes is the one read.
	root := node(t, map[string][]byte{list: []byte("deb [signed-by=/k.gpg] https://a noble main\n"), sources: []byte("Types: deb\nURIs: https://b\nSuites: s\nComponents: c\nSigned-By: /k.gpg\n"), "k.gpg": bin})
	want, _ := pkgmgr.AptSource(root)
	repo, err := FromSources(root, "amd64")
	if err != nil || !strings.HasSuffix(want, ".list") || repo.URL != "https://a" {
		t.Errorf("FromSources = %+v, %v; pkgmgr refreshes %s", repo, err, want)
	}
}
