// Package embedhotfix carries script hotfixes inside the agent binary and
// applies them: per distribution a rendered nodecustomdata document whose
// write_files entries replace the provisioning scripts, so a scripts fix
// travels with the agent instead of in custom data (whose 64 KiB limit the
// reference is leaving behind). The legacy scripts_version path stays.
//
// The payloads are payloads/nodecustomdata_<platform>.yml, platform
// "ubuntu" (os-release ID ubuntu) or "mariner" (ID azurelinux), the names
// the reference uses, and they apply only while payloads/active says
// "true". cmd/embed-hotfix puts them there before the build.
package embedhotfix

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/osrelease"
	"nodehotfix/internal/node/scripts"
)

// embedded is the agent's own payload directory, as built.
//
//go:embed payloads
var embedded embed.FS

// Payloads returns the payloads this binary carries.
func Payloads() fs.FS {
	sub, err := fs.Sub(embedded, "payloads")
	if err != nil {
		panic(err) // the directory is embedded: it exists
	}
	return sub
}

// Names in a payload directory.
const (
	// ActiveFile gates the payloads: they apply only when it says "true".
	ActiveFile = "active"
	// payloadPrefix and payloadSuffix frame a platform's payload name.
	payloadPrefix = "nodecustomdata_"
	payloadSuffix = ".yml"
)

// PayloadName returns the file name of platform's payload.
func PayloadName(platform string) string { return payloadPrefix + platform + payloadSuffix }

// Platforms are the platforms a payload may be for.
var Platforms = []string{"ubuntu", "mariner"}

// Platform returns the payload platform for the node's distribution, or ""
// when the distribution takes no script hotfix: Azure Container Linux,
// OSGuard and Flatcar are immutable, and a Mariner 2 node (ID mariner) has
// no rendered payload.
func Platform(osr osrelease.OSRelease) string {
	switch {
	case osr.VariantID == "osguard" || osr.VariantID == "azurecontainerlinux":
		return ""
	case osr.ID == "ubuntu":
		return "ubuntu"
	case osr.ID == "azurelinux":
		return "mariner"
	}
	return ""
}

// Outcome is what an apply did.
type Outcome string

// Outcomes, in the event message.
const (
	Applied       Outcome = "applied"       // the payload's files were written
	Inactive      Outcome = "inactive"      // no active marker saying "true": nothing to do
	NoPayload     Outcome = "noPayload"     // active, but no payload for this platform
	UnsupportedOS Outcome = "unsupportedOS" // the distribution takes no script hotfix
	Failed        Outcome = "failed"        // a bad payload or a failed write
)

// Result is what Apply did.
type Result struct {
	Outcome  Outcome
	Platform string
	// Files is how many files the payload wrote.
	Files int
	Err   error
}

// Message is the event message.
func (r Result) Message() string {
	m := "apply-embedded-hotfix outcome=" + string(r.Outcome)
	if r.Platform != "" {
		m += " platform=" + r.Platform
	}
	if r.Outcome == Applied {
		m += fmt.Sprintf(" files=%d", r.Files)
	}
	if r.Err != nil {
		m += " error=" + r.Err.Error()
	}
	return m
}

// Failed reports an Error-level outcome.
func (r Result) Failed() bool { return r.Outcome == Failed }

// maxActiveSize caps the marker.
const maxActiveSize = 64

// Apply applies the payload in payloads for the node under root:
//
//  1. nothing unless payloads/active says "true" (Inactive);
//  2. the platform from the node's os-release (UnsupportedOS, or Failed when
//     os-release cannot be read);
//  3. nothing without that platform's payload (NoPayload);
//  4. the whole payload is parsed and checked (scripts.Parse) before
//     anything is written, so a bad payload writes nothing (Failed);
//  5. the payload is written to opt/azure/containers/embedded-nodecustomdata.yml
//     (mode 0600, atomically), then each of its files replaced atomically
//     with its mode (scripts.Apply).
func Apply(root layout.Root, payloads fs.FS) Result {
	active, err := readCapped(payloads, ActiveFile, maxActiveSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Result{Outcome: Inactive}
	case err != nil:
		return Result{Outcome: Failed, Err: fmt.Errorf("read the active marker: %w", err)}
	case string(bytes.TrimSpace(active)) != "true":
		return Result{Outcome: Inactive}
	}
	osr, err := osrelease.Read(string(root))
	if err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("os-release: %w", err)}
	}
	platform := Platform(osr)
	if platform == "" {
		return Result{Outcome: UnsupportedOS, Platform: osr.ID}
	}
	data, err := readCapped(payloads, PayloadName(platform), scripts.MaxInputSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Result{Outcome: NoPayload, Platform: platform}
	case err != nil:
		return Result{Outcome: Failed, Platform: platform, Err: err}
	}
	files, err := scripts.Parse(data)
	if err != nil {
		return Result{Outcome: Failed, Platform: platform, Err: fmt.Errorf("payload %s: %w", PayloadName(platform), err)}
	}
	dst := root.EmbeddedNodeCustomData()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return Result{Outcome: Failed, Platform: platform, Err: err}
	}
	if err := atomicfile.WriteFile(dst, data, 0o600); err != nil {
		return Result{Outcome: Failed, Platform: platform, Err: fmt.Errorf("write %s: %w", dst, err)}
	}
	if err := scripts.Apply(string(root), files); err != nil {
		return Result{Outcome: Failed, Platform: platform, Err: err}
	}
	return Result{Outcome: Applied, Platform: platform, Files: len(files)}
}

// readCapped reads name from fsys, refusing more than limit bytes.
func readCapped(fsys fs.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, limit)
	}
	return data, nil
}
