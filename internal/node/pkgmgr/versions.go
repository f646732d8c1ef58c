package pkgmgr

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"nodehotfix/internal/hotfix"
)

// Errors of the version choice.
var (
	// ErrNoPackage: no package in the repositories has the wanted upstream
	// version.
	ErrNoPackage = errors.New("no package of that version in the repositories")
	// ErrAmbiguousPackage: several packages have the wanted upstream
	// version (different revisions); none is chosen by guess.
	ErrAmbiguousPackage = errors.New("several packages of that version in the repositories")
)

// maxFullVersion bounds a listed version; real ones are under 40 bytes.
const maxFullVersion = 128

// pick returns the one full version in listing, as parse reads it, whose
// upstream version is exactly v.
func pick(listing []byte, parse func([]byte) []string, v hotfix.Version) (string, error) {
	return Pick(parse(listing), v)
}

// Pick returns the one full version of all (Debian or RPM, with epoch and
// revision) whose upstream version is exactly v: never a prefix match
// (202608.26.3 is not 202608.26.30). None or several is an error wrapping
// ErrNoPackage or ErrAmbiguousPackage. The package manager route and the
// repository route choose by it.
func Pick(all []string, v hotfix.Version) (string, error) {
	var match []string
	for _, full := range all {
		if upstream(full) == v.String() && !slices.Contains(match, full) {
			match = append(match, full)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return "", fmt.Errorf("%w: want %s, the repositories have %s", ErrNoPackage, v, summary(all))
	default:
		return "", fmt.Errorf("%w: %s all are %s", ErrAmbiguousPackage, strings.Join(match, ", "), v)
	}
}

// upstream returns a Debian or RPM full version without its epoch and its
// revision (release): "1:202608.26.2-ubuntu24.04u1" → "202608.26.2". A
// version without a revision is its own upstream.
func upstream(full string) string {
	if i := strings.IndexByte(full, ':'); i >= 0 {
		full = full[i+1:]
	}
	if i := strings.LastIndexByte(full, '-'); i >= 0 {
		full = full[:i]
	}
	return full
}

// debVersions reads `apt-cache madison` output, one "name | version |
// source" line per version.
func debVersions(listing []byte) []string {
	var out []string
	for _, line := range bytes.Split(listing, []byte("\n")) {
		f := strings.Split(string(line), "|")
		if len(f) != 3 || strings.TrimSpace(f[0]) != PackageName {
			continue
		}
		if v := strings.TrimSpace(f[1]); validFullVersion(v) {
			out = append(out, v)
		}
	}
	return out
}

// rpmVersions reads `dnf list --showduplicates` (and tdnf's) output, one
// "name.arch version-release repository" line per version; headers and
// other packages are skipped.
func rpmVersions(listing []byte) []string {
	var out []string
	for _, line := range bytes.Split(listing, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) != 3 {
			continue
		}
		name, _, ok := strings.Cut(f[0], ".")
		if !ok || name != PackageName {
			continue
		}
		if validFullVersion(f[1]) {
			out = append(out, f[1])
		}
	}
	return out
}

// validFullVersion reports whether s can be a Debian or RPM version: what a
// broken or hostile repository lists otherwise never reaches argv.
func validFullVersion(s string) bool {
	if s == "" || len(s) > maxFullVersion || s[0] < '0' || s[0] > '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte(".+~:-_", c) >= 0) {
			return false
		}
	}
	return true
}

// summary renders versions for an error: at most a few, then a count.
func summary(versions []string) string {
	const most = 5
	switch {
	case len(versions) == 0:
		return "none"
	case len(versions) <= most:
		return strings.Join(versions, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(versions[len(versions)-most:], ", "), len(versions)-most)
}
