// Package osrelease reads the node's os-release(5): the distribution the
// package route and the embedded script hotfixes choose by.
package osrelease

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/layout"
)

// maxOSReleaseSize bounds the read; real os-release files are under 1 KiB.
const maxOSReleaseSize = 64 << 10

// OSRelease is the part of os-release(5) the node agent chooses by.
type OSRelease struct {
	// ID is the distribution ID, unquoted and lower-cased, e.g. "ubuntu".
	ID string
	// VariantID is the variant, unquoted and lower-cased, or "".
	VariantID string
	// VersionID is the release, unquoted and lower-cased ("3.0",
	// "24.04"), or "".
	VersionID string
}

// Read reads <root>/etc/os-release or, only if that does not
// exist, <root>/usr/lib/os-release, as os-release(5) prescribes. A file
// without an ID is an error.
func Read(root string) (OSRelease, error) {
	var err error
	for _, p := range layout.Root(root).OSRelease() {
		var data []byte
		data, err = capfile.Read(p, maxOSReleaseSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return OSRelease{}, err
		}
		osr, err := Parse(data)
		if err != nil {
			return OSRelease{}, fmt.Errorf("parse %s: %w", p, err)
		}
		return osr, nil
	}
	return OSRelease{}, err
}

// Parse parses os-release text. Like the reference agent it takes
// the first ID= line; values lose one pair of surrounding quotes and are
// lower-cased. Text without a non-empty ID is an error.
func Parse(data []byte) (OSRelease, error) {
	var osr OSRelease
	var haveID, haveVariant, haveVersion bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxOSReleaseSize)
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch {
		case key == "ID" && !haveID:
			osr.ID, haveID = unquote(val), true
		case key == "VARIANT_ID" && !haveVariant:
			osr.VariantID, haveVariant = unquote(val), true
		case key == "VERSION_ID" && !haveVersion:
			osr.VersionID, haveVersion = unquote(val), true
		}
	}
	if err := sc.Err(); err != nil {
		return OSRelease{}, fmt.Errorf("scan os-release: %w", err)
	}
	if osr.ID == "" {
		return OSRelease{}, errors.New("no ID")
	}
	return osr, nil
}

func unquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return strings.ToLower(strings.TrimSpace(v))
}
