// Package facts reads from a node what hotfix.Select decides on: the staged
// pointer, the release keys' verdict on its releases and the state of the
// staged hotfix binary.
//
// download-hotfix, explain and launch all gather through Gather, so the
// three can never apply different checks to the same node.
package facts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/proc"
	"nodehotfix/internal/node/trust"
	"nodehotfix/internal/release"
)

const (
	// versionTimeout bounds `<staged> version`: a healthy agent answers in
	// milliseconds, and a hung one must not hold up provisioning.
	versionTimeout = 10 * time.Second
	// maxVersionOutput caps what `<staged> version` may print.
	maxVersionOutput = 256
)

// Config says which node to read.
type Config struct {
	Root layout.Root
	// Baked is the baked agent's version.
	Baked string
	// ReleaseKeys is the trusted key file; empty means the image's default
	// under Root.
	ReleaseKeys string
	// Hotfix is the staged hotfix binary's path; empty means the default
	// under Root.
	Hotfix string
	// TrustState is the node's kept trust state (internal/node/trust);
	// empty means the default under Root.
	TrustState string
	// Now is when release expiry is judged; zero means time.Now().
	Now time.Time
}

// KeysPath returns the release key file c reads.
func (c Config) KeysPath() string {
	if c.ReleaseKeys != "" {
		return c.ReleaseKeys
	}
	return c.Root.ReleaseKeys()
}

// TrustStatePath returns the kept trust state c reads.
func (c Config) TrustStatePath() string {
	if c.TrustState != "" {
		return c.TrustState
	}
	return c.Root.TrustState()
}

// HotfixPath returns the staged hotfix binary c inspects.
func (c Config) HotfixPath() string {
	if c.Hotfix != "" {
		return c.Hotfix
	}
	return c.Root.HotfixBinary()
}

// Facts is Select's input plus the verified artifacts it refers to.
type Facts struct {
	hotfix.Input
	// Artifacts maps each verified version to this platform's artifact.
	Artifacts map[string]release.Artifact
	// PointerMissing reports that no pointer file exists.
	PointerMissing bool
	// View is what the node believes of its keys and the log (nil when
	// the node has no release keys); Kept is the state it was weighed
	// against, which download-hotfix moves forward (View.Next).
	View *trust.View
	Kept trust.State
	// Decision is hotfix.Select on Input as Gather leaves it: what
	// launch, explain and download-hotfix act on, decided once.
	Decision hotfix.Decision
}

// Gather reads the node. It never fails: every problem is a fact Select
// weighs. The staged binary is executed (`version`) and hashed only when the
// pointer and the keys would let it run, so a revoked or unrequested binary
// is never started.
func Gather(ctx context.Context, cfg Config) Facts {
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	f := Facts{Input: hotfix.Input{Baked: cfg.Baked}}
	f.Pointer, f.PointerErr = readPointer(cfg.Root.Pointer())
	if errors.Is(f.PointerErr, fs.ErrNotExist) {
		f.PointerErr, f.PointerMissing = nil, true
	}
	f.Trust, f.Artifacts, f.View, f.Kept = gatherTrust(cfg, f.Pointer, now)
	if f.PointerErr == nil && len(f.Kept.Revoked) > 0 {
		// A version the node was once shown revoked never runs again.
		f.Pointer = f.Pointer.WithRevoked(f.Kept.Revoked)
	}
	path := cfg.HotfixPath()
	f.Staged = inspect(path)
	f.Decision = hotfix.Select(f.Input)
	if f.Decision.Reason == hotfix.ReasonStagedMismatch {
		// A present, safe file that nothing was probed on yet: the pointer
		// and the keys would let the target run, so look at it, and
		// decide on what it is.
		f.Staged = probe(ctx, path, f.Staged, f.Decision.SHA256)
		f.Decision = hotfix.Select(f.Input)
	}
	return f
}

// readPointer reads the pointer without following a symlink at its path.
func readPointer(path string) (hotfix.Pointer, error) {
	data, err := capfile.ReadNoFollow(path, hotfix.MaxPointerSize)
	if err != nil {
		return hotfix.Pointer{}, err
	}
	return hotfix.ParsePointer(data)
}

// gatherTrust verifies every release in p with the node's newest key set:
// the key file at cfg's keys path, extended by the key-set chain kept and
// served (internal/node/trust), and, when that set requires it, proven in
// the transparency log. A missing key file means the node trusts its
// package repository instead.
func gatherTrust(cfg Config, p hotfix.Pointer, now time.Time) (hotfix.Trust, map[string]release.Artifact, *trust.View, trust.State) {
	keysPath := cfg.KeysPath()
	data, err := capfile.Read(keysPath, release.MaxKeySetSize)
	if errors.Is(err, fs.ErrNotExist) {
		return hotfix.Trust{}, nil, nil, trust.State{}
	}
	t := hotfix.Trust{Keys: true}
	if err != nil {
		t.KeysErr = fmt.Errorf("read release keys: %w", err)
		return t, nil, nil, trust.State{}
	}
	root, err := release.ParseKeySet(data)
	if err != nil {
		t.KeysErr = fmt.Errorf("release keys %s: %w", keysPath, err)
		return t, nil, nil, trust.State{}
	}
	kept, err := trust.Load(cfg.TrustStatePath())
	if err != nil {
		// What the node kept is unreadable: weigh the evidence from the
		// baked root alone, and say so. Only root can write the file.
		t.Refused = append(t.Refused, fmt.Sprintf("kept trust state ignored: %v", err))
		kept = trust.State{}
	}
	view := trust.Evaluate(root, kept, p, now)
	if view.KeptErr != nil {
		t.Refused = append(t.Refused, view.KeptErr.Error())
	}
	if view.Err != nil {
		t.KeysErr = view.Err
		return t, nil, &view, kept
	}
	ks := view.Keys
	platform := release.Platform(runtime.GOOS, runtime.GOARCH)
	artifacts := make(map[string]release.Artifact)
	t.Signed = make(map[string]string)
	for i, env := range p.Releases {
		rel, err := ks.Verify(env, now)
		if err == nil {
			var v hotfix.Version
			if v, err = hotfix.ParseVersion(rel.Version); err == nil {
				err = rel.Matches(v)
			}
		}
		if err == nil && view.LogRequired() {
			if err = view.CheckLogged(env); err != nil {
				err = fmt.Errorf("not proven in the transparency log: %w", err)
			}
		}
		if err != nil {
			t.Refused = append(t.Refused, fmt.Sprintf("release %d: %v", i, err))
			continue
		}
		a, ok := rel.Artifact(platform)
		if !ok {
			t.Refused = append(t.Refused, fmt.Sprintf("release %d (%s): no artifact for %s", i, rel.Version, platform))
			continue
		}
		if _, dup := t.Signed[rel.Version]; !dup {
			t.Signed[rel.Version] = a.SHA256
			artifacts[rel.Version] = a
			if rel.LaunchRecords {
				if t.LaunchRecords == nil {
					t.LaunchRecords = make(map[string]bool)
				}
				t.LaunchRecords[rel.Version] = true
			}
		}
	}
	return t, artifacts, &view, kept
}

// inspect checks the file at path without opening or running it: it must be
// a regular executable file that, like its directory, only this process's
// user can write. Whoever else could write either could swap the bytes
// between these checks and the exec.
func inspect(path string) hotfix.Staged {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return hotfix.Staged{}
	}
	st := hotfix.Staged{Present: true}
	if err != nil {
		st.Unsafe = fmt.Sprintf("cannot stat it: %v", err)
		return st
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		st.Unsafe = "it is a symlink"
	case !fi.Mode().IsRegular():
		st.Unsafe = fmt.Sprintf("not a regular file (%s)", fi.Mode().Type())
	case fi.Mode().Perm()&0o111 == 0:
		st.Unsafe = fmt.Sprintf("not executable (mode %#o)", fi.Mode().Perm())
	default:
		st.Unsafe = ownerModeProblem("", fi)
	}
	if st.Unsafe != "" {
		return st
	}
	dir := filepath.Dir(path)
	di, err := os.Lstat(dir)
	switch {
	case err != nil:
		st.Unsafe = fmt.Sprintf("cannot stat its directory: %v", err)
	case !di.IsDir():
		st.Unsafe = fmt.Sprintf("its directory %s is not a directory (%s)", dir, di.Mode().Type())
	default:
		st.Unsafe = ownerModeProblem("its directory "+dir+" is ", di)
	}
	return st
}

func ownerModeProblem(what string, fi fs.FileInfo) string {
	if s, ok := fi.Sys().(*syscall.Stat_t); ok && int(s.Uid) != os.Geteuid() {
		return fmt.Sprintf("%sowned by uid %d, not %d", what, s.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("%swritable by group or others (mode %#o)", what, fi.Mode().Perm())
	}
	return ""
}

// probe hashes the file when the node has release keys (want is the signed
// digest) and, unless the digest already differs, runs `<path> version`: a
// binary no key signed is never started.
func probe(ctx context.Context, path string, st hotfix.Staged, want string) hotfix.Staged {
	if want != "" {
		sum, err := fileSHA256(path)
		if err != nil {
			st.ProbeErr = fmt.Sprintf("hash it: %v", err)
			return st
		}
		st.SHA256 = sum
		if !strings.EqualFold(sum, want) {
			return st
		}
	}
	out, err := ReportedVersion(ctx, path)
	if err != nil {
		st.ProbeErr = err.Error()
		return st
	}
	st.Reported = out
	return st
}

// ReportedVersion runs `<path> version`, bounded in time and output, and
// returns what it printed without surrounding whitespace. download-hotfix
// runs it on a binary before staging it, Gather on a staged one.
func ReportedVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	return proc.Output(ctx, maxVersionOutput, path, "version")
}

// fileSHA256 hashes the regular file at path without following a symlink.
func fileSHA256(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, release.MaxArtifactSize+1)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
