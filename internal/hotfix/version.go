// Package hotfix is the pure domain of provisioning-time hotfixes: agent
// versions, the pointer document and the rules that pick a hotfix for a base.
package hotfix

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrMalformedVersion is returned (wrapped) by ParseVersion for any input that
// is not a YYYYMM.DD.PATCH agent version, including development builds ("dev").
var ErrMalformedVersion = errors.New("malformed agent version")

// maxPatch bounds the patch number so that it always fits an int on every
// platform and so that a fast-forwarded serial is recognisably absurd.
const maxPatch = 1<<31 - 1

// Version is an agent build version YYYYMM.DD.PATCH, e.g. 202604.01.3. The
// image (VHD) version and the baked agent version share this format; a hotfix
// for an image keeps the image's base YYYYMM.DD and raises PATCH.
//
// The zero Version is invalid; only ParseVersion makes valid ones.
type Version struct {
	base  string // "YYYYMM.DD", exactly as it appears in pointer map keys
	patch int
}

// ParseVersion parses s strictly. Surrounding whitespace is ignored; anything
// else that is not six digits (a valid year and month), a dot, two digits (a
// valid day), a dot and a decimal patch without sign, leading zeros or suffix
// is rejected. In particular "dev", "202604.01", "202604.1.2",
// "202604.01.1-1" and "202604.01.2.5" are errors: an unparsable version never
// matches a base and never compares as older than anything.
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("%w %q: want YYYYMM.DD.PATCH", ErrMalformedVersion, s)
	}
	base, err := ParseBase(parts[0] + "." + parts[1])
	if err != nil {
		return Version{}, fmt.Errorf("%w %q: %v", ErrMalformedVersion, s, err)
	}
	p := parts[2]
	if p == "" || !allDigits(p) || (len(p) > 1 && p[0] == '0') {
		return Version{}, fmt.Errorf("%w %q: patch must be a decimal integer", ErrMalformedVersion, s)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n > maxPatch {
		return Version{}, fmt.Errorf("%w %q: patch out of range", ErrMalformedVersion, s)
	}
	return Version{base: base, patch: n}, nil
}

// ParseBase validates an image base "YYYYMM.DD" and returns it unchanged.
func ParseBase(s string) (string, error) {
	ym, d, ok := strings.Cut(s, ".")
	if !ok || len(ym) != 6 || len(d) != 2 || !allDigits(ym) || !allDigits(d) {
		return "", fmt.Errorf("base %q: want YYYYMM.DD", s)
	}
	month, _ := strconv.Atoi(ym[4:])
	day, _ := strconv.Atoi(d)
	if month < 1 || month > 12 || day < 1 || day > 31 {
		return "", fmt.Errorf("base %q: month or day out of range", s)
	}
	return s, nil
}

// MustParseVersion is ParseVersion for constants in tests and tables; it
// panics on error.
func MustParseVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Base returns the image base "YYYYMM.DD", the key of the pointer's hotfix map.
func (v Version) Base() string { return v.base }

// Patch returns the patch number.
func (v Version) Patch() int { return v.patch }

// IsZero reports whether v is the invalid zero Version.
func (v Version) IsZero() bool { return v.base == "" }

// String returns the canonical form YYYYMM.DD.PATCH.
func (v Version) String() string {
	if v.IsZero() {
		return ""
	}
	return v.base + "." + strconv.Itoa(v.patch)
}

// IsUpgrade reports whether installing candidate over current is a hotfix:
// the same base and a strictly higher patch. A different base (another image
// stream), an equal or lower patch (a no-op or a rollback) or an invalid
// version on either side is never one.
func IsUpgrade(current, candidate Version) bool {
	return !current.IsZero() && current.base == candidate.base && candidate.patch > current.patch
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
