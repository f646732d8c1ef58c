// Package downloadhotfix resolves the staged hotfix pointer against the baked
// agent's version and stages the verified hotfix agent (and scripts) it
// names, or removes a staged hotfix that no longer applies.
//
// Trust: when the image carries release keys, only an artifact of a release
// signed by one of them, for this base, version and platform and not
// expired, is downloaded, verified by its signed size and sha256, and staged.
// Without keys the node trusts its package repository: the repository
// route fetches the exact version's package straight from it, verified by
// the repository's own signatures (pkgrepo), and only when that route is
// unavailable (no usable source, unreachable, no such package) does the
// package manager install it. A repository that contradicts its signatures
// is its own outcome and never falls back: the package manager would be
// offered the same bytes. Whatever the route, the staged binary must be an
// executable that reports the expected version before it is moved into
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
	"path/filepath"
	"strings"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/facts"
	"nodehotfix/internal/node/fetch"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/pkgmgr"
	"nodehotfix/internal/node/pkgrepo"
	"nodehotfix/internal/node/proc"
	"nodehotfix/internal/node/scripts"
	"nodehotfix/internal/node/task"
	"nodehotfix/internal/node/trust"
	"nodehotfix/internal/release"
)

// Outcome is the telemetry outcome of a run.
type Outcome string

// Outcomes.
const (
	Staged               Outcome = "staged"               // a new hotfix binary is in place
	AlreadyStaged        Outcome = "alreadyStaged"        // the wanted hotfix was already in place
	NoPointer            Outcome = "noPointer"            // no pointer file, or an empty one
	InvalidPointer       Outcome = "invalidPointer"       // unreadable or malformed pointer
	NoHotfixForBase      Outcome = "noHotfixForBase"      // nothing requested for this base
	NotNewer             Outcome = "notNewer"             // requested version is not an upgrade
	UnparsableVersion    Outcome = "unparsableVersion"    // the baked version is not YYYYMM.DD.PATCH
	Revoked              Outcome = "revoked"              // requested version is revoked
	UnreadableRevocation Outcome = "unreadableRevocation" // a revoked entry is not a version: nothing staged
	Untrusted            Outcome = "untrusted"            // keys present but no valid signed release
	Busy                 Outcome = "busy"                 // another run holds the lock
	NoPackage            Outcome = "noPackage"            // the repositories have no package of the version
	AmbiguousPackage     Outcome = "ambiguousPackage"     // they have several (revisions); none is guessed
	// RepositoryIntegrity: the repository contradicts its own signatures
	// (a bad signature, a digest that differs, a package without the
	// agent); nothing is staged and the package manager is not tried.
	RepositoryIntegrity Outcome = "repositoryIntegrity"
	// ArtifactIntegrity: the artifact contradicts its signed release (its
	// size or sha256 differs) or the signed bytes are not a usable agent
	// (not an ELF executable, or reporting another version): the release,
	// not the network, is at fault, and the service counts it so.
	ArtifactIntegrity Outcome = "artifactIntegrity"
	Failed            Outcome = "failed" // install or staging failed
)

// Route says how the binary was obtained.
type Route string

// Routes.
const (
	RouteNone           Route = "none"
	RouteDirect         Route = "direct"
	RouteRepository     Route = "repository"
	RoutePackageManager Route = "package-manager"
)

const (
	// DefaultBudget bounds a run: far below the 15-minute CSE timeout, with
	// room for the package manager's retries.
	DefaultBudget = 3 * time.Minute
	// maxBinarySize caps a binary copied from the package manager.
	maxBinarySize = release.MaxArtifactSize
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
	// RepositoryErr is why the repository route gave way to the package
	// manager, nil when it did not.
	RepositoryErr error
}

// ExitCode maps a result to the command's exit status: 0 unless staging
// failed; a package manager's own exit status is propagated.
func (r Result) ExitCode() int {
	if !r.Failed() {
		return 0
	}
	var ce *proc.CmdError
	if errors.As(r.Err, &ce) {
		if c := ce.ExitCode(); c > 0 && c < 256 {
			return c
		}
		return 255
	}
	return 1
}

// Failed reports whether the run failed to stage what it should have.
func (r Result) Failed() bool {
	return r.Outcome == Failed || r.Outcome == NoPackage || r.Outcome == AmbiguousPackage || r.Outcome == RepositoryIntegrity || r.Outcome == ArtifactIntegrity
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
	if r.RepositoryErr != nil {
		fmt.Fprintf(&b, " repositoryFallback=%q", r.RepositoryErr.Error())
	}
	if r.Err != nil {
		fmt.Fprintf(&b, " error=%v", r.Err)
	}
	return b.String()
}

// Task is download-hotfix's lifecycle within budget, in a process of its
// own or in launch's: a panic becomes a Failed result with no route.
func Task(budget time.Duration) task.Task[Result] {
	return task.Task[Result]{
		Name: "download-hotfix", Event: event.TaskDownloadHotfix, Budget: budget,
		OnPanic: func(v any) Result {
			return Result{Outcome: Failed, Route: RouteNone, Err: fmt.Errorf("panic: %v", v)}
		},
	}
}

// maxArtifactCA caps the --artifact-ca bundle: a few CA certificates.
const maxArtifactCA = 1 << 20

// ReadArtifactCA reads the extra CA bundle for ArtifactCAPEM from path;
// "" is none (nil).
func ReadArtifactCA(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	return capfile.Read(path, maxArtifactCA)
}

// Run performs download-hotfix under ctx, which carries the run's budget.
// It decides with hotfix.Select on the node's facts, removes a staged file
// the decision does not run, and stages the target when it is not in place.
func Run(ctx context.Context, cfg Config) Result {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := runLocked(ctx, cfg, log)
	if res.Route == "" {
		res.Route = RouteNone
	}
	return res
}

func runLocked(ctx context.Context, cfg Config, log *slog.Logger) Result {
	// Before the lock, which creates a file there. Nothing in an untrusted
	// directory is touched, the staged binary included; launch refuses a
	// binary staged in such a directory too.
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
	return run(ctx, cfg, log)
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

func run(ctx context.Context, cfg Config, log *slog.Logger) Result {
	f := facts.Gather(ctx, facts.Config{Root: cfg.Root, Baked: cfg.Version, ReleaseKeys: cfg.ReleaseKeys})
	keepTrust(cfg, f, log)
	var res Result
	if f.PointerErr == nil {
		res.Scripts = applyScripts(cfg, f.Pointer, log)
	}
	d := f.Decision
	res.Version = d.Requested
	if !d.Target.IsZero() {
		res.Version = d.Target.String()
	}
	if d.Remove {
		// Whatever the decision does not run must not stay, including when
		// the replacement below fails.
		res.Removed, res.Err = removeStaged(cfg, log, d.Reason)
	}
	switch d.Reason {
	case hotfix.ReasonHotfix:
		res.Outcome = AlreadyStaged
		return res
	case hotfix.ReasonNotStaged, hotfix.ReasonStagedUnsafe, hotfix.ReasonStagedMismatch:
		if res.Err != nil {
			res.Outcome = Failed
			return res
		}
	default:
		res.Outcome = Outcome(d.Reason)
		if d.Reason == hotfix.ReasonInvalidPointer || d.Reason == hotfix.ReasonUntrusted || d.Reason == hotfix.ReasonNotNewer || d.Reason == hotfix.ReasonUnreadableRevocation {
			res.Err = errors.Join(errors.New(d.Detail), res.Err)
		}
		return res
	}
	log.Info("hotfix requested", "version", d.Target.String(), "source", string(d.Source), "staged", string(d.Reason))
	// The reference's e2e and log queries look for these messages in the
	// agent log: "downloading ANC hotfix", then "downloaded ANC hotfix
	// through authenticated repository fast path" and never "falling back
	// to package manager" when the repository route staged it.
	log.Info("downloading ANC hotfix", "version", d.Target.String(), "keys", f.Trust.Keys)
	var err error
	if f.Trust.Keys {
		res.Route = RouteDirect
		err = stageDirect(ctx, cfg, log, f.Artifacts[d.Target.String()], d.Target)
	} else {
		log.Info("no release keys on this node; staging from the package repository, trusting its signing", "keys", keysPath(cfg))
		res.Route = RouteRepository
		err = stageFromRepository(ctx, cfg, log, d.Target)
		var ie *pkgrepo.IntegrityError
		switch {
		case err == nil:
			log.Info("downloaded ANC hotfix through authenticated repository fast path", "version", d.Target.String())
		case !errors.As(err, &ie) && !errors.Is(err, errStaging):
			log.Warn("authenticated repository fast path unavailable; falling back to package manager", "err", err)
			res.Route, res.RepositoryErr = RoutePackageManager, err
			err = stageFromPackage(ctx, cfg, log, d.Target)
		}
	}
	var ie *pkgrepo.IntegrityError
	var ve *fetch.VerifyError
	switch {
	case errors.As(err, &ie):
		res.Outcome, res.Err = RepositoryIntegrity, err
	case errors.Is(err, errArtifact), errors.As(err, &ve) && (ve.Reason == fetch.ReasonDigest || ve.Reason == fetch.ReasonSize):
		res.Outcome, res.Err = ArtifactIntegrity, err
	case errors.Is(err, pkgmgr.ErrNoPackage):
		res.Outcome, res.Err = NoPackage, err
	case errors.Is(err, pkgmgr.ErrAmbiguousPackage):
		res.Outcome, res.Err = AmbiguousPackage, err
	case err != nil:
		res.Outcome, res.Err = Failed, err
	default:
		res.Outcome = Staged
	}
	return res
}

// keepTrust moves the node's kept trust state forward to what this run
// verified (a longer key-set chain, a newer checkpoint, revocations), so a
// later document can never take the node back. A failure to write is
// logged: this run's decision stands either way.
func keepTrust(cfg Config, f facts.Facts, log *slog.Logger) {
	if f.View == nil {
		return
	}
	if f.View.LogErr != nil {
		log.Warn("transparency log evidence not verified", "required", f.View.LogRequired(), "err", f.View.LogErr)
	}
	baked, _ := hotfix.ParseVersion(cfg.Version)
	next, changed := f.View.Next(f.Kept, baked)
	if !changed {
		return
	}
	path := facts.Config{Root: cfg.Root}.TrustStatePath()
	if err := trust.Save(path, next); err != nil {
		log.Warn("trust state not kept", "path", path, "err", err)
		return
	}
	log.Info("trust state kept", "path", path, "keyset_version", f.View.KeySetVersion(), "log_size", f.View.LogSize(), "revoked", len(next.Revoked))
}

func keysPath(cfg Config) string {
	return facts.Config{Root: cfg.Root, ReleaseKeys: cfg.ReleaseKeys}.KeysPath()
}

func stageDirect(ctx context.Context, cfg Config, log *slog.Logger, a release.Artifact, target hotfix.Version) error {
	client, f, err := staging(cfg)
	if err != nil {
		return err
	}
	defer f.Abort()
	log.Info("downloading hotfix", "version", target.String(), "url", fetch.Redact(a.URL), "size", a.Size)
	if err := client.Download(ctx, a.URL, fetch.Want{SHA256: a.SHA256, Size: a.Size}, f); err != nil {
		return err
	}
	return commit(ctx, f, target)
}

// staging returns the client a route downloads with (the artifact CA
// added) and the temp file of the staged binary, with the baked binary's
// mode; the caller aborts the file unless it commits it.
func staging(cfg Config) (*fetch.Client, *atomicfile.File, error) {
	client, err := fetch.New(fetch.Config{ExtraRootsPEM: cfg.ArtifactCAPEM})
	if err != nil {
		return nil, nil, err
	}
	f, err := atomicfile.Create(cfg.Root.HotfixBinary(), bakedMode(cfg))
	if err != nil {
		return nil, nil, err
	}
	return client, f, nil
}

// errStaging marks a failure after a route's bytes were verified: another
// route would stage the same bytes, so none is tried.
var errStaging = errors.New("staging")

// repositoryShare is the part of the remaining budget the repository route
// may use, so that a hanging repository leaves the package manager time.
const repositoryShare = 2

// errRepositoryShare is why a repository route that spent its share was
// cut: a repository that hangs, or trickles bytes too slowly.
var errRepositoryShare = errors.New("the repository route spent its share of the budget")

// stageFromRepository stages target straight from the node's package
// repository (pkgrepo). A failure before the package is verified is
// operational unless it is a *pkgrepo.IntegrityError; one after it wraps
// errStaging.
func stageFromRepository(ctx context.Context, cfg Config, log *slog.Logger, target hotfix.Version) error {
	// The share bounds the fetch only: the commit of verified bytes gets
	// the whole budget, as it would on any route.
	fetchCtx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		fetchCtx, cancel = context.WithTimeoutCause(ctx, time.Until(dl)/repositoryShare, errRepositoryShare)
		defer cancel()
	}
	mgr, err := pkgmgr.Detect(string(cfg.Root))
	if err != nil {
		return err
	}
	src, err := pkgrepo.FromNode(string(cfg.Root), mgr)
	if err != nil {
		return err
	}
	client, f, err := staging(cfg)
	if err != nil {
		return err
	}
	defer f.Abort()
	final := cfg.Root.HotfixBinary()
	log.Info("fetching hotfix from the package repository", "version", target.String(), "repository", src.String())
	p, err := src.Fetch(fetchCtx, client, pkgrepo.Request{
		Name: pkgmgr.PackageName, Version: target,
		Member: pkgrepo.AgentMember, Max: maxBinarySize,
		TempDir: filepath.Dir(final), TempPattern: "." + filepath.Base(final) + ".tmp-pkg-*",
		Now: time.Now(),
	}, f)
	if err != nil {
		return err
	}
	log.Info("verified package from the repository", "package", p.Name, "version", p.Version, "url", fetch.Redact(p.URL), "sha256", p.SHA256)
	if err := commit(ctx, f, target); err != nil {
		return fmt.Errorf("%w: %s %s: %w", errStaging, p.Name, p.Version, err)
	}
	return nil
}

func stageFromPackage(ctx context.Context, cfg Config, log *slog.Logger, target hotfix.Version) error {
	installed, err := pkgmgr.Install(ctx, pkgmgr.ExecRunner{Output: cfg.PackageOutput}, pkgmgr.Config{Root: string(cfg.Root)}, target.String())
	if err != nil {
		return err
	}
	src, err := os.Open(installed)
	if err != nil {
		return fmt.Errorf("open installed agent: %w", err)
	}
	defer src.Close()
	f, err := atomicfile.Create(cfg.Root.HotfixBinary(), bakedMode(cfg))
	if err != nil {
		return err
	}
	defer f.Abort()
	n, err := io.Copy(f, io.LimitReader(src, maxBinarySize+1))
	if err == nil && n > maxBinarySize {
		err = fmt.Errorf("installed agent exceeds %d bytes", maxBinarySize)
	}
	if err != nil {
		return fmt.Errorf("copy installed agent: %w", err)
	}
	log.Info("copied installed agent", "from", installed, "bytes", n)
	return commit(ctx, f, target)
}

// commit checks that the complete temp file is an executable reporting
// target, then moves it into place durably: the staged binary must survive
// a power cut between staging and launch's exec.
func commit(ctx context.Context, f *atomicfile.File, target hotfix.Version) error {
	if err := f.Sync(); err != nil {
		return err
	}
	if err := checkExecutable(f.TempName()); err != nil {
		return fmt.Errorf("%w: %w", errArtifact, err)
	}
	// A version check that cannot run (a noexec mount, a slow node) is
	// this node's trouble, not the release's: only a clear answer naming
	// another version blames the artifact.
	got, err := facts.ReportedVersion(ctx, f.TempName())
	if err != nil {
		return err
	}
	if got != target.String() {
		return fmt.Errorf("%w: staged binary reports version %q, want %s", errArtifact, got, target)
	}
	return f.Commit()
}

// errArtifact marks verified bytes that are not a usable agent of the
// target version: the release's fault (ArtifactIntegrity).
var errArtifact = errors.New("the verified artifact is not a usable agent")

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

// removeStaged deletes the staged hotfix binary (a symlink there is removed,
// not followed) and reports whether it did.
func removeStaged(cfg Config, log *slog.Logger, why hotfix.Reason) (bool, error) {
	path := cfg.Root.HotfixBinary()
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		log.Error("remove stale hotfix binary", "path", path, "err", err)
		return false, fmt.Errorf("remove stale hotfix binary: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		log.Warn("sync after removing hotfix binary", "err", err)
	}
	log.Info("removed stale hotfix binary", "path", path, "reason", string(why))
	return true, nil
}

func bakedMode(cfg Config) fs.FileMode {
	return atomicfile.ModeOf(cfg.Root.BakedBinary(), 0o755)
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
		if files, err = scripts.Parse(data, scripts.Options{}); err == nil {
			err = scripts.Apply(string(cfg.Root), files, scripts.Options{})
		}
	}
	if err != nil {
		log.Error("scripts hotfix failed", "version", sv, "err", err)
		return "failed"
	}
	log.Info("applied scripts hotfix", "version", sv)
	return "applied"
}
