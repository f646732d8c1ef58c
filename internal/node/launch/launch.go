// Package launch provisions a node in the reference launcher's order: the
// hostname wait, the config gate, the feature flags, check-hotfix,
// download-hotfix, the choice of agent, and provision, falling back to the
// baked agent in the same boot when a hotfix fails before the bootstrap
// starts.
//
// Everything before provision is fail-open: no step's failure, panic or
// timeout keeps the node from provisioning. Feature flags are data: they
// never enter this process's environment, only the bootstrap's (and a
// hotfix agent child's, which hands them on to the bootstrap).
//
// Launch runs the whole trip itself (steps.go): check-hotfix and
// download-hotfix in this process, each in its task lifecycle, the baked
// agent's provision, the started and outcome reports on check-hotfix's
// connection. What it hands over, and how the launcher shim sees that, is
// package handover's contract.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/checkhotfix"
	"nodehotfix/internal/node/downloadhotfix"
	"nodehotfix/internal/node/embedhotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/facts"
	"nodehotfix/internal/node/features"
	"nodehotfix/internal/node/handover"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/proc"
	"nodehotfix/internal/node/provision"
	"nodehotfix/internal/node/report"
	"nodehotfix/internal/quote"
)

const (
	// DefaultHostnameWait bounds the wait for the hostname (the reference
	// waits forever).
	DefaultHostnameWait = 60 * time.Second
	// MaxHostnameWait caps an operator's --hostname-wait.
	MaxHostnameWait = 10 * time.Minute
	// DefaultStartTimeout bounds a hotfix agent's preflight: the config
	// checks before the bootstrap take milliseconds, so a minute is a hang.
	DefaultStartTimeout = time.Minute
	// startPoll is how often the preflight watch reads the start record.
	startPoll = 100 * time.Millisecond
)

// Config configures a launch. Root and Version are required.
type Config struct {
	Root layout.Root
	// Version is this agent's version: launch runs as the baked agent.
	Version string
	// BakedPath is the baked agent (the reference's BIN_PATH); empty means
	// the default under Root.
	BakedPath string
	// HotfixPath is where the hotfix agent is staged (the reference's
	// HOTFIX_BIN); empty means BakedPath + "-hotfix".
	HotfixPath string
	// PointerPath is the pointer whose presence runs download-hotfix (the
	// reference's HOTFIX_JSON); empty means the default under Root.
	PointerPath string
	// ConfigPath, NBCCmdPath and FeaturesPath are the node config, the
	// bootstrap command and the feature flags; empty means the defaults.
	ConfigPath, NBCCmdPath, FeaturesPath string
	// ReleaseKeys is the trusted key file; empty means the default.
	ReleaseKeys string
	// ArtifactCA is an extra CA bundle file trusted for artifact downloads
	// (download-hotfix's --artifact-ca); empty means none. An unreadable
	// one fails download-hotfix, never the launch.
	ArtifactCA string
	// IMDSURL and LPSAddr are the metadata service's base URL and the
	// live-patching service's host:port, for check-hotfix and the reports;
	// empty means their defaults (lpsclient.Node).
	IMDSURL, LPSAddr string
	// CheckBudget and DownloadBudget bound check-hotfix and
	// download-hotfix; zero means checkhotfix.DefaultBudget and
	// downloadhotfix.DefaultBudget.
	CheckBudget, DownloadBudget time.Duration
	// LaunchID identifies this launch (the shim passes its own); empty
	// means one is made up.
	LaunchID string
	// HostnameWait bounds the hostname wait; zero means
	// DefaultHostnameWait, negative means no wait, and it is capped at
	// MaxHostnameWait.
	HostnameWait time.Duration
	// StartTimeout bounds a hotfix agent's preflight (see runHotfix); zero
	// means DefaultStartTimeout.
	StartTimeout time.Duration
	// Stdout receives the reference's decision lines and the hotfix
	// agent's output; Stderr the hotfix agent's errors. Nil discards.
	Stdout, Stderr io.Writer
	// Log receives progress; nil discards.
	Log *slog.Logger

	// steps are the trip's steps that leave launch; nil: the real ones
	// (newSteps). Launch's tests swap them.
	steps *steps
}

// provisionArgs are the arguments of the provision launch runs: the baked
// agent's in this process (steps.bakedProvision), the hotfix agent's as a
// child (runHotfix).
type provisionArgs struct {
	ConfigPath, NBCCmdPath string
	// Env is added to the bootstrap's environment: the accepted flags.
	Env []string
	// LaunchID is recorded when the bootstrap starts.
	LaunchID string
	// Fallback is why the baked agent provisions after the hotfix failed.
	Fallback string
}

func (c *Config) defaults() {
	if c.BakedPath == "" {
		c.BakedPath = c.Root.BakedBinary()
	}
	if c.HotfixPath == "" {
		c.HotfixPath = c.BakedPath + "-hotfix"
	}
	if c.PointerPath == "" {
		c.PointerPath = c.Root.Pointer()
	}
	if c.ConfigPath == "" {
		c.ConfigPath = c.Root.NodeConfig()
	}
	if c.NBCCmdPath == "" {
		c.NBCCmdPath = c.Root.NBCCmd()
	}
	if c.FeaturesPath == "" {
		c.FeaturesPath = c.Root.EnabledFeatures()
	}
	if c.LaunchID == "" {
		c.LaunchID = strconv.FormatInt(time.Now().UnixNano(), 10) + "-" + strconv.Itoa(os.Getpid())
	}
	if c.HostnameWait == 0 {
		c.HostnameWait = DefaultHostnameWait
	}
	c.HostnameWait = min(c.HostnameWait, MaxHostnameWait)
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.CheckBudget == 0 {
		c.CheckBudget = checkhotfix.DefaultBudget
	}
	if c.DownloadBudget == 0 {
		c.DownloadBudget = downloadhotfix.DefaultBudget
	}
}

// withSteps returns cfg, defaulted, with its steps, and a function that
// closes what the steps hold.
func (c Config) withSteps() (Config, func()) {
	c.defaults()
	done := func() {}
	if c.steps == nil {
		c.steps, done = newSteps(c)
	}
	if c.steps.event == nil {
		st := *c.steps
		st.event = func(string, string) {}
		c.steps = &st
	}
	return c, done
}

// Run launches and returns the exit code: provision's, or 0 when the node
// has neither a config nor a bootstrap command.
func Run(ctx context.Context, cfg Config) int {
	cfg, done := cfg.withSteps()
	defer done()
	waitForHostname(ctx, cfg.Root, cfg.HostnameWait, cfg.Stdout)
	hasConfig, hasNBC := isFile(cfg.ConfigPath), isFile(cfg.NBCCmdPath)
	if !hasConfig && !hasNBC {
		say(cfg.Stdout, "Gracefully exit aks-node-controller without provision config or nbc cmd")
		return 0
	}
	f := hotfixFlow(ctx, cfg)
	p := provisionArgs{Env: f.features.Env(), LaunchID: cfg.LaunchID}
	if hasConfig {
		p.ConfigPath = cfg.ConfigPath
	}
	if hasNBC {
		p.NBCCmdPath = cfg.NBCCmdPath
	}
	out := f.out
	out.reports = f.features.HotfixEnabled()
	start := time.Now()
	code := provisionWith(ctx, cfg, f.decision, p, &out)
	if out.started != nil {
		<-out.started
	}
	if code == provision.ExitFailFast && !out.handedOver {
		return code
	}
	out.ExitCode, out.ProvisionDuration = code, time.Since(start)
	// Nodes with the flag on report, the control cohort (baked chosen)
	// included; the flag off sends nothing anywhere.
	if f.features.HotfixEnabled() && cfg.steps.report != nil {
		cfg.steps.report(ctx, out.Outcome)
	}
	return code
}

// Selection is SelectAgent's answer.
type Selection struct {
	// Path is the agent to provision with: Config.HotfixPath or
	// Config.BakedPath.
	Path     string
	Decision hotfix.Decision
	// Env holds the accepted feature flags, KEY=VALUE, for the
	// environment of whatever provisions.
	Env []string
}

// SelectAgent runs the hotfix flow for a launcher that provisions by itself:
// the later reference launchers, which source the helper script
// aks-node-controller-hotfix.sh, call its anc_run_hotfix_flow and then run
// `$ANC_HOTFIX_SELECTED_BIN provision`. It does what Run does before
// provisioning (feature flags, check-hotfix, download-hotfix, the choice,
// and `<hotfix> apply-embedded-hotfix` once the hotfix is chosen), with the
// same log lines, and never provisions, waits for the hostname or sends a
// report: the caller's launcher did the wait and provisions. Fail-open: every
// step is, and the choice falls to the baked agent unless Select accepts the
// hotfix.
func SelectAgent(ctx context.Context, cfg Config) Selection {
	cfg, done := cfg.withSteps()
	defer done()
	f := hotfixFlow(ctx, cfg)
	sel := Selection{Path: cfg.BakedPath, Decision: f.decision, Env: f.features.Env()}
	announce(cfg, f.decision)
	if f.decision.Agent == hotfix.AgentHotfix {
		applyEmbedded(ctx, cfg, cfg.HotfixPath)
		sel.Path = cfg.HotfixPath
	}
	return sel
}

// flow is the hotfix flow up to the choice of agent.
type flow struct {
	features features.File
	out      launched
	decision hotfix.Decision
}

// hotfixFlow runs the steps before provisioning in the reference launcher's
// order, each line of its output at the same moment: the feature flags,
// check-hotfix when the flag is exactly "true", download-hotfix when the
// pointer file exists (with the flag off too: a pointer from custom data
// applies), then the choice.
func hotfixFlow(ctx context.Context, cfg Config) flow {
	var f flow
	f.features = readFeatures(cfg.FeaturesPath, cfg.Stdout)
	if f.features.HotfixEnabled() {
		say(cfg.Stdout, "ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer")
		f.out.Check = cfg.steps.checkHotfix(ctx)
		if f.out.Check.Failed {
			say(cfg.Stdout, "ANC check-hotfix failed; continuing (fail-open)")
		} else {
			say(cfg.Stdout, "ANC check-hotfix completed; hotfix pointer refresh attempted")
		}
	} else if v, set := f.features.Values[features.HotfixKey]; set {
		say(cfg.Stdout, "ENABLE_PROVISIONING_HOTFIX is %s, not exactly true; skipping check-hotfix", quote.Text(v))
	}
	if isFile(cfg.PointerPath) {
		say(cfg.Stdout, "Found ANC hotfix config at %s; running download-hotfix", cfg.PointerPath)
		f.out.Download = cfg.steps.downloadHotfix(ctx)
		if f.out.Download.Failed {
			say(cfg.Stdout, "ANC download-hotfix failed; binary selection follows")
		} else {
			say(cfg.Stdout, "ANC download-hotfix completed; binary selection follows")
		}
	}
	f.decision = Choose(ctx, facts.Config{Root: cfg.Root, Baked: cfg.Version, ReleaseKeys: cfg.ReleaseKeys, Hotfix: cfg.HotfixPath})
	f.out.Baked, f.out.Decision, f.out.Requested = cfg.Version, f.decision.Reason, f.decision.Requested
	return f
}

// launched is the report being built, and whether launch got as far as
// provisioning.
type launched struct {
	report.Outcome
	handedOver bool
	// reports: the hotfix flag is on, so launch reports.
	reports bool
	// started is closed once the started report is done; nil when none
	// was sent.
	started chan struct{}
}

// sendStarted starts the started report of d's hotfix, if launch reports,
// and returns at once: the agent runs while it is sent.
func sendStarted(ctx context.Context, cfg Config, d hotfix.Decision, out *launched) {
	if !out.reports || cfg.steps.started == nil {
		return
	}
	out.started = make(chan struct{})
	s := report.Start{Baked: cfg.Version, Hotfix: d.Target.String(), Check: out.Check.Elapsed, Download: out.Download.Elapsed}
	go func() {
		defer close(out.started)
		cfg.steps.started(ctx, s)
	}()
}

// announce says which agent d chose, in the reference's words, and records
// it in the launcher's event and the log.
func announce(cfg Config, d hotfix.Decision) {
	if d.Agent != hotfix.AgentHotfix {
		switch {
		case d.Remove:
			say(cfg.Stdout, "Not using hotfix binary %s: %s", cfg.HotfixPath, quote.Text(d.Detail))
		case d.Reason != hotfix.ReasonNoPointer:
			say(cfg.Stdout, "No hotfix to run: %s", quote.Text(d.Detail))
		}
		say(cfg.Stdout, "Using VHD-baked binary: %s", cfg.BakedPath)
		// No pointer is the default-off node's everyday case, where the
		// reference's launcher writes no event either, and a node with
		// the flag on has check-hotfix's event saying why none was
		// staged: an event would say nothing new, from every node of the
		// fleet, and cost each boot a file write.
		if d.Reason != hotfix.ReasonNoPointer {
			cfg.steps.event(event.LevelInformational, fmt.Sprintf("launcher choice=baked reason=%s detail=%s", d.Reason, d.Detail))
		}
		cfg.Log.Info("launch chose the baked agent", "reason", string(d.Reason), "detail", d.Detail)
		return
	}
	say(cfg.Stdout, "Hotfix binary accepted: %s", quote.Text(d.Detail))
	say(cfg.Stdout, "Using hotfix binary: %s", cfg.HotfixPath)
	cfg.steps.event(event.LevelInformational, fmt.Sprintf("launcher choice=hotfix version=%s reason=%s", d.Target, d.Reason))
	cfg.Log.Info("launch chose the hotfix agent", "version", d.Target.String(), "path", cfg.HotfixPath)
}

// provisionWith provisions with the agent d chose, falling back to the baked
// agent when the hotfix fails before its bootstrap starts, and fills in
// the report.
func provisionWith(ctx context.Context, cfg Config, d hotfix.Decision, p provisionArgs, out *launched) int {
	log := cfg.Log
	announce(cfg, d)
	if d.Agent != hotfix.AgentHotfix {
		if !handOver(cfg, hotfix.AgentBaked) {
			return provision.ExitFailFast
		}
		out.handedOver = true
		out.Agent, out.AgentVersion = hotfix.AgentBaked, cfg.Version
		return sayDone(cfg.Stdout, cfg.steps.bakedProvision(ctx, p))
	}
	if !handOver(cfg, hotfix.AgentHotfix) {
		return provision.ExitFailFast
	}
	out.handedOver = true
	out.Hotfix = d.Target.String()
	out.Agent, out.AgentVersion = hotfix.AgentHotfix, d.Target.String()

	sendStarted(ctx, cfg, d, out)
	applyEmbedded(ctx, cfg, cfg.HotfixPath)
	code, why := runHotfix(ctx, cfg, cfg.HotfixPath, p, d.LaunchRecords)
	if why == "" {
		return code
	}
	say(cfg.Stdout, "Hotfix agent failed before provisioning started (%s); falling back to VHD-baked binary: %s", why, cfg.BakedPath)
	cfg.steps.event(event.LevelError, fmt.Sprintf("launcher choice=baked fallback=true version=%s reason=%s", d.Target, why))
	log.Error("hotfix agent failed before the bootstrap started; the baked agent provisions", "version", d.Target.String(), "reason", why)
	p.Fallback = why
	out.Agent, out.AgentVersion = hotfix.AgentBaked, cfg.Version
	out.Fallback, out.FallbackReason = true, why
	return sayDone(cfg.Stdout, cfg.steps.bakedProvision(ctx, p))
}

// sayDone prints the reference launcher's last line for provision's exit
// code and returns it.
func sayDone(w io.Writer, code int) int {
	if code == 0 {
		say(w, "aks-node-controller completed successfully")
	} else {
		say(w, "aks-node-controller exited with code %d", code)
	}
	return code
}

// handOver records, in launch.json, that this launch provisions from here
// on, so the launcher shim never provisions a second time. If it cannot be
// recorded launch provisions nothing: the shim, seeing no record, runs the
// baked agent's provision once itself.
func handOver(cfg Config, agent hotfix.Agent) bool {
	err := handover.Write(handover.LaunchFile(cfg.Root), handover.Record{LaunchID: cfg.LaunchID, Agent: string(agent), AgentVersion: cfg.Version})
	if err != nil {
		say(cfg.Stdout, "Cannot record the handover to provisioning (%s); leaving provisioning to the launcher's fallback", quote.Text(err.Error()))
		cfg.Log.Error("record the handover to provisioning; the launcher shim provisions", "err", err)
		return false
	}
	return true
}

// Choose is launch's decision on the node as it stands: the one Gather
// takes on the facts it reads (hotfix.Select), which explain reports too.
func Choose(ctx context.Context, c facts.Config) hotfix.Decision {
	return facts.Gather(ctx, c).Decision
}

// errNoBootstrap ends a hotfix agent that began its preflight but did not
// start the bootstrap within Config.StartTimeout.
var errNoBootstrap = errors.New("did not start the bootstrap in time")

// errNoRecord ends a hotfix agent whose release declares launch records
// and that wrote none within Config.StartTimeout.
var errNoRecord = errors.New("wrote no launch record in time")

// applyEmbedded runs `<hotfix> apply-embedded-hotfix`, as the reference
// launcher does once it chose the hotfix agent: the script hotfix that agent
// carries for this distribution, if any. Fail-open: a failure (an agent too
// old to know the command, a bad payload) is logged and provisioning goes
// on. The scripts it writes stay if the hotfix then falls back to the baked
// agent.
func applyEmbedded(ctx context.Context, cfg Config, path string) {
	argv := []string{path, "apply-embedded-hotfix"}
	if string(cfg.Root) != "/" {
		argv = append(argv, "--root", string(cfg.Root))
	}
	// The step's one limit: the child cannot stop its own writes, and an
	// older agent sets no limit at all.
	ctx, cancel := context.WithTimeout(ctx, embedhotfix.Budget)
	defer cancel()
	if _, err := proc.Run(ctx, proc.Cmd{Args: argv, Stdout: cfg.Stdout, Stderr: cfg.Stderr}); err != nil {
		say(cfg.Stdout, "ANC apply-embedded-hotfix failed")
		say(cfg.Stdout, "apply-embedded-hotfix: %s; provisioning goes on (fail-open)", quote.Text(err.Error()))
		cfg.Log.Warn("apply-embedded-hotfix failed; provisioning goes on (fail-open)", "err", err)
		return
	}
	say(cfg.Stdout, "ANC apply-embedded-hotfix completed")
}

// runHotfix runs `<hotfix> provision …` and returns its exit code and, when
// the bootstrap never started, why the baked agent must provision instead.
//
// The bootstrap started if the child recorded so (provision-started.json)
// or wrote provision.complete (an agent that keeps no record, such as the
// reference's, writes it once its bootstrap has run). A child that recorded
// its preflight keeps the protocol, so a preflight that outlasts
// StartTimeout is a hang: the child is killed and the baked agent
// provisions. A child that records nothing is timed only when records
// says its verified release declares that its agent writes them
// (release.Release.LaunchRecords): such an agent records its preflight at
// once and never starts the bootstrap unrecorded, so one that wrote no
// record within StartTimeout hangs before it could have started one, and
// is killed. Any other child that records nothing is never timed: it may
// be running its bootstrap.
func runHotfix(ctx context.Context, cfg Config, path string, p provisionArgs, records bool) (int, string) {
	argv := []string{path, "provision"}
	if p.ConfigPath != "" {
		argv = append(argv, "--provision-config="+p.ConfigPath)
	}
	if p.NBCCmdPath != "" {
		argv = append(argv, "--nbc-cmd="+p.NBCCmdPath)
	}
	if string(cfg.Root) != "/" {
		argv = append(argv, "--root", string(cfg.Root))
	}
	env := slices.Concat(p.Env, []string{handover.EnvLaunchID + "=" + p.LaunchID, handover.EnvAgent + "=" + string(hotfix.AgentHotfix), handover.EnvBakedFallback + "=1"})
	say(cfg.Stdout, "Launching %s", strings.Join(argv, " "))
	mark := handover.MarkStatus(cfg.Root)
	childCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go watchPreflight(childCtx, cfg, p.LaunchID, records, cancel, watched)
	// Passthrough: the child writes to this process's own stdout and
	// stderr, so its bootstrap outlives this process if it dies.
	res, err := proc.Run(childCtx, proc.Cmd{Args: argv, Env: env, Stdout: cfg.Stdout, Stderr: cfg.Stderr, Linger: true, Passthrough: true})
	cancel(nil)
	<-watched
	started := handover.Started(cfg.Root, p.LaunchID) || mark.Changed(cfg.Root)
	switch {
	case err == nil && started:
		say(cfg.Stdout, "aks-node-controller completed successfully")
		return 0, ""
	case err == nil:
		// Success without a bootstrap (no start record of this launch and
		// provision.complete untouched, which every agent writes when it
		// provisions) provisioned nothing: a failure, and since nothing
		// ran, the baked agent may run without two bootstraps.
		return provision.ExitFailFast, "exited 0 without starting the bootstrap or writing provision.complete"
	}
	var ce *proc.CmdError
	sig, killed := syscall.Signal(0), false
	if errors.As(err, &ce) {
		sig, killed = ce.Signal()
	}
	switch {
	case ctx.Err() != nil:
		// Stopped from outside (shutdown): nothing more runs.
		return 128 + int(syscall.SIGTERM), ""
	case started && killed && mark.Written(cfg.Root) && provision.RecordedExit(cfg.Root, -1) >= 0:
		// It wrote its status, then was killed lingering (an OOM kill, a
		// helper it waited on): the status it wrote stands.
		code := provision.RecordedExit(cfg.Root, -1)
		say(cfg.Stdout, "aks-node-controller (hotfix) killed by %v after it recorded its provisioning (exit code %d)", sig, code)
		return code, ""
	case started && killed:
		// The bootstrap may still be running, orphaned; its result is
		// unknown. Recording the failure beats provision-wait waiting out
		// its timeout for a status nobody will write.
		code := 128 + int(sig)
		if err := provision.Abandon(cfg.Root, code, fmt.Sprintf("hotfix agent killed by %v after the bootstrap started", sig)); err != nil {
			cfg.Log.Error("record the abandoned provisioning", "err", err)
		}
		say(cfg.Stdout, "aks-node-controller (hotfix) killed by %v after the bootstrap started", sig)
		return code, ""
	case started:
		say(cfg.Stdout, "aks-node-controller exited with code %d", res.ExitCode)
		return res.ExitCode, ""
	case errors.Is(context.Cause(childCtx), errNoBootstrap):
		return provision.ExitFailFast, fmt.Sprintf("began its preflight but did not start the bootstrap within %v", cfg.StartTimeout)
	case errors.Is(context.Cause(childCtx), errNoRecord):
		return provision.ExitFailFast, fmt.Sprintf("wrote no launch record within %v, though its release declares it writes them", cfg.StartTimeout)
	case killed:
		return 128 + int(sig), fmt.Sprintf("killed by %v", sig)
	case res.ExitCode >= 0:
		return res.ExitCode, fmt.Sprintf("exited with code %d", res.ExitCode)
	default:
		return provision.ExitFailFast, fmt.Sprintf("could not start: %v", err)
	}
}

// watchPreflight polls the child's start record until the bootstrap starts
// or ctx ends; a preflight recorded but not followed by the bootstrap
// within cfg.StartTimeout cancels the child with errNoBootstrap. With
// records, no record at all within cfg.StartTimeout cancels it with
// errNoRecord.
func watchPreflight(ctx context.Context, cfg Config, id string, records bool, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(startPoll)
	defer tick.Stop()
	var deadline, unrecorded <-chan time.Time
	if records {
		unrecorded = time.After(cfg.StartTimeout)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			cancel(errNoBootstrap)
			return
		case <-unrecorded:
			// Read once more: a record written since the last tick puts
			// the child under the preflight's deadline instead.
			if _, ok := handover.Read(handover.StartFile(cfg.Root), id); !ok {
				cancel(errNoRecord)
				return
			}
			unrecorded = nil
		case <-tick.C:
		}
		s, ok := handover.Read(handover.StartFile(cfg.Root), id)
		switch {
		case ok && s.Phase == handover.PhaseBootstrap:
			return
		case ok && deadline == nil:
			deadline, unrecorded = time.After(cfg.StartTimeout), nil
		}
	}
}

// ReadFeatures reads the feature flags as launch does (path, or the default
// under root when empty), saying on out what it skipped.
func ReadFeatures(path string, root layout.Root, out io.Writer) features.File {
	if path == "" {
		path = root.EnabledFeatures()
	}
	return readFeatures(path, out)
}

// readFeatures reads the flag file as data and logs what it skipped. A file
// that is void as a whole turns every feature off.
func readFeatures(path string, out io.Writer) features.File {
	ff, err := features.Read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return features.File{}
	case err != nil:
		say(out, "Ignoring feature flags: %s; all features stay off", quote.Text(err.Error()))
		return features.File{}
	}
	say(out, "Reading feature flags from %s", path)
	for _, n := range ff.Notes {
		say(out, "Feature flags line %d: %s; skipped", n.Line, quote.Text(n.Reason))
	}
	say(out, "Accepted %d feature flag(s) from %s", len(ff.Accepted), path)
	return ff
}

// waitForHostname polls once a second until the kernel's hostname equals
// the first line of /etc/hostname (cloud-init sets both), for at most wait.
func waitForHostname(ctx context.Context, root layout.Root, wait time.Duration, out io.Writer) {
	if wait < 0 {
		return
	}
	want, err := firstLine(root.EtcHostname())
	if err != nil || want == "" {
		return
	}
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		have, err := firstLine(root.KernelHostname())
		if err != nil {
			say(out, "Cannot read the kernel hostname: %s; not waiting for the hostname", quote.Text(err.Error()))
			return
		}
		if have == want {
			return
		}
		if !time.Now().Before(deadline) {
			say(out, "Hostname %s still differs from %s %s after %v; continuing", quote.Text(have), root.EtcHostname(), quote.Text(want), wait)
			return
		}
		if i == 0 {
			say(out, "Waiting up to %v for hostname to match %s", wait, root.EtcHostname())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// maxHostnameFile caps what is read of a hostname file.
const maxHostnameFile = 4 << 10

func firstLine(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	buf := make([]byte, maxHostnameFile)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	return line, nil
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

func say(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, format+"\n", a...)
}
