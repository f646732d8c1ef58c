// Package embedhotfix carries script hotfixes inside the agent binary and
// applies them: per platform a rendered nodecustomdata document whose
// write_files entries replace the provisioning scripts, so a scripts fix
// travels with the agent instead of in custom data (whose 64 KiB limit the
// reference is leaving behind). The legacy scripts_version path stays.
//
// The layout is the reference's: scripthotfix/generated holds
// rendered_nodecustomdata_<platform>.yml for the platforms Platform
// classifies, applied only while its "active" file says "true" (after
// trimming). cmd/embed-hotfix puts them there before the build. A payload
// is applied with the reference's options (scripts.Embedded: strict,
// replace-only, permissions required, no unsafe path, no empty content),
// all or nothing.
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
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/osrelease"
	"nodehotfix/internal/node/scripts"
	"nodehotfix/internal/node/task"
)

// embedded is the agent's own payload directory, as built.
//
//go:embed scripthotfix/generated
var embedded embed.FS

// Dir is the payload directory inside the agent's source, and inside the
// embedded file system.
const Dir = "scripthotfix/generated"

// Payloads returns the payloads this binary carries.
func Payloads() fs.FS {
	sub, err := fs.Sub(embedded, Dir)
	if err != nil {
		panic(err) // the directory is embedded: it exists
	}
	return sub
}

// Budget is apply-embedded-hotfix's one time limit: a few files written
// locally, so a minute is a hang. Apply takes no context and cannot be
// stopped part way, so the limit is the parent's to enforce by killing the
// process (launch does; the reference launcher sets none): Task sets no
// deadline of its own that would bound nothing.
const Budget = time.Minute

// Names in a payload directory.
const (
	// ActiveFile gates the payloads: they apply only when it says "true".
	ActiveFile = "active"
	// PayloadPrefix and PayloadSuffix frame a platform's payload name.
	PayloadPrefix = "rendered_nodecustomdata_"
	PayloadSuffix = ".yml"
)

// PayloadName returns the file name of platform's payload.
func PayloadName(platform string) string { return PayloadPrefix + platform + PayloadSuffix }

// Platforms are the platforms a payload may be for, the reference's.
var Platforms = []string{"ubuntu", "mariner", "acl", "azlosguard", "flatcar"}

// Platform returns the payload platform for the node's distribution, in the
// reference's order: VARIANT_ID osguard is azlosguard; VARIANT_ID or ID
// azurecontainerlinux is acl; then ID ubuntu, flatcar, and mariner or
// azurelinux (mariner). Any other distribution gets "": it takes no script
// hotfix.
func Platform(osr osrelease.OSRelease) string {
	switch {
	case osr.VariantID == "osguard":
		return "azlosguard"
	case osr.VariantID == "azurecontainerlinux" || osr.ID == "azurecontainerlinux":
		return "acl"
	case osr.ID == "ubuntu":
		return "ubuntu"
	case osr.ID == "flatcar":
		return "flatcar"
	case osr.ID == "mariner" || osr.ID == "azurelinux":
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
	UnsupportedOS Outcome = "unsupportedOS" // a distribution no platform is for
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

// Task is apply-embedded-hotfix's lifecycle: a panic becomes a Failed
// result. It has no budget (see Budget).
func Task() task.Task[Result] {
	return task.Task[Result]{
		Name: "apply-embedded-hotfix", Event: event.TaskApplyEmbedded,
		OnPanic: func(v any) Result { return Result{Outcome: Failed, Err: fmt.Errorf("panic: %v", v)} },
	}
}

// maxActiveSize caps the marker.
const maxActiveSize = 64

// Apply applies the payload in payloads for the node under root:
//
//  1. nothing unless payloads/active says "true" (Inactive);
//  2. the platform from the node's os-release (UnsupportedOS, or Failed when
//     os-release cannot be read);
//  3. nothing without that platform's payload (NoPayload);
//  4. the whole payload is parsed and checked (scripts.Parse with
//     scripts.Embedded) and every target checked before anything is
//     written, so a bad payload writes nothing (Failed);
//  5. each of its files is replaced atomically with its mode, all or
//     nothing (scripts.Apply), then the payload is kept at
//     opt/azure/containers/embedded-nodecustomdata.yml (mode 0600).
//
// The reference fails, where this says Inactive, UnsupportedOS or
// NoPayload, on a missing marker, an unknown distribution and a platform
// without a payload; both launchers carry on either way, and an agent
// without payloads for this node is not broken.
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
	files, err := scripts.Parse(data, scripts.Embedded)
	if err != nil {
		return Result{Outcome: Failed, Platform: platform, Err: fmt.Errorf("payload %s: %w", PayloadName(platform), err)}
	}
	if err := scripts.Apply(string(root), files, scripts.Embedded); err != nil {
		return Result{Outcome: Failed, Platform: platform, Err: err}
	}
	// The copy records what was applied, as the reference keeps one; it
	// comes last so that a refused payload leaves no trace.
	dst := root.EmbeddedNodeCustomData()
	err = os.MkdirAll(filepath.Dir(dst), 0o755)
	if err == nil {
		err = atomicfile.WriteFile(dst, data, 0o600)
	}
	if err != nil {
		return Result{Outcome: Failed, Platform: platform, Files: len(files), Err: fmt.Errorf("payload applied, but its copy at %s was not written: %w", dst, err)}
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
