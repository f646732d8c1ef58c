package release

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/hotfix"
)

// MaxArtifactSize caps the signed size of one artifact. A node downloads at
// most this many bytes for a hotfix, whatever a release claims.
const MaxArtifactSize = 512 << 20

// maxURLLength keeps artifact URLs far below any HTTP request-line limit.
const maxURLLength = 2048

// Release is what an operator signs for one hotfix version: the artifacts of
// that version, one per platform, and how long the signature stays valid.
type Release struct {
	// Base is the image base "YYYYMM.DD" the hotfix applies to.
	Base string `json:"base"`
	// Version is the hotfix version "YYYYMM.DD.PATCH"; its base is Base.
	Version string `json:"version"`
	// Artifacts maps a platform ("linux/amd64", see Platform) to its binary.
	Artifacts map[string]Artifact `json:"artifacts"`
	// NotAfter is when the release stops verifying. Sign encodes it in UTC,
	// truncated to the second.
	NotAfter time.Time `json:"not_after"`
	// LaunchRecords declares that the release's agent keeps launch's
	// protocol: run as a hotfix by launch, its provision records its
	// preflight at once and never starts the bootstrap before recording
	// that (provision-started.json). Launch may then kill it, and let the
	// baked agent provision, when it wrote no record at all within a minute
	// (launch.DefaultStartTimeout), without risking two bootstraps. Signed
	// only when true ("launch_records"), so a release without it has the
	// bytes it always had; an agent that predates the key refuses a release
	// that carries it, so sign it only for bases whose baked agent verifies
	// it (this key's agent version on).
	LaunchRecords bool `json:"launch_records,omitempty"`
}

// Artifact is one downloadable binary of a release.
type Artifact struct {
	// URL is where the binary can be fetched; always https.
	URL string `json:"url"`
	// SHA256 is the lowercase hex sha256 of the binary.
	SHA256 string `json:"sha256"`
	// Size is the exact length of the binary in bytes.
	Size int64 `json:"size"`
}

// Platform returns the artifact key for an OS and architecture in Go's
// spelling, e.g. Platform(runtime.GOOS, runtime.GOARCH) = "linux/amd64".
func Platform(goos, goarch string) string { return goos + "/" + goarch }

// Artifact returns the artifact for platform and whether the release has one.
func (r Release) Artifact(platform string) (Artifact, bool) {
	a, ok := r.Artifacts[platform]
	return a, ok
}

// Validate reports the first schema violation in r, or nil. It checks that
// Base is a valid image base, Version a canonical hotfix version of that
// same base, that there is at least one artifact, each with a platform key
// "os/arch" of lower-case letters and digits, an https URL with a host and no
// user info, a 64-character lowercase hex SHA256 and a Size in
// (0, MaxArtifactSize], and that NotAfter is set. Version errors wrap
// hotfix.ErrMalformedVersion.
func (r Release) Validate() error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("validate release: %w", err)
	}
	return nil
}

func (r Release) validate() error {
	if _, err := hotfix.ParseBase(r.Base); err != nil {
		return err
	}
	v, err := hotfix.ParseVersion(r.Version)
	if err != nil {
		return err
	}
	// ParseVersion trims spaces; the signed string itself must be canonical
	// so that every reader compares the same text.
	if v.String() != r.Version {
		return fmt.Errorf("version %q: not in canonical form %q", r.Version, v.String())
	}
	if v.Base() != r.Base {
		return fmt.Errorf("version %q: not of base %q", r.Version, r.Base)
	}
	if len(r.Artifacts) == 0 {
		return errors.New("no artifacts")
	}
	platforms := make([]string, 0, len(r.Artifacts))
	for p := range r.Artifacts {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	for _, p := range platforms {
		if !validPlatform(p) {
			return fmt.Errorf("platform %q: want os/arch of [a-z0-9]", p)
		}
		if err := r.Artifacts[p].validate(); err != nil {
			return fmt.Errorf("artifact %q: %w", p, err)
		}
	}
	if r.NotAfter.IsZero() {
		return errors.New("not_after is not set")
	}
	return nil
}

func (a Artifact) validate() error {
	if err := validateURL(a.URL); err != nil {
		return err
	}
	if !isLowerHex(a.SHA256) || len(a.SHA256) != 64 {
		return fmt.Errorf("sha256 %q: want 64 lowercase hex digits", a.SHA256)
	}
	if a.Size <= 0 || a.Size > MaxArtifactSize {
		return fmt.Errorf("size %d: want 1 to %d bytes", a.Size, MaxArtifactSize)
	}
	return nil
}

func validateURL(s string) error {
	if len(s) > maxURLLength {
		return fmt.Errorf("url: longer than %d bytes", maxURLLength)
	}
	// url.Parse tolerates spaces and non-ASCII in paths; a signed URL must
	// mean the same thing to every HTTP client, so allow only printable ASCII.
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("url %q: byte 0x%02x at offset %d", s, s[i], i)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("url %q: scheme is not https", s)
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Errorf("url %q: no host", s)
	case u.User != nil:
		return fmt.Errorf("url %q: has user info", s)
	}
	return nil
}

// validPlatform reports whether p is "os/arch" with both parts non-empty
// lower-case ASCII letters and digits.
func validPlatform(p string) bool {
	goos, goarch, ok := strings.Cut(p, "/")
	return ok && isLowerAlnum(goos) && isLowerAlnum(goarch)
}

func isLowerAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'f') && (c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// Matches returns nil if r is the release of version v: the same base and the
// same version. A node calls it after Verify with the version the pointer
// chose, so a validly signed release of another version (wrong software)
// is never used in its place.
func (r Release) Matches(v hotfix.Version) error {
	if v.IsZero() {
		return errors.New("match release: no version to match")
	}
	if r.Base != v.Base() || r.Version != v.String() {
		return fmt.Errorf("match release: release is %s (base %s), want %s (base %s)", r.Version, r.Base, v, v.Base())
	}
	return nil
}
