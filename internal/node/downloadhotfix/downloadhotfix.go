// Package downloadhotfix resolves the staged hotfix pointer against the baked
// agent's version and stages the verified hotfix agent (and scripts) it
// names, or removes a staged hotfix that no longer applies.
//
// Trust: when the image carries release keys, only an artifact of a release
// signed by one of them, for this base, version and platform and not
// expired, is downloaded, verified by its signed size and sha256, and staged.
// Without keys the reference's route applies: the package manager installs
// the exact version from the node's signed repositories. Either way the
// staged binary must report the expected version before it is moved into
// place.
package downloadhotfix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/internal/node/scripts"
	"nodehotfix/internal/release"
)

// Outcome is the telemetry outcome of a run.
type Outcome string

// Outcomes.
const (
	Staged            Outcome = "staged"            // a new hotfix binary is in place
	AlreadyStaged     Outcome = "alreadyStaged"     // the wanted hotfix was already in place
	NoPointer         Outcome = "noPointer"         // no pointer file, or an empty one
	InvalidPointer    Outcome = "invalidPointer"    // unreadable or malformed pointer
	NoHotfixForBase   Outcome = "noHotfixForBase"   // nothing requested for this base
	NotNewer          Outcome = "notNewer"          // requested version is not an upgrade
	UnparsableVersion Outcome = "unparsableVersion" // the baked version is not YYYYMM.DD.PATCH
	Revoked           Outcome = "revoked"           // requested version is revoked
	Untrusted         Outcome = "untrusted"         // keys present but no valid signed release
	Busy              Outcome = "busy"              // another run holds the lock
	Failed            Outcome = "failed"            // install or staging failed
)

// Route says how the binary was obtained.
type Route string

// Routes.
const (
	RouteNone           Route = "none"
	RouteDirect         Route = "direct"
	RoutePackageManager Route = "package-manager"
)

const (
	// DefaultBudget bounds a run: far below the 15-minute CSE timeout, with
	// room for the package manager's retries.
	DefaultBudget = 3 * time.Minute
	// versionTimeout bounds `<binary> version`.
	versionTimeout = 10 * time.Second
	// maxVersionOutput caps what `<binary> version` may print.
	maxVersionOutput = 256
	// maxBinarySize caps a binary copied from the package manager.
	maxBinarySize = release.MaxArtifactSize
	// etxtbsyRetry bounds retries of exec on ETXTBSY (golang/go#22315).
	etxtbsyRetry = 2 * time.Second
)

// Config configures a run. Root and Version are required.
type Config struct {
	Root layout.Root
	// Version is the baked agent's version, the one being hotfixed.
	Version string
	// ReleaseKeys is the trusted release key file; empty means the image's
	// default under Root. A missing file means "no keys" (package-manager
	// route); a present but unusable one means no hotfix.
	ReleaseKeys string
	// ArtifactCAPEM is extra CA PEM trusted for artifact downloads.
	ArtifactCAPEM []byte
	// Budget bounds the run; zero means DefaultBudget.
	Budget time.Duration
	// PackageOutput receives package-manager output; nil discards.
	PackageOutput io.Writer
	// Log receives progress; nil discards.
	Log *slog.Logger
}

// Result is what a run did.
type Result struct {
	Outcome Outcome
	Route   Route
	// Version is the hotfix version resolved from the pointer, if any.
	Version string
	// Removed reports that a staged hotfix binary was removed.
	Removed bool
	Err     error
	// Scripts reports the scripts hotfix, "" when none was requested.
	Scripts string
}

// ExitCode maps a result to the command's exit status: 0 unless staging
// failed; a package manager's own exit status is propagated.
func (r Result) ExitCode() int {
	if r.Outcome != Failed {
		return 0
	}
	var ce *pkgmgr.CmdError
	if errors.As(r.Err, &ce) {
		if c := ce.ExitCode(); c > 0 && c < 256 {
			return c
		}
		return 255
	}
	return 1
}

// Message renders the event message without timing.
func (r Result) Message() string {
	var b strings.Builder
	fmt.Fprintf(&b, "download-hotfix outcome=%s route=%s", r.Outcome, r.Route)
	if r.Version != "" {
		fmt.Fprintf(&b, " version=%s", r.Version)
	}
	if r.Removed {
		b.WriteString(" removedStaged=true")
	}
	if r.Scripts != "" {
		fmt.Fprintf(&b, " scripts=%s", r.Scripts)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, " error=%v", r.Err)
	}
	return b.String()
}

// Run performs download-hotfix and emits its event.
func Run(ctx context.Context, cfg Config) Result {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	budget := cfg.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, budget)
	res := func() (res Result) {
		defer func() {
			if v := recover(); v != nil {
				res = Result{Outcome: Failed, Route: RouteNone, Err: fmt.Errorf("panic: %v", v)}
			}
		}()
		return runLocked(ctx, cfg, log, start)
	}()
	cancel()
	end := time.Now()
	if res.Route == "" {
		res.Route = RouteNone
	}
	level := event.LevelInformational
	if res.Outcome == Failed {
		level = event.LevelError
		log.Error("download-hotfix failed", "outcome", res.Outcome, "route", res.Route, "version", res.Version, "err", res.Err)
	} else {
		log.Info("download-hotfix completed", "outcome", res.Outcome, "route", res.Route, "version", res.Version, "removedStaged", res.Removed, "err", res.Err)
	}
	if _, err := event.Write(cfg.Root.EventsDir(), event.Event{
		Task: event.TaskDownloadHotfix, Level: level, Message: res.Message() + event.Timing(start, end),
		Start: start, End: end, Version: cfg.Version,
	}); err != nil {
		log.Warn("write download-hotfix event", "err", err)
	}
	return res
}

func runLocked(ctx context.Context, cfg Config, log *slog.Logger, start time.Time) Result {
	// Before the lock, which creates a file there. Nothing in an untrusted
	// directory is touched, the staged binary included; the launcher refuses
	// a binary staged in such a directory too.
	if err := checkStagingDir(filepath.Dir(cfg.Root.HotfixBinary())); err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	unlock, err := lock(ctx, cfg.Root.HotfixLock())
	if errors.Is(err, errBusy) {
		return Result{Outcome: Busy, Err: err}
	}
	if err != nil {
		// An unusable staging directory (read-only, missing) is a failure
		// to report, not contention.
		return Result{Outcome: Failed, Err: err}
	}
	defer unlock()
	removeLeftovers(cfg.Root.HotfixBinary(), log)
	return run(ctx, cfg, log, start)
}

// removeLeftovers deletes temp files a killed earlier run left beside the
// hotfix binary. It runs under the lock, so no live run owns them.
func removeLeftovers(final string, log *slog.Logger) {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".tmp-*"))
	for _, m := range matches {
		if err := os.Remove(m); err != nil {
			log.Warn("remove leftover temp file", "path", m, "err", err)
			continue
		}
		log.Info("removed leftover temp file from an interrupted run", "path", m)
	}
}

func run(ctx context.Context, cfg Config, log *slog.Logger, start time.Time) Result {
	p, err := readPointer(cfg.Root.Pointer())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Result{Outcome: NoPointer}
	case err != nil:
		return Result{Outcome: InvalidPointer, Err: err}
	}
	scriptsResult := applyScripts(cfg, p, log)

	current, err := hotfix.ParseVersion(cfg.Version)
	if err != nil {
		return Result{Outcome: UnparsableVersion, Err: err, Scripts: scriptsResult}
	}
	res := resolve(ctx, cfg, log, p, current, start)
	res.Scripts = scriptsResult
	return res
}

// resolve decides and performs the binary step.
func resolve(ctx context.Context, cfg Config, log *slog.Logger, p hotfix.Pointer, current hotfix.Version, start time.Time) Result {
	want, src := p.Resolve(current)
	if want == "" {
		return removeStaged(cfg, log, Result{Outcome: NoHotfixForBase})
	}
	target, err := hotfix.ParseVersion(want)
	if err != nil || !hotfix.IsUpgrade(current, target) {
		if err == nil {
			err = fmt.Errorf("%s is not a newer patch of %s", target, current)
		}
		return removeStaged(cfg, log, Result{Outcome: NotNewer, Version: want, Err: err})
	}
	res := Result{Version: target.String()}
	if p.IsRevoked(target) {
		res.Outcome = Revoked
		return removeStaged(cfg, log, res)
	}
	log.Info("hotfix requested", "version", target.String(), "source", string(src))

	keys, haveKeys, err := loadKeys(cfg)
	if err != nil {
		res.Outcome, res.Err = Untrusted, err
		return removeStaged(cfg, log, res)
	}
	if haveKeys {
		res.Route = RouteDirect
		rel, err := FindArtifact(keys, p, target, start)
		if err != nil {
			res.Outcome, res.Err = Untrusted, err
			return removeStaged(cfg, log, res)
		}
		return stageDirect(ctx, cfg, log, rel, target, res)
	}
	res.Route = RoutePackageManager
	log.Warn("no release keys on this node; installing from the package manager, trusting repository signing", "keys", keysPath(cfg))
	return stageFromPackage(ctx, cfg, log, target, res)
}

func keysPath(cfg Config) string {
	if cfg.ReleaseKeys != "" {
		return cfg.ReleaseKeys
	}
	return cfg.Root.ReleaseKeys()
}

func loadKeys(cfg Config) (release.KeySet, bool, error) {
	data, err := capfile.Read(keysPath(cfg), 64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return release.KeySet{}, false, nil
	}
	if err != nil {
		return release.KeySet{}, true, fmt.Errorf("read release keys: %w", err)
	}
	ks, err := release.ParseKeySet(data)
	if err != nil {
		return release.KeySet{}, true, fmt.Errorf("release keys %s: %w", keysPath(cfg), err)
	}
	return ks, true, nil
}

// FindArtifact returns this platform's artifact of the first release in
// the pointer that verifies with keys at now and is for target. The error
// reports why each candidate was refused.
func FindArtifact(keys release.KeySet, p hotfix.Pointer, target hotfix.Version, now time.Time) (release.Artifact, error) {
	platform := release.Platform(runtime.GOOS, runtime.GOARCH)
	if len(p.Releases) == 0 {
		return release.Artifact{}, fmt.Errorf("no signed release for %s in the pointer", target)
	}
	var reasons []string
	for i, env := range p.Releases {
		rel, err := keys.Verify(env, now)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("release %d: %v", i, err))
			continue
		}
		if err := rel.Matches(target); err != nil {
			reasons = append(reasons, fmt.Sprintf("release %d: %v", i, err))
			continue
		}
		a, ok := rel.Artifact(platform)
		if !ok {
			reasons = append(reasons, fmt.Sprintf("release %d: no artifact for %s", i, platform))
			continue
		}
		return a, nil
	}
	return release.Artifact{}, fmt.Errorf("no valid signed release for %s: %s", target, strings.Join(reasons, "; "))
}

func stageDirect(ctx context.Context, cfg Config, log *slog.Logger, a release.Artifact, target hotfix.Version, res Result) Result {
	dst := cfg.Root.HotfixBinary()
	if IsStaged(dst, a) {
		res.Outcome = AlreadyStaged
		return res
	}
	client, err := fetch.New(fetch.Config{ExtraRootsPEM: cfg.ArtifactCAPEM})
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	f, err := atomicfile.Create(dst, bakedMode(cfg))
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	defer f.Abort()
	log.Info("downloading hotfix", "version", target.String(), "url", redact(a.URL), "size", a.Size)
	if err := client.Download(ctx, a.URL, fetch.Want{SHA256: a.SHA256, Size: a.Size}, f); err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	return commit(ctx, f, target, res)
}

func stageFromPackage(ctx context.Context, cfg Config, log *slog.Logger, target hotfix.Version, res Result) Result {
	installed, err := pkgmgr.Install(ctx, pkgmgr.ExecRunner{Output: cfg.PackageOutput}, pkgmgr.Config{Root: string(cfg.Root)}, target.String())
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	src, err := os.Open(installed)
	if err != nil {
		res.Outcome, res.Err = Failed, fmt.Errorf("open installed agent: %w", err)
		return res
	}
	defer src.Close()
	f, err := atomicfile.Create(cfg.Root.HotfixBinary(), bakedMode(cfg))
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	defer f.Abort()
	n, err := io.Copy(f, io.LimitReader(src, maxBinarySize+1))
	if err == nil && n > maxBinarySize {
		err = fmt.Errorf("installed agent exceeds %d bytes", maxBinarySize)
	}
	if err != nil {
		res.Outcome, res.Err = Failed, fmt.Errorf("copy installed agent: %w", err)
		return res
	}
	log.Info("copied installed agent", "from", installed, "bytes", n)
	return commit(ctx, f, target, res)
}

// commit checks that the complete temp file is an executable reporting
// target, then moves it into place durably.
func commit(ctx context.Context, f *atomicfile.File, target hotfix.Version, res Result) Result {
	if err := f.Sync(); err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	if err := checkExecutable(f.TempName()); err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	got, err := reportedVersion(ctx, f.TempName())
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	if got != target.String() {
		res.Outcome, res.Err = Failed, fmt.Errorf("staged binary reports version %q, want %q", got, target)
		return res
	}
	if err := f.Commit(); err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	res.Outcome = Staged
	return res
}

// checkExecutable refuses anything that is not an ELF executable: an
// archive (.deb, .rpm, tarball) whose digest matches is still not a binary.
func checkExecutable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "\x7fELF" {
		return fmt.Errorf("staged artifact is not an ELF executable")
	}
	return nil
}

// reportedVersion runs `<path> version` with a deadline and a capped output.
func reportedVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	deadline := time.Now().Add(etxtbsyRetry)
	for {
		out := &capped{max: maxVersionOutput}
		cmd := exec.CommandContext(ctx, path, "version")
		cmd.Stdout = out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		// A just-written file can be briefly busy when a concurrent fork
		// inherited its descriptor; that resolves once the child execs.
		if errors.Is(err, syscall.ETXTBSY) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("run %s version: %w", filepath.Base(path), err)
		}
		if out.over {
			return "", fmt.Errorf("%s version printed more than %d bytes", filepath.Base(path), maxVersionOutput)
		}
		return strings.TrimSpace(string(out.buf)), nil
	}
}

type capped struct {
	max  int
	buf  []byte
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - len(c.buf)
	if len(p) > room {
		c.buf = append(c.buf, p[:max(room, 0)]...)
		c.over = true
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// removeStaged deletes a staged hotfix binary: whatever the pointer no
// longer selects must not run.
func removeStaged(cfg Config, log *slog.Logger, res Result) Result {
	path := cfg.Root.HotfixBinary()
	if _, err := os.Lstat(path); err != nil {
		return res
	}
	if err := os.Remove(path); err != nil {
		log.Error("remove stale hotfix binary", "path", path, "err", err)
		res.Err = errors.Join(res.Err, fmt.Errorf("remove stale hotfix binary: %w", err))
		return res
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		log.Warn("sync after removing hotfix binary", "err", err)
	}
	log.Info("removed stale hotfix binary", "path", path, "outcome", res.Outcome)
	res.Removed = true
	return res
}

func bakedMode(cfg Config) fs.FileMode {
	return atomicfile.ModeOf(cfg.Root.BakedBinary(), 0o755)
}

func readPointer(path string) (hotfix.Pointer, error) {
	data, err := capfile.Read(path, hotfix.MaxPointerSize)
	if err != nil {
		return hotfix.Pointer{}, err
	}
	p, err := hotfix.ParsePointer(data)
	if err != nil {
		return hotfix.Pointer{}, err
	}
	if p.IsEmpty() && p.ScriptsVersion == "" {
		return p, fs.ErrNotExist
	}
	return p, nil
}

// applyScripts runs the scripts hotfix when scripts_version is a newer patch
// of the baked version. Errors are reported, never fatal to the binary step.
func applyScripts(cfg Config, p hotfix.Pointer, log *slog.Logger) string {
	sv := strings.TrimSpace(p.ScriptsVersion)
	if sv == "" {
		return ""
	}
	current, err1 := hotfix.ParseVersion(cfg.Version)
	want, err2 := hotfix.ParseVersion(sv)
	if err1 != nil || err2 != nil || !hotfix.IsUpgrade(current, want) {
		return "skipped"
	}
	data, err := capfile.Read(cfg.Root.NodeCustomData(), scripts.MaxInputSize)
	if errors.Is(err, fs.ErrNotExist) {
		return "noCustomData"
	}
	if err == nil {
		var files []scripts.File
		if files, err = scripts.Parse(data); err == nil {
			err = scripts.Apply(string(cfg.Root), files)
		}
	}
	if err != nil {
		log.Error("scripts hotfix failed", "version", sv, "err", err)
		return "failed"
	}
	log.Info("applied scripts hotfix", "version", sv)
	return "applied"
}

// IsStaged reports whether path is a regular file with exactly a's size and
// sha256, so a re-run does not download again.
func IsStaged(path string, a release.Artifact) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != a.Size {
		return false
	}
	sum, err := fileSHA256(path)
	return err == nil && strings.EqualFold(sum, a.SHA256)
}

// redact drops the query, which may carry an access token.
func redact(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		return u[:i]
	}
	return u
}
