// Package explain reports, without changing anything or touching the
// network, what the hotfix path would do on this node and why.
package explain

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/downloadhotfix"
	"nodehotfix/internal/node/features"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/nodeconfig"
	"nodehotfix/internal/release"
)

// Step is one decision, in the order the launcher and agent take them.
type Step struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Report is the whole explanation.
type Report struct {
	Version string `json:"version"`
	Steps   []Step `json:"steps"`
	// Binary is what the launcher would provision with: "hotfix" or "baked".
	Binary string `json:"binary"`
}

// Config says which node to explain.
type Config struct {
	Root layout.Root
	// Version is the baked agent's version.
	Version string
	// ReleaseKeys overrides the image's key file path.
	ReleaseKeys string
	// Now is the time release expiry is judged at; zero means now.
	Now time.Time
}

// Run builds the report. It reads local files only.
func Run(cfg Config) Report {
	r := Report{Version: cfg.Version, Binary: "baked"}
	add := func(step string, ok bool, format string, a ...any) {
		r.Steps = append(r.Steps, Step{Step: step, OK: ok, Detail: fmt.Sprintf(format, a...)})
	}
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}

	feats, err := readFeatures(cfg.Root.EnabledFeatures())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add("feature-flag", false, "%s absent: check-hotfix off (default)", cfg.Root.EnabledFeatures())
	case err != nil:
		add("feature-flag", false, "%v: every feature off", err)
	default:
		on := features.HotfixEnabled(feats)
		add("feature-flag", on, "%s=%q (on only for exactly \"true\"; off skips check-hotfix, not a custom-data pointer)", features.HotfixKey, feats[features.HotfixKey])
	}

	if t, err := nodeconfig.ResolveTarget(cfg.Root.NodeConfig(), cfg.Root.NBCCmd()); err != nil {
		add("lps-target", false, "%v", err)
	} else {
		add("lps-target", len(t.CAPEM) > 0, "host %s from %s; cluster CA %s", t.Host, t.Source, presence(len(t.CAPEM) > 0))
	}

	current, err := hotfix.ParseVersion(cfg.Version)
	if err != nil {
		add("baked-version", false, "%v: no hotfix can apply", err)
		return r
	}
	add("baked-version", true, "%s (base %s)", current, current.Base())

	data, err := capfile.Read(cfg.Root.Pointer(), hotfix.MaxPointerSize)
	if err != nil {
		add("pointer", false, "%v", err)
		return r
	}
	p, err := hotfix.ParsePointer(data)
	if err != nil {
		add("pointer", false, "%v", err)
		return r
	}
	want, src := p.Resolve(current)
	if want == "" {
		add("pointer", false, "no hotfix requested for base %s (a staged hotfix would be removed)", current.Base())
		return r
	}
	add("pointer", true, "requests %s (from %s)", want, src)
	target, err := hotfix.ParseVersion(want)
	if err != nil || !hotfix.IsUpgrade(current, target) {
		add("gate", false, "%s is not a newer patch of %s", want, current)
		return r
	}
	add("gate", true, "%s upgrades %s", target, current)
	if p.IsRevoked(target) {
		add("revocation", false, "%s is revoked", target)
		return r
	}
	add("revocation", true, "%s is not revoked", target)

	keysPath := cfg.ReleaseKeys
	if keysPath == "" {
		keysPath = cfg.Root.ReleaseKeys()
	}
	var artifact *release.Artifact
	keyData, err := capfile.Read(keysPath, release.MaxKeySetSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add("trust", true, "no release keys at %s: the package manager would install %s (repository signing)", keysPath, target)
	case err != nil:
		add("trust", false, "release keys unreadable: %v", err)
		return r
	default:
		ks, err := release.ParseKeySet(keyData)
		if err != nil {
			add("trust", false, "release keys %s: %v", keysPath, err)
			return r
		}
		a, err := downloadhotfix.FindArtifact(ks, p, target, now)
		if err != nil {
			add("trust", false, "%v", err)
			return r
		}
		artifact = &a
		add("trust", true, "release %s signed by a trusted key; artifact %s (%d bytes, sha256 %s…)", target, a.URL, a.Size, a.SHA256[:12])
	}

	staged := cfg.Root.HotfixBinary()
	fi, err := os.Lstat(staged)
	switch {
	case err != nil:
		add("staged", false, "no hotfix binary staged yet: download-hotfix would fetch it")
	case artifact != nil:
		match := downloadhotfix.IsStaged(staged, *artifact)
		add("staged", match, "%s (%d bytes) %s the signed artifact", staged, fi.Size(), map[bool]string{true: "matches", false: "does not match"}[match])
		if match {
			r.Binary = "hotfix"
		}
	default:
		add("staged", true, "%s present; the launcher runs it if `version` reports %s", staged, target)
		r.Binary = "hotfix"
	}
	return r
}

func readFeatures(path string) (map[string]string, error) {
	data, err := capfile.Read(path, features.MaxSize)
	if err != nil {
		return nil, err
	}
	return features.Parse(data)
}

func presence(ok bool) string {
	if ok {
		return "present"
	}
	return "missing (check-hotfix refuses to send credentials)"
}
