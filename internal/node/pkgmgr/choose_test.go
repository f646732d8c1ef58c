package pkgmgr

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"nodehotfix/internal/node/osrelease"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		osr    osrelease.OSRelease
		hasDNF bool
		want   Manager // "": ErrUnsupportedOS
	}{
		{name: "ubuntu", osr: osrelease.OSRelease{ID: "ubuntu"}, want: APT},
		{name: "ubuntu-with-dnf", osr: osrelease.OSRelease{ID: "ubuntu"}, hasDNF: true, want: APT},
		{name: "azurelinux-dnf", osr: osrelease.OSRelease{ID: "azurelinux"}, hasDNF: true, want: DNF},
		{name: "azurelinux-no-dnf", osr: osrelease.OSRelease{ID: "azurelinux"}, want: TDNF},
		{name: "mariner-dnf", osr: osrelease.OSRelease{ID: "mariner"}, hasDNF: true, want: DNF},
		{name: "mariner-no-dnf", osr: osrelease.OSRelease{ID: "mariner"}, want: TDNF},
		{name: "acl-variant", osr: osrelease.OSRelease{ID: "azurelinux", VariantID: "azurecontainerlinux"}, hasDNF: true},
		{name: "acl-id", osr: osrelease.OSRelease{ID: "azurecontainerlinux"}},
		{name: "flatcar", osr: osrelease.OSRelease{ID: "flatcar"}},
		{name: "debian", osr: osrelease.OSRelease{ID: "debian"}, hasDNF: true},
		{name: "fedora", osr: osrelease.OSRelease{ID: "fedora"}, hasDNF: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Choose(tt.osr, tt.hasDNF)
			if tt.want == "" {
				if !errors.Is(err, ErrUnsupportedOS) {
					t.Errorf("Choose(%+v, %v) = %q, %v; want ErrUnsupportedOS", tt.osr, tt.hasDNF, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Choose(%+v, %v) = %q, %v; want %q", tt.osr, tt.hasDNF, got, err, tt.want)
			}
		})
	}
}
