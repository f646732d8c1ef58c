package pkgmgr

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/hotfix"
)

func TestUpstream(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"202608.26.2-ubuntu24.04u1":   "202608.26.2",
		"202608.26.2-1.azl3":          "202608.26.2",
		"1:202608.26.2-ubuntu24.04u1": "202608.26.2",
		"202608.26.2":                 "202608.26.2",
		"202608.26.2-a-b":             "202608.26.2-a",
	} {
		if got := upstream(in); got != want {
			t.Errorf("upstream(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestListingParsers(t *testing.T) {
	t.Parallel()
	deb := debVersions([]byte(madison + " other-package | 202604.01.1-x | y\nN: garbage line\n aks-node-controller | -rf | z\n"))
	if want := []string{"202604.01.10-ubuntu22.04u1", debFull, "202604.01.0-ubuntu22.04u1"}; !cmp.Equal(deb, want) {
		t.Errorf("debVersions = %q, want %q", deb, want)
	}
	rpm := rpmVersions([]byte(dnfList + "aks-node-controller-extras.x86_64 202604.01.1-1.azl3 repo\nInstalled Packages\naks-node-controller.x86_64 $(reboot) repo\n"))
	if want := []string{"202604.01.0-1.azl3", rpmFull, "202604.01.10-1.azl3"}; !cmp.Equal(rpm, want) {
		t.Errorf("rpmVersions = %q, want %q", rpm, want)
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	v := hotfix.MustParseVersion(version)
	if got, err := pick([]byte(madison), debVersions, v); err != nil || got != debFull {
		t.Errorf("pick(madison) = %q, %v; want %q (never the glob-matching 202604.01.10)", got, err, debFull)
	}
	// The same version listed twice (installed and available, two mirrors)
	// is one candidate.
	twice := []byte(madison + " aks-node-controller | " + debFull + " | mirror\n")
	if got, err := pick(twice, debVersions, v); err != nil || got != debFull {
		t.Errorf("pick(twice) = %q, %v", got, err)
	}
	if _, err := pick([]byte(dnfList), rpmVersions, hotfix.MustParseVersion("202604.01.3")); !errors.Is(err, ErrNoPackage) {
		t.Errorf("pick(absent) = %v, want ErrNoPackage", err)
	}
}

// FuzzPick: whatever a repository lists, a chosen version is a valid full
// version whose upstream is exactly the wanted one.
func FuzzPick(f *testing.F) {
	f.Add([]byte(madison), []byte(dnfList))
	f.Add([]byte(" aks-node-controller | 1:202604.01.1-u1 | x\n"), []byte("aks-node-controller.x86_64 202604.01.1 r\n"))
	v := hotfix.MustParseVersion(version)
	f.Fuzz(func(t *testing.T, deb, rpm []byte) {
		for _, c := range []struct {
			listing []byte
			parse   func([]byte) []string
		}{{deb, debVersions}, {rpm, rpmVersions}} {
			got, err := pick(c.listing, c.parse, v)
			if err != nil {
				continue
			}
			if !validFullVersion(got) || upstream(got) != version {
				t.Fatalf("pick chose %q for %s", got, version)
			}
		}
	})
}
