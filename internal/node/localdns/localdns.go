// Package localdns stages the live-patched Corefile that the localDNS
// component's served configuration selects for this node.
//
// The configuration is the reference's: a JSON object with the Corefile as
// corefile, coreFile, corefileBase64 or corefile_base64 (in that order of
// precedence), optionally per agent pool under agentPools or profiles,
// keyed by the node's kubernetes.azure.com/agentpool kubelet label, each
// entry with an optional corefileVersion or configChecksum. The Corefile is
// written atomically to the output (by default
// /opt/azure/containers/localdns/livepatched.localdns.corefile) and the
// entry's version to the file beside it with ".version" appended. A
// localDnsProfile (a profile to render a Corefile from) is not rendered
// here: such a configuration is noCorefileData and the node keeps the
// Corefile it booted with.
package localdns

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/node/component"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/nodeconfig"
	"nodehotfix/internal/node/task"
	"nodehotfix/internal/release"
)

// Component is the localDNS component's name on the live-patching service.
const Component = "localDNS"

// Outcome is what Apply did; the reference's words, which its callers
// read from the last line of stdout.
type Outcome string

// Outcomes.
const (
	Applied        Outcome = "applied"
	AlreadyCurrent Outcome = "alreadyCurrent"
	NotFound       Outcome = "notFound"
	NoCorefileData Outcome = "noCorefileData"
	Failed         Outcome = "failed"
)

// maxCorefileSize caps the staged Corefile and the one read back: it comes
// from a configuration of at most release.MaxComponentConfigSize bytes.
const maxCorefileSize = release.MaxComponentConfigSize

// maxVersionSize caps the version file read back; a version is a short
// token.
const maxVersionSize = 4 << 10

// Config says where Apply works.
type Config struct {
	// Root is the node's root; paths resolve under it.
	Root layout.Root
	// Output is where the Corefile goes; empty means
	// Root.LocalDNSCorefile().
	Output string
	// ReleaseKeys is the node's release key file; empty means
	// Root.ReleaseKeys(). Without the file the served configuration is
	// used unverified; with it a configuration must carry a valid
	// signature (component.Open), and a damaged file fails.
	ReleaseKeys string
	// Now judges the signature's expiry; zero means time.Now().
	Now time.Time
}

// Result is Apply's outcome, with the error for failed.
type Result struct {
	Outcome Outcome
	// Version is the entry's corefileVersion or configChecksum, if any.
	Version string
	Err     error
}

// Message is the telemetry event's message.
func (r Result) Message() string {
	if r.Err != nil {
		return fmt.Sprintf("fetch-localdns-config outcome=%s error=%s", r.Outcome, r.Err)
	}
	return fmt.Sprintf("fetch-localdns-config outcome=%s", r.Outcome)
}

// Failed reports an Error-level outcome.
func (r Result) Failed() bool { return r.Outcome == Failed }

// FetchTask is fetch-localdns-config's lifecycle within budget, ApplyTask
// apply-localdns-config's: a panic becomes a Failed result.
func FetchTask(budget time.Duration) task.Task[Result] {
	return lifecycle("fetch-localdns-config", event.TaskFetchLocalDNSConfig, budget)
}

// ApplyTask: see FetchTask.
func ApplyTask(budget time.Duration) task.Task[Result] {
	return lifecycle("apply-localdns-config", event.TaskApplyLocalDNSConfig, budget)
}

func lifecycle(name, ev string, budget time.Duration) task.Task[Result] {
	return task.Task[Result]{
		Name: name, Event: ev, Budget: budget,
		OnPanic: func(v any) Result { return Result{Outcome: Failed, Err: fmt.Errorf("panic: %v", v)} },
	}
}

type entry struct {
	CorefileVersion   string          `json:"corefileVersion"`
	ConfigChecksum    string          `json:"configChecksum"`
	Corefile          string          `json:"corefile"`
	CoreFile          string          `json:"coreFile"`
	CorefileBase64    string          `json:"corefileBase64"`
	CorefileBase64Alt string          `json:"corefile_base64"`
	Profile           json.RawMessage `json:"localDnsProfile"`
	ProfileAlt        json.RawMessage `json:"local_dns_profile"`
}

type payload struct {
	entry                       // its version fields are ignored
	AgentPools map[string]entry `json:"agentPools"`
	Profiles   map[string]entry `json:"profiles"`
}

// Apply stages the Corefile served (the config text the service answered
// for Component) selects for this node. It never panics on input and
// returns Failed with the error for anything it cannot use; the caller
// decides that a failure leaves provisioning alone.
func Apply(cfg Config, served string) Result {
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	out := cfg.Output
	if out == "" {
		out = cfg.Root.LocalDNSCorefile()
	}
	// Signed or not, no configuration a service serves is larger.
	if len(served) > release.MaxComponentServedSize {
		return Result{Outcome: Failed, Err: fmt.Errorf("localDNS config is %d bytes, over the %d a served one can be", len(served), release.MaxComponentServedSize)}
	}
	keysPath := cfg.ReleaseKeys
	if keysPath == "" {
		keysPath = cfg.Root.ReleaseKeys()
	}
	keys, err := component.LoadKeys(keysPath)
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	opened, err := component.Open(served, Component, keys, cfg.Now, true)
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	if strings.TrimSpace(opened.Config) == "" {
		return Result{Outcome: NoCorefileData}
	}
	var p payload
	if err := json.Unmarshal([]byte(opened.Config), &p); err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("parse localDNS config: %w", err)}
	}
	// Only a per-pool entry names a version, as the reference reads it.
	e := p.entry
	e.CorefileVersion, e.ConfigChecksum = "", ""
	if len(p.AgentPools) > 0 || len(p.Profiles) > 0 {
		pool, err := nodeconfig.AgentPool(cfg.Root.NodeConfig(), cfg.Root.NBCCmd())
		if err != nil {
			return Result{Outcome: Failed, Err: fmt.Errorf("localDNS config is per agent pool: %w", err)}
		}
		var ok bool
		if e, ok = p.AgentPools[pool]; !ok {
			if e, ok = p.Profiles[pool]; !ok {
				return Result{Outcome: NoCorefileData}
			}
		}
	}
	corefile, err := e.corefile()
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	version := strings.TrimSpace(e.CorefileVersion)
	if version == "" {
		version = strings.TrimSpace(e.ConfigChecksum)
	}
	if corefile == "" {
		return Result{Outcome: NoCorefileData, Version: version}
	}
	return stage(out, corefile, version)
}

// corefile returns the entry's Corefile, "" when it has none.
func (e entry) corefile() (string, error) {
	for _, c := range []string{e.Corefile, e.CoreFile} {
		if strings.TrimSpace(c) != "" {
			return c, nil
		}
	}
	for _, b := range []string{e.CorefileBase64, e.CorefileBase64Alt} {
		if strings.TrimSpace(b) == "" {
			continue
		}
		d, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b))
		if err != nil {
			return "", fmt.Errorf("decode localDNS corefileBase64: %w", err)
		}
		if strings.TrimSpace(string(d)) == "" {
			return "", nil
		}
		return string(d), nil
	}
	return "", nil
}

// stage writes corefile and version to out and its version file unless
// they are there already.
func stage(out, corefile, version string) Result {
	versionPath := out + ".version"
	// What cannot be read back (too large, not a regular file) is not the
	// Corefile wanted: replace it.
	cur, err := capfile.Read(out, maxCorefileSize)
	if err == nil && bytes.Equal(cur, []byte(corefile)) {
		curVersion, err := capfile.Read(versionPath, maxVersionSize)
		if version == "" || (err == nil && strings.TrimSpace(string(curVersion)) == version) {
			return Result{Outcome: AlreadyCurrent, Version: version}
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Result{Outcome: Failed, Version: version, Err: fmt.Errorf("write localDNS corefile: %w", err)}
	}
	if err := atomicfile.WriteFile(out, []byte(corefile), 0o644); err != nil {
		return Result{Outcome: Failed, Version: version, Err: fmt.Errorf("write localDNS corefile: %w", err)}
	}
	if version != "" {
		if err := atomicfile.WriteFile(versionPath, []byte(version+"\n"), 0o600); err != nil {
			return Result{Outcome: Failed, Version: version, Err: fmt.Errorf("write localDNS corefile version: %w", err)}
		}
	}
	return Result{Outcome: Applied, Version: version}
}

// Fetch asks the live-patching service for Component's configuration as
// node and applies it. The service's "nothing for you" (NotFound,
// PermissionDenied, Unauthenticated) is NotFound, as the reference reads
// it; any other failure, reaching the service included, is Failed. ctx
// bounds the metadata service, the connection and the call.
func Fetch(ctx context.Context, cfg Config, node lpsclient.Node) Result {
	c, err := node.Open(ctx)
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	defer c.Close()
	served, err := c.Fetch(ctx, lpsclient.Request{Component: Component})
	var le *lpsclient.Error
	if errors.As(err, &le) && le.Class == lpsclient.ClassNoHotfix {
		return Result{Outcome: NotFound}
	}
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	return Apply(cfg, served)
}
