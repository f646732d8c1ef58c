// Package provision runs the node bootstrap and records its result in the
// status files that provision-wait and the CSE extension read.
package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	nodeconfigv1 "nodehotfix/internal/gen/nodeconfig/v1"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/nodeconfig"
)

// ExitFailFast is the exit code recorded when provisioning cannot start
// (unusable inputs, a panic), as the reference records it.
const ExitFailFast = 240

// outputTail is how much of the bootstrap's output provision.json keeps.
const outputTail = 16 << 10

// Status is provision.json. The reference's three fields come first and
// keep their string types; the timing fields are additions consumers ignore.
type Status struct {
	ExitCode     string `json:"ExitCode"`
	Error        string `json:"Error"`
	Output       string `json:"Output"`
	ExecDuration string `json:"ExecDuration,omitempty"` // seconds
	StartTime    string `json:"StartTime,omitempty"`    // RFC 3339, UTC
	EndTime      string `json:"EndTime,omitempty"`      // RFC 3339, UTC
}

// Config says what to provision.
type Config struct {
	Root layout.Root
	// ProvisionConfig is the node config path; empty when not given.
	ProvisionConfig string
	// NBCCmd is the nbc-cmd.sh path; empty when not given. It takes
	// priority over ProvisionConfig, as in the reference.
	NBCCmd string
	// Stdout and Stderr receive the bootstrap's output live; nil discards.
	Stdout, Stderr io.Writer
	// Log receives progress; nil discards.
	Log *slog.Logger
	// AgentVersion is exported to the bootstrap as
	// AKS_NODE_CONTROLLER_VERSION, so its output says which agent (baked or
	// hotfix) ran it.
	AgentVersion string
}

// Run provisions the node and returns the exit code to exit with. It always
// writes provision.json and provision.complete, including when the inputs
// are unusable or the bootstrap cannot start.
func Run(ctx context.Context, cfg Config) (code int) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	st := Status{ExitCode: strconv.Itoa(ExitFailFast)}
	defer func() {
		if v := recover(); v != nil {
			st = Status{ExitCode: strconv.Itoa(ExitFailFast), Error: fmt.Sprintf("provision panicked: %v", v), Output: st.Output}
			code = ExitFailFast
		}
		end := time.Now()
		st.StartTime, st.EndTime = start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339)
		st.ExecDuration = strconv.Itoa(int(end.Sub(start).Seconds()))
		if err := writeStatus(cfg.Root, st); err != nil {
			log.Error("write provision status", "err", err)
		}
	}()

	argv, env, err := command(cfg)
	if err != nil {
		st.Error = err.Error()
		log.Error("provision cannot start", "err", err)
		return ExitFailFast
	}
	log.Info("provision starting", "argv", argv)
	env = append(env, "AKS_NODE_CONTROLLER_VERSION="+cfg.AgentVersion)
	exit, out, err := execute(ctx, argv, env, cfg.Stdout, cfg.Stderr)
	st.ExitCode, st.Output = strconv.Itoa(exit), out
	if err != nil {
		st.Error = err.Error()
	}
	log.Info("provision finished", "exitCode", exit, "err", err)
	return exit
}

// command decides what to run. nbc-cmd.sh runs as `/bin/bash -- <file>`;
// without it the image's bootstrap script runs with the target taken from
// the node config in its environment.
func command(cfg Config) (argv, env []string, err error) {
	if cfg.NBCCmd != "" {
		if _, err := os.Stat(cfg.NBCCmd); err != nil {
			return nil, nil, fmt.Errorf("nbc-cmd: %w", err)
		}
		return []string{"/bin/bash", "--", cfg.NBCCmd}, nil, nil
	}
	if cfg.ProvisionConfig == "" {
		return nil, nil, errors.New("neither --provision-config nor --nbc-cmd given")
	}
	data, err := capfile.Read(cfg.ProvisionConfig, nodeconfig.MaxConfigSize)
	if err != nil {
		return nil, nil, fmt.Errorf("read provision config: %w", err)
	}
	var c nodeconfigv1.Configuration
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &c); err != nil {
		return nil, nil, fmt.Errorf("parse provision config %s: %w", cfg.ProvisionConfig, err)
	}
	if v := c.GetVersion(); v != "v0" && v != "v1" {
		return nil, nil, fmt.Errorf("provision config %s: unsupported version %q (want v0 or v1)", cfg.ProvisionConfig, v)
	}
	script := filepath.Join(cfg.Root.Containers(), "provision_start.sh")
	env = []string{
		"AKS_NODE_CONFIG=" + cfg.ProvisionConfig,
		"API_SERVER_NAME=" + c.GetApiServerConfig().GetApiServerName(),
		"KUBE_CA_CRT=" + c.GetKubernetesCaCert(),
	}
	return []string{"/bin/bash", "--", script}, env, nil
}

// execute runs argv in its own process group, so that a cancelled ctx stops
// the whole bootstrap tree, and returns its exit code and output tail.
func execute(ctx context.Context, argv, env []string, stdout, stderr io.Writer) (int, string, error) {
	tail := &tailBuffer{max: outputTail}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = io.MultiWriter(orDiscard(stdout), tail)
	cmd.Stderr = io.MultiWriter(orDiscard(stderr), tail)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, tail.String(), nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), tail.String(), fmt.Errorf("bootstrap exited with code %d", ee.ExitCode())
	case ctx.Err() != nil:
		return ExitFailFast, tail.String(), fmt.Errorf("bootstrap stopped: %w", ctx.Err())
	default:
		return ExitFailFast, tail.String(), fmt.Errorf("run bootstrap: %w", err)
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func writeStatus(root layout.Root, st Status) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode provision status: %w", err)
	}
	jsonPath := root.ProvisionJSON()
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return fmt.Errorf("create status directory: %w", err)
	}
	if err := atomicfile.WriteFile(jsonPath, data, 0o600); err != nil {
		return err
	}
	// provision.complete is written last: its presence means provision.json
	// is final.
	done := root.ProvisionComplete()
	if err := os.MkdirAll(filepath.Dir(done), 0o755); err != nil {
		return fmt.Errorf("create containers directory: %w", err)
	}
	return atomicfile.WriteFile(done, nil, 0o600)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
