package pkgmgr

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"nodehotfix/internal/node/layout"
)

// maxOSReleaseSize bounds the read; real os-release files are under 1 KiB.
const maxOSReleaseSize = 64 << 10

// ErrUnsupportedOS is returned (wrapped) when the node's OS has no package
// manager this package installs with.
var ErrUnsupportedOS = errors.New("unsupported OS")

// OSRelease is the part of os-release(5) that picks a package manager.
type OSRelease struct {
	// ID is the distribution ID, unquoted and lower-cased, e.g. "ubuntu".
	ID string
	// VariantID is the variant, unquoted and lower-cased, or "".
	VariantID string
}

// ReadOSRelease reads <root>/etc/os-release or, only if that does not
// exist, <root>/usr/lib/os-release, as os-release(5) prescribes. A file
// without an ID is an error.
func ReadOSRelease(root string) (OSRelease, error) {
	var err error
	for _, p := range layout.Root(root).OSRelease() {
		var data []byte
		data, err = readCapped(p, maxOSReleaseSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return OSRelease{}, err
		}
		osr, err := ParseOSRelease(data)
		if err != nil {
			return OSRelease{}, fmt.Errorf("parse %s: %w", p, err)
		}
		return osr, nil
	}
	return OSRelease{}, err
}

func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read os-release: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// ParseOSRelease parses os-release text. Like the reference agent it takes
// the first ID= line; values lose one pair of surrounding quotes and are
// lower-cased. Text without a non-empty ID is an error.
func ParseOSRelease(data []byte) (OSRelease, error) {
	var osr OSRelease
	var haveID, haveVariant bool
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

// Manager is a package manager command.
type Manager string

// Package managers Install can drive.
const (
	APT  Manager = "apt-get"
	DNF  Manager = "dnf"
	TDNF Manager = "tdnf"
)

// Choose returns the package manager for osr: apt-get on Ubuntu; on Azure
// Linux and Mariner, dnf if hasDNF (it is on PATH) and tdnf otherwise.
// Azure Container Linux, by ID or by the azurelinux VARIANT_ID, is
// immutable and, like every other OS, gets an error wrapping
// ErrUnsupportedOS.
func Choose(osr OSRelease, hasDNF bool) (Manager, error) {
	switch {
	case osr.VariantID == "azurecontainerlinux":
		return "", fmt.Errorf("%w: %s variant %s", ErrUnsupportedOS, osr.ID, osr.VariantID)
	case osr.ID == "ubuntu":
		return APT, nil
	case osr.ID == "azurelinux" || osr.ID == "mariner":
		if hasDNF {
			return DNF, nil
		}
		return TDNF, nil
	}
	return "", fmt.Errorf("%w: %s", ErrUnsupportedOS, osr.ID)
}
