// Package checkhotfix asks the live-patching service which hotfix this node's
// image should get and stages the answer in the pointer file for
// download-hotfix.
//
// It is fail-open: Run never returns an error, always finishes within its
// budget, and reports what happened as one outcome, one log line and one
// guest-agent event.
package checkhotfix

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/facts"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/nodeconfig"
	"nodehotfix/internal/node/report"
	"nodehotfix/internal/node/task"
	"nodehotfix/internal/node/trust"
)

// Outcome is the telemetry outcome of a run; the strings are the reference's.
type Outcome string

// Outcomes.
const (
	// LPSRead: the service answered with a map that has this node's base.
	LPSRead Outcome = "lpsRead"
	// NoHotfixForBase: the service's map was staged but lacks this base.
	NoHotfixForBase Outcome = "noHotfixForBase"
	// NoHotfixAvailable: the service had nothing for this node; nothing written.
	NoHotfixAvailable Outcome = "noHotfixAvailable"
	// CustomDataFallback: the service was unreachable and the node config's
	// cold-start map was staged.
	CustomDataFallback Outcome = "customDataFallback"
	// NoColdStartPointer: the service was unreachable and the node config
	// has no cold-start map; nothing written. Informational, as the
	// reference reports it: an unreachable service is fail-open by design.
	NoColdStartPointer Outcome = "noColdStartPointer"
	// Failed: nothing was staged.
	Failed Outcome = "failed"
)

const (
	// DefaultBudget bounds the whole command, metadata service included:
	// check-hotfix sits on every node's provisioning critical path.
	DefaultBudget = 5 * time.Second
	// lpsTimeout is the reference's deadline for connect, handshake and call.
	lpsTimeout = 3 * time.Second
)

// Config configures a run. Root and Version are required.
type Config struct {
	// Root is the directory on-node paths resolve under ("/" on a node).
	Root layout.Root
	// Version is the running (baked) agent's version, YYYYMM.DD.PATCH.
	Version string
	// IMDSURL is the metadata service base URL; empty means imds.DefaultURL.
	IMDSURL string
	// LPSAddr overrides where to dial ("host:port"); empty means the API
	// server name on port 443. TLS verification is unaffected.
	LPSAddr string
	// ReleaseKeys is the trusted release key file, whose key-set version
	// the node declares; empty means the image's default under Root. It
	// must be the file download-hotfix and launch verify with.
	ReleaseKeys string
	// Log receives progress and the final outcome; nil discards.
	Log *slog.Logger
	// Reports says the caller (launch) reports the provisioning outcome to
	// the service afterwards, so the node may hold a canary seat
	// (lpsclient.Request.Reports). The request declares the node's base
	// either way.
	Reports bool
	// Session, when set, carries the call and keeps its connection open
	// for the caller's later calls (launch's started report); nil: the
	// connection is closed after the call.
	Session *lpsclient.Session
}

// Result is what a run did.
type Result struct {
	Outcome Outcome
	// Err explains a Failed outcome (and a fallback's cause); nil otherwise.
	Err error
	// Detail qualifies a benign outcome, e.g. the service's status code.
	Detail string
	// Panic is the recovered value if the workflow panicked (set by the
	// command's panic guard).
	Panic any
}

// Message renders the event message in the reference's format, without the
// timing suffix.
func (r Result) Message() string {
	m := "check-hotfix outcome=" + string(r.Outcome)
	if r.Panic != nil {
		return m + fmt.Sprintf(" panic=%v", r.Panic)
	}
	if r.Err != nil {
		m += " error=" + r.Err.Error()
	}
	if r.Detail != "" {
		m += " detail=" + r.Detail
	}
	return m
}

// Failed reports whether the run ended in the Failed outcome.
func (r Result) Failed() bool { return r.Outcome == Failed }

// Task is check-hotfix's lifecycle within budget, in a process of its own
// or in launch's: a panic becomes a Failed result that carries it.
func Task(budget time.Duration) task.Task[Result] {
	return task.Task[Result]{
		Name: "check-hotfix", Event: event.TaskCheckHotfix, Budget: budget,
		OnPanic: func(v any) Result { return Result{Outcome: Failed, Panic: v} },
	}
}

// Run performs check-hotfix under ctx, which carries the command's budget
// (DefaultBudget unless the operator set one). It never fails: every problem
// becomes an outcome.
func Run(ctx context.Context, cfg Config) Result {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log.Info("aks-node-controller check-hotfix started", "version", cfg.Version)
	return run(ctx, cfg, log)
}

func run(ctx context.Context, cfg Config, log *slog.Logger) Result {
	body, err := fetch(ctx, cfg, log)
	if err != nil {
		var le *lpsclient.Error
		if errors.As(err, &le) {
			switch le.Class {
			case lpsclient.ClassNoHotfix:
				log.Info("LPS reports no hotfix available for this node (fail-open)", "code", le.Code.String())
				return Result{Outcome: NoHotfixAvailable, Detail: fmt.Sprintf("no configuration for this node (code %s)", le.Code)}
			case lpsclient.ClassRejected:
				return Result{Outcome: Failed, Err: fmt.Errorf("LPS fetch failed with a client error, not falling back: %w", err)}
			case lpsclient.ClassTLS:
				return Result{Outcome: Failed, Err: fmt.Errorf("not falling back: %w", err)}
			}
		}
		log.Warn("failed to reach LPS, attempting cold-start fallback", "err", err)
		return coldStart(cfg, log, err)
	}

	served, err := hotfix.ParsePointer([]byte(body))
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	var detail string
	if n := len(served.RevokedUnreadable); n > 0 {
		// Staged with the rest: every reader of the pointer this boot then
		// keeps the node on the baked agent (hotfix.Select).
		detail = fmt.Sprintf("%d revoked entries are not versions: no hotfix runs until the service serves a readable list", n)
		log.Warn("LPS served revoked entries that are not versions; staging the readable ones, and no hotfix runs", "unreadable", n, "revoked", len(served.Revoked))
	}
	if len(served.Hotfixes) == 0 {
		if len(served.Revoked) > 0 || len(served.RevokedUnreadable) > 0 {
			// The reference never writes for an empty map, so it could not
			// revoke; a revoked list is staged on its own, keeping the rest.
			if err := stageRevoked(cfg.Root.Pointer(), served, log); err != nil {
				return Result{Outcome: Failed, Err: err}
			}
			return Result{Outcome: NoHotfixAvailable, Detail: join(fmt.Sprintf("staged %d revoked versions", len(served.Revoked)), detail)}
		}
		log.Info("LPS returned no hotfixes for this node; leaving existing pointer intact (fail-open)")
		return Result{Outcome: NoHotfixAvailable}
	}
	if err := stage(cfg.Root.Pointer(), func(p hotfix.Pointer) hotfix.Pointer { return p.WithServed(served) }, log); err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	v, err := hotfix.ParseVersion(cfg.Version)
	if err != nil || served.Hotfixes[v.Base()] == "" {
		return Result{Outcome: NoHotfixForBase, Detail: detail}
	}
	return Result{Outcome: LPSRead, Detail: detail}
}

// join joins the non-empty details with "; ".
func join(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// fetch opens the node's connection to the service (the handshake runs
// while the metadata service is asked for the document) and makes the
// call. Errors other than *lpsclient.Error are eligible for fallback.
func fetch(ctx context.Context, cfg Config, log *slog.Logger) (string, error) {
	node := lpsclient.Node{Root: cfg.Root, IMDSURL: cfg.IMDSURL, LPSAddr: cfg.LPSAddr, Log: log, Dialing: func(t lpsclient.Target) {
		log.Info("check-hotfix LPS gRPC dial", "dialHost", t.Host, "dialAddr", cfg.LPSAddr, "alpn", lpsclient.ALPN, "component", lpsclient.Component)
	}}
	c, err := node.Open(ctx)
	if err != nil {
		return "", err
	}
	if cfg.Session != nil {
		cfg.Session.Keep(c) // for the started report, whatever the answer
	} else {
		defer c.Close()
	}
	// The reference's deadline, from where the reference starts it: what
	// the connection did while the document came is a head start.
	ctx, cancel := context.WithTimeout(ctx, lpsTimeout)
	defer cancel()
	req := lpsclient.Request{Reports: cfg.Reports}
	if v, err := hotfix.ParseVersion(cfg.Version); err == nil {
		req.Base = v.Base()
	}
	if cfg.Reports {
		// The boot the outcome report will name: the service records
		// that it served this boot, so the node counts for it even if it
		// never reports.
		boot, err := report.BootID(cfg.Root)
		if err != nil {
			log.Warn("no boot id for the live-patching request; the service cannot count this boot if its report is lost", "err", err)
		}
		req.Boot = boot
	}
	fc := facts.Config{Root: cfg.Root, ReleaseKeys: cfg.ReleaseKeys}
	req.KeySetVersion, req.LogSize = trust.Declared(fc.KeysPath(), fc.TrustStatePath())
	return c.Fetch(ctx, req)
}

func coldStart(cfg Config, log *slog.Logger, cause error) Result {
	m, err := nodeconfig.ColdStartHotfixes(cfg.Root.NodeConfig())
	if err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("%w; cold-start fallback failed: %w", cause, err)}
	}
	if len(m) == 0 {
		return Result{Outcome: NoColdStartPointer, Err: fmt.Errorf("%w; no cold-start pointer present", cause)}
	}
	if err := stage(cfg.Root.Pointer(), func(p hotfix.Pointer) hotfix.Pointer { return p.WithColdStart(m) }, log); err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("%w; stage cold-start pointer: %w", cause, err)}
	}
	return Result{Outcome: CustomDataFallback, Err: cause}
}

// stage replaces the pointer file with merge applied to its content (the
// zero Pointer if there is none, or it is unreadable, or it is a symlink,
// which is neither read nor followed but replaced). See write.
func stage(path string, merge func(existing hotfix.Pointer) hotfix.Pointer, log *slog.Logger) error {
	existing, err := readExisting(path)
	if err != nil {
		log.Warn("existing hotfix pointer unreadable; replacing it", "path", path, "err", err)
	}
	// Releases and entries only this node's file holds accumulate across
	// rotations. Past the size cap, shed them, never a revocation or a
	// served entry: a pointer that cannot be written would keep a just
	// revoked hotfix running.
	lean := existing
	lean.Releases = nil
	leaner := lean
	leaner.Hotfixes = nil
	var p hotfix.Pointer
	for i, base := range []hotfix.Pointer{existing, lean, leaner} {
		p = merge(base)
		if err = write(path, p); !errors.Is(err, errTooLarge) {
			break
		}
		log.Warn("merged hotfix pointer over the size cap; shedding what only this node's file held", "attempt", i+1, "err", err)
	}
	if err != nil {
		return err
	}
	log.Info("staged hotfix pointer for download-hotfix", "path", path, "hotfixes", p.Hotfixes, "revoked", len(p.Revoked), "revokedUnreadable", len(p.RevokedUnreadable))
	return nil
}

// errTooLarge is returned (wrapped) by write for an encoding readers refuse.
var errTooLarge = errors.New("pointer too large")

// write replaces the pointer file atomically, keeping an existing regular
// file's mode (else 0644). An encoding over hotfix.MaxPointerSize is refused
// and nothing is written: download-hotfix would refuse to read it.
func write(path string, p hotfix.Pointer) error {
	// MarshalJSON, not json.Marshal: json.Marshal would HTML-escape it.
	data, err := p.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encode hotfix pointer: %w", err)
	}
	if len(data) > hotfix.MaxPointerSize {
		return fmt.Errorf("stage hotfix pointer: %w: %d bytes, the read limit is %d", errTooLarge, len(data), hotfix.MaxPointerSize)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create pointer directory: %w", err)
	}
	// Not fsynced (milliseconds on the critical path): a crash can leave the
	// file old, empty or truncated, and every boot refetches it.
	if err := atomicfile.Replace(path, data, atomicfile.ModeOf(path, 0o644)); err != nil {
		return fmt.Errorf("stage hotfix pointer: %w", err)
	}
	return nil
}

// stageRevoked stages served's revoked list (its unreadable entries
// included) and changes nothing else.
func stageRevoked(path string, served hotfix.Pointer, log *slog.Logger) error {
	return stage(path, func(p hotfix.Pointer) hotfix.Pointer { return p.WithServed(served.Revocations()) }, log)
}

// readExisting reads the staged pointer; a missing file is the zero
// Pointer. A symlink at the path is refused, not followed.
func readExisting(path string) (hotfix.Pointer, error) {
	data, err := capfile.ReadNoFollow(path, hotfix.MaxPointerSize)
	if errors.Is(err, fs.ErrNotExist) {
		return hotfix.Pointer{}, nil
	}
	if err != nil {
		return hotfix.Pointer{}, err
	}
	return hotfix.ParsePointer(data)
}
