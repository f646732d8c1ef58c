package release

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/hotfix"
)

// testNow is the fixed clock of every test: a month before testRelease
// expires.
var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testRelease() Release {
	return Release{
		Base:    "202604.01",
		Version: "202604.01.3",
		Artifacts: map[string]Artifact{
			"linux/amd64": {
				URL:    "https://example.blob.core.windows.net/hotfix/aks-node-controller-linux-amd64?sv=1&sig=x",
				SHA256: strings.Repeat("ab", 32),
				Size:   12345,
			},
			"linux/arm64": {
				URL:    "https://example.blob.core.windows.net/hotfix/aks-node-controller-linux-arm64",
				SHA256: strings.Repeat("0f", 32),
				Size:   23456,
			},
		},
		NotAfter: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
	}
}

// testKey returns a deterministic key pair; distinct seeds give distinct keys.
func testKey(seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	return priv.Public().(ed25519.PublicKey), priv
}

func mustKeySet(t testing.TB, keys ...ed25519.PublicKey) KeySet {
	t.Helper()
	ks, err := NewKeySet(keys...)
	if err != nil {
		t.Fatalf("NewKeySet: %v", err)
	}
	return ks
}

func mustSign(t testing.TB, r Release, priv ed25519.PrivateKey) []byte {
	t.Helper()
	env, err := Sign(r, priv)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return env
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(r *Release)
		ok     bool
	}{
		{"valid", func(r *Release) {}, true},
		{"one-artifact", func(r *Release) { delete(r.Artifacts, "linux/arm64") }, true},
		{"url-port", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https://example.com:8443/x" }) }, true},
		{"max-size", func(r *Release) { setArtifact(r, func(a *Artifact) { a.Size = MaxArtifactSize }) }, true},
		{"bad-base", func(r *Release) { r.Base = "2026.04.01" }, false},
		{"empty-base", func(r *Release) { r.Base = "" }, false},
		{"dev-version", func(r *Release) { r.Version = "dev" }, false},
		{"version-no-patch", func(r *Release) { r.Version = "202604.01" }, false},
		{"version-prerelease", func(r *Release) { r.Version = "202604.01.3-1" }, false},
		{"version-spaces", func(r *Release) { r.Version = " 202604.01.3\n" }, false},
		{"version-other-base", func(r *Release) { r.Version = "202605.01.3" }, false},
		{"no-artifacts", func(r *Release) { r.Artifacts = nil }, false},
		{"platform-upper", func(r *Release) { moveArtifact(r, "Linux/amd64") }, false},
		{"platform-no-arch", func(r *Release) { moveArtifact(r, "linux") }, false},
		{"platform-empty-arch", func(r *Release) { moveArtifact(r, "linux/") }, false},
		{"platform-variant", func(r *Release) { moveArtifact(r, "linux/arm/v7") }, false},
		{"platform-dots", func(r *Release) { moveArtifact(r, "../amd64") }, false},
		{"http-url", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "http://example.com/x" }) }, false},
		{"upper-scheme", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "HTTPS://example.com/x" }) }, true},
		{"file-url", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "file:///usr/bin/x" }) }, false},
		{"no-host", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https:///x" }) }, false},
		{"port-only-host", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https://:443/x" }) }, false},
		{"opaque-url", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https:example.com/x" }) }, false},
		{"userinfo", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https://user:pw@example.com/x" }) }, false},
		{"space-in-url", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https://example.com/a b" }) }, false},
		{"non-ascii-url", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "https://example.com/é" }) }, false},
		{"long-url", func(r *Release) {
			setArtifact(r, func(a *Artifact) { a.URL = "https://example.com/" + strings.Repeat("a", maxURLLength) })
		}, false},
		{"empty-url", func(r *Release) { setArtifact(r, func(a *Artifact) { a.URL = "" }) }, false},
		{"sha-upper", func(r *Release) { setArtifact(r, func(a *Artifact) { a.SHA256 = strings.Repeat("AB", 32) }) }, false},
		{"sha-short", func(r *Release) { setArtifact(r, func(a *Artifact) { a.SHA256 = strings.Repeat("ab", 31) }) }, false},
		{"sha-not-hex", func(r *Release) { setArtifact(r, func(a *Artifact) { a.SHA256 = strings.Repeat("zz", 32) }) }, false},
		{"zero-size", func(r *Release) { setArtifact(r, func(a *Artifact) { a.Size = 0 }) }, false},
		{"negative-size", func(r *Release) { setArtifact(r, func(a *Artifact) { a.Size = -1 }) }, false},
		{"oversized", func(r *Release) { setArtifact(r, func(a *Artifact) { a.Size = MaxArtifactSize + 1 }) }, false},
		{"no-not-after", func(r *Release) { r.NotAfter = time.Time{} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := testRelease()
			tt.modify(&r)
			err := r.Validate()
			if (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// setArtifact modifies the linux/amd64 artifact of r.
func setArtifact(r *Release, f func(a *Artifact)) {
	a := r.Artifacts["linux/amd64"]
	f(&a)
	r.Artifacts["linux/amd64"] = a
}

// moveArtifact renames the linux/amd64 platform of r.
func moveArtifact(r *Release, platform string) {
	r.Artifacts[platform] = r.Artifacts["linux/amd64"]
	delete(r.Artifacts, "linux/amd64")
}

func TestValidateWrapsVersionError(t *testing.T) {
	t.Parallel()
	r := testRelease()
	r.Version = "dev"
	if err := r.Validate(); !errors.Is(err, hotfix.ErrMalformedVersion) {
		t.Errorf("Validate() = %v, want an error wrapping hotfix.ErrMalformedVersion", err)
	}
}

func TestArtifact(t *testing.T) {
	t.Parallel()
	r := testRelease()
	tests := []struct {
		platform string
		want     Artifact
		ok       bool
	}{
		{Platform("linux", "amd64"), r.Artifacts["linux/amd64"], true},
		{Platform("linux", "arm64"), r.Artifacts["linux/arm64"], true},
		{Platform("windows", "amd64"), Artifact{}, false},
		{"linux", Artifact{}, false},
	}
	for _, tt := range tests {
		got, ok := r.Artifact(tt.platform)
		if ok != tt.ok {
			t.Errorf("Artifact(%q) ok = %v, want %v", tt.platform, ok, tt.ok)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Artifact(%q) mismatch (-want +got):\n%s", tt.platform, diff)
		}
	}
}

func TestPlatform(t *testing.T) {
	t.Parallel()
	if got, want := Platform("linux", "arm64"), "linux/arm64"; got != want {
		t.Errorf("Platform(linux, arm64) = %q, want %q", got, want)
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	r := testRelease()
	tests := []struct {
		name    string
		version hotfix.Version
		ok      bool
	}{
		{"same", hotfix.MustParseVersion("202604.01.3"), true},
		{"other-patch", hotfix.MustParseVersion("202604.01.4"), false},
		{"other-base", hotfix.MustParseVersion("202605.01.3"), false},
		{"zero", hotfix.Version{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := r.Matches(tt.version)
			if (err == nil) != tt.ok {
				t.Errorf("Matches(%v) = %v, want ok=%v", tt.version, err, tt.ok)
			}
		})
	}
}
