// Package explain reports, without changing anything or touching the
// network, what the hotfix path would do on this node and why.
//
// It reads the node through facts.Gather and decides with hotfix.Select,
// exactly as download-hotfix and launch do, so its verdict is launch's
// choice for the same files.
package explain

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/facts"
	"nodehotfix/internal/node/features"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/nodeconfig"
)

// Step is one decision, in the order launch takes them.
type Step struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Report is the whole explanation.
type Report struct {
	Version string `json:"version"`
	Steps   []Step `json:"steps"`
	// Binary is what launch would provision with: "hotfix" or "baked".
	Binary hotfix.Agent `json:"binary"`
	// Reason is hotfix.Select's reason for that choice.
	Reason hotfix.Reason `json:"reason"`
	// Target is the hotfix version the pointer requests, if it is a valid
	// upgrade.
	Target string `json:"target,omitempty"`
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

// decisionSteps are Select's checks in its order, with the reasons that
// stop at each.
var decisionSteps = []struct {
	step    string
	reasons []hotfix.Reason
}{
	{"baked-version", []hotfix.Reason{hotfix.ReasonUnparsableVersion}},
	{"pointer", []hotfix.Reason{hotfix.ReasonInvalidPointer, hotfix.ReasonNoPointer, hotfix.ReasonNoHotfixForBase}},
	{"gate", []hotfix.Reason{hotfix.ReasonNotNewer}},
	{"revocation", []hotfix.Reason{hotfix.ReasonRevoked, hotfix.ReasonUnreadableRevocation}},
	{"trust", []hotfix.Reason{hotfix.ReasonUntrusted}},
	{"staged", []hotfix.Reason{hotfix.ReasonNotStaged, hotfix.ReasonStagedUnsafe, hotfix.ReasonStagedMismatch}},
}

// Run builds the report. It reads local files only; the staged binary is
// run (`version`) only when launch would run it too.
func Run(ctx context.Context, cfg Config) Report {
	r := Report{Version: cfg.Version}
	add := func(step string, ok bool, format string, a ...any) {
		r.Steps = append(r.Steps, Step{Step: step, OK: ok, Detail: fmt.Sprintf(format, a...)})
	}

	path := cfg.Root.EnabledFeatures()
	ff, err := features.Read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add("feature-flag", false, "%s absent: check-hotfix off (default)", path)
	case err != nil:
		add("feature-flag", false, "%v: every feature off", err)
	default:
		v, set := ff.Values[features.HotfixKey]
		if !set {
			add("feature-flag", false, "%s not set: check-hotfix off (a staged pointer still applies)", features.HotfixKey)
		} else {
			add("feature-flag", ff.HotfixEnabled(), "%s=%q (on only for exactly \"true\"; off skips check-hotfix, not a staged pointer)", features.HotfixKey, v)
		}
	}

	if t, err := nodeconfig.ResolveTarget(cfg.Root.NodeConfig(), cfg.Root.NBCCmd()); err != nil {
		add("lps-target", false, "%v", err)
	} else {
		add("lps-target", len(t.CAPEM) > 0, "host %s from %s; cluster CA %s", t.Host, t.Source, presence(len(t.CAPEM) > 0))
	}

	f := facts.Gather(ctx, facts.Config{Root: cfg.Root, Baked: cfg.Version, ReleaseKeys: cfg.ReleaseKeys, Now: cfg.Now})
	d := f.Decision
	r.Binary, r.Reason = d.Agent, d.Reason
	if !d.Target.IsZero() {
		r.Target = d.Target.String()
	}
	for _, s := range decisionSteps {
		if contains(s.reasons, d.Reason) {
			add(s.step, false, "%s", d.Detail)
			break
		}
		add(s.step, true, "%s", passed(s.step, f, d))
	}
	if d.Agent == hotfix.AgentHotfix {
		add("choice", true, "%s", d.Detail)
	}
	return r
}

// passed describes a check Select passed.
func passed(step string, f facts.Facts, d hotfix.Decision) string {
	switch step {
	case "baked-version":
		v, _ := hotfix.ParseVersion(f.Baked)
		return fmt.Sprintf("%s (base %s)", v, v.Base())
	case "pointer":
		return fmt.Sprintf("requests %s (from %s)", d.Requested, d.Source)
	case "gate":
		return fmt.Sprintf("%s is a newer patch of %s", d.Target, f.Baked)
	case "revocation":
		return fmt.Sprintf("%s is not revoked", d.Target)
	case "trust":
		if !f.Trust.Keys {
			return "no release keys on this node: the package manager installs the exact version (repository signing)"
		}
		a := f.Artifacts[d.Target.String()]
		return fmt.Sprintf("release %s signed by a trusted key; artifact %s (%d bytes, sha256 %.12s…)", d.Target, fetch.Redact(a.URL), a.Size, a.SHA256)
	case "staged":
		return fmt.Sprintf("the staged binary reports %s", d.Target)
	}
	return ""
}

func contains(rs []hotfix.Reason, r hotfix.Reason) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func presence(ok bool) string {
	if ok {
		return "present"
	}
	return "missing (check-hotfix refuses to send credentials)"
}
