// Package report delivers a node's reports to the live-patching service
// (the started report before a hotfix runs, the outcome after
// provisioning) over the same TLS, ALPN, verification and
// attested-document token as check-hotfix, keeping on the node, for a
// bounded time, those the service did not acknowledge.
package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"nodehotfix/internal/clip"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
)

// Timeout bounds a report, metadata service included: it runs after
// provisioning, and nothing waits for it but the launcher's exit.
const Timeout = 2 * time.Second

// Outcome is what a node reports of one provisioning.
type Outcome struct {
	// Baked is the baked agent's version.
	Baked string
	// Agent provisioned, at AgentVersion.
	Agent        hotfix.Agent
	AgentVersion string
	// Hotfix is the version launch chose, even if it then fell back; empty
	// when the baked agent was the choice.
	Hotfix string
	// Requested is the version the staged pointer requests for the baked
	// base (hotfix.Decision.Requested), run or not; empty for none.
	Requested string
	// Decision is hotfix.Select's reason.
	Decision hotfix.Reason
	// Check and Download are the hotfix steps' results (zero: not run).
	Check, Download Step
	// Fallback: the hotfix failed before the bootstrap started and the baked
	// agent provisioned; FallbackReason says why.
	Fallback       bool
	FallbackReason string
	// ExitCode is provision's.
	ExitCode int
	// ProvisionDuration is how long provisioning took. Its JSON name is
	// the one outboxes kept by earlier agents carry.
	ProvisionDuration time.Duration `json:"Provision"`
}

// Step is one hotfix step's result.
type Step struct {
	Outcome string
	// Route is download-hotfix's (direct, repository, package-manager, none).
	Route   string
	Elapsed time.Duration
	// Failed is the step's own verdict (an Error-level outcome), which
	// the launcher's log lines follow.
	Failed bool
}

// Config says where to send: the node's way to the service, the one
// check-hotfix takes.
type Config = lpsclient.Node

// Send reports o within ctx and returns whether the service had no
// earlier report of this boot. An answer that says the service may take
// it later (Retryable: unavailable, a deadline) gets one more attempt at
// once, on a new connection, within ctx; a report still not acknowledged
// is the caller's to Keep.
func Send(ctx context.Context, cfg Config, o Outcome) (bool, error) {
	boot, err := BootID(cfg.Root)
	if err != nil {
		return false, err
	}
	c, err := cfg.Open(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	req := request(boot, o)
	return twice(ctx, c, func(ctx context.Context, c *lpsclient.Conn) (bool, error) { return c.Report(ctx, req) })
}

// twice makes call's first attempt on c within half the time ctx has left
// and, if its error is Retryable and time is left, a second one at once
// with the rest, on a new connection (c.Redial): behind a load balancer it
// may reach another replica than the one that failed (restarting,
// draining). A hung service thus costs the first attempt half the budget,
// not all of it.
func twice(ctx context.Context, c *lpsclient.Conn, call func(ctx context.Context, c *lpsclient.Conn) (bool, error)) (bool, error) {
	first, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		first, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
	}
	ok, err := call(first, c)
	cancel()
	if err == nil || !Retryable(err) || ctx.Err() != nil {
		return ok, err
	}
	again, err := c.Redial()
	if err != nil {
		return false, err
	}
	defer again.Close()
	return call(ctx, again)
}

// ErrBootID is returned (wrapped) when the kernel's boot ID cannot be read:
// a report without one is never sent, nor kept.
var ErrBootID = errors.New("no boot id")

// Retryable reports whether a failed send may succeed later: nothing
// reached the service (the metadata service, say, did not answer), or it
// answered that it could not take the report now (Unavailable: a restart,
// a drain, a store outage; DeadlineExceeded; ResourceExhausted: its queue
// full; a transport failure). A refusal of the report itself
// (InvalidArgument, FailedPrecondition, an unauthenticated document), a
// service without the call (Unimplemented) or a certificate the node
// refused is final.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrBootID) {
		return false
	}
	var le *lpsclient.Error
	if !errors.As(err, &le) {
		return true
	}
	if le.Class == lpsclient.ClassTLS {
		return false
	}
	switch le.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// Start is what a node says just before it runs a hotfix agent: the
// started report.
type Start struct {
	// Baked is the baked agent's version; Hotfix the one about to run.
	Baked, Hotfix string
	// Check and Download are how long those steps took.
	Check, Download time.Duration
}

// SendStarted sends a started report once, within ctx: over sess's
// connection when it keeps one (check-hotfix's), else over one of its
// own, with a second attempt as Send makes. It returns whether the
// service stored it (the boot had no report). An older service answers
// Unimplemented, and stores nothing.
func SendStarted(ctx context.Context, cfg Config, sess *lpsclient.Session, s Start) (bool, error) {
	boot, err := BootID(cfg.Root)
	if err != nil {
		return false, err
	}
	var c *lpsclient.Conn
	if sess != nil {
		c = sess.Conn()
	}
	if c == nil {
		if c, err = cfg.Open(ctx); err != nil {
			return false, err
		}
		defer c.Close()
	}
	req := startedRequest(boot, s)
	return twice(ctx, c, func(ctx context.Context, c *lpsclient.Conn) (bool, error) { return c.Started(ctx, req) })
}

func startedRequest(boot string, s Start) *nodev1.ReportStartedRequest {
	return &nodev1.ReportStartedRequest{
		BootId: boot, BakedVersion: s.Baked, HotfixVersion: s.Hotfix,
		CheckHotfixMs: s.Check.Milliseconds(), DownloadHotfixMs: s.Download.Milliseconds(),
	}
}

func request(boot string, o Outcome) *nodev1.ReportOutcomeRequest {
	agent := nodev1.Agent_AGENT_BAKED
	if o.Agent == hotfix.AgentHotfix {
		agent = nodev1.Agent_AGENT_HOTFIX
	}
	return &nodev1.ReportOutcomeRequest{
		BootId:                boot,
		BakedVersion:          o.Baked,
		Agent:                 agent,
		AgentVersion:          o.AgentVersion,
		HotfixVersion:         o.Hotfix,
		RequestedVersion:      clip.Bytes(o.Requested, 64),
		Decision:              string(o.Decision),
		CheckHotfixOutcome:    o.Check.Outcome,
		DownloadHotfixOutcome: o.Download.Outcome,
		Route:                 o.Download.Route,
		Fallback:              o.Fallback,
		FallbackReason:        clip.Bytes(o.FallbackReason, 256),
		ProvisionExitCode:     int32(o.ExitCode),
		CheckHotfixMs:         o.Check.Elapsed.Milliseconds(),
		DownloadHotfixMs:      o.Download.Elapsed.Milliseconds(),
		ProvisionMs:           o.ProvisionDuration.Milliseconds(),
	}
}

// BootID returns the kernel's boot ID (/proc/sys/kernel/random/boot_id under
// root): the service counts each (vmId, boot) once.
func BootID(root layout.Root) (string, error) {
	path := root.BootID()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w: %w", ErrBootID, err)
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read boot id: %w: %w", ErrBootID, err)
	}
	id := strings.TrimSpace(string(buf[:n]))
	if len(id) != 36 {
		return "", fmt.Errorf("read boot id: %w: %s holds %q, not a UUID", ErrBootID, path, id)
	}
	return id, nil
}
