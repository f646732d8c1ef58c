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
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	nodeconfigv1 "nodehotfix/internal/gen/nodeconfig/v1"
	"nodehotfix/internal/node/event"
	"nodehotfix/internal/node/handover"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/nodeconfig"
	"nodehotfix/internal/node/proc"
	"nodehotfix/internal/node/task"
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
	// Agent is which agent provisioned ("baked" or "hotfix"); empty when
	// provision ran outside launch.
	Agent string `json:"Agent,omitempty"`
	// AgentVersion is the provisioning agent's version.
	AgentVersion string `json:"AgentVersion,omitempty"`
	// Fallback is why the baked agent provisioned after a hotfix agent
	// failed before the bootstrap started.
	Fallback string `json:"Fallback,omitempty"`
}

// Config says what to provision.
type Config struct {
	Root layout.Root
	// ConfigPath is the node config's path (--provision-config); empty
	// when not given.
	ConfigPath string
	// NBCCmdPath is nbc-cmd.sh's path (--nbc-cmd); empty when not given.
	// It takes priority over ConfigPath, as in the reference.
	NBCCmdPath string
	// Stdout and Stderr receive the bootstrap's output live; nil discards.
	Stdout, Stderr io.Writer
	// Log receives progress; nil discards.
	Log *slog.Logger
	// AgentVersion is exported to the bootstrap as
	// AKS_NODE_CONTROLLER_VERSION, so its output says which agent (baked or
	// hotfix) ran it.
	AgentVersion string
	// Env is added to the bootstrap's environment (the accepted feature
	// flags when launch provisions in-process).
	Env []string
	// Agent, recorded in provision.json, is "baked" or "hotfix" under
	// launch, empty outside it.
	Agent string
	// Fallback, recorded in provision.json, is why the baked agent
	// provisions after a hotfix failed before the bootstrap started.
	Fallback string
	// LaunchID is recorded in provision-started.json, which tells launch
	// whether the bootstrap started under it.
	LaunchID string
	// FallbackFollows says a same-boot fallback to the baked agent follows
	// a failure before the bootstrap starts. The status files are then left
	// to that run, so provision-wait never sees this attempt's failure, and
	// the start must be recorded: if it cannot be, the bootstrap does not
	// start here (a failure of it would pass for one before it, and the
	// fallback would run it twice).
	FallbackFollows bool
}

// Run provisions the node and returns the exit code to exit with. It writes
// provision.json and provision.complete, including when the inputs are
// unusable or the bootstrap cannot start, unless FallbackFollows and the
// bootstrap never started.
func Run(ctx context.Context, cfg Config) (code int) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	st := Status{ExitCode: strconv.Itoa(ExitFailFast), Agent: cfg.Agent, AgentVersion: cfg.AgentVersion, Fallback: cfg.Fallback}
	started := false
	defer func() {
		if v := recover(); v != nil {
			st.ExitCode, st.Error = strconv.Itoa(ExitFailFast), fmt.Sprintf("provision panicked: %v", v)
			code = ExitFailFast
		}
		if cfg.FallbackFollows && !started {
			log.Warn("provision failed before the bootstrap started; leaving the status to the baked agent", "err", st.Error)
			return
		}
		end := time.Now()
		st.StartTime, st.EndTime = start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339)
		st.ExecDuration = strconv.Itoa(int(end.Sub(start).Seconds()))
		if err := WriteStatus(cfg.Root, st); err != nil {
			log.Error("write provision status", "err", err)
		}
	}()

	if cfg.FallbackFollows {
		// Tells launch this agent keeps the protocol, so it may bound the
		// preflight (a hang here gets the baked agent, not a stuck node).
		if err := recordStart(cfg, handover.PhasePreflight); err != nil {
			log.Warn("record the preflight", "err", err)
		}
	}
	argv, env, err := command(cfg)
	if err != nil {
		st.Error = err.Error()
		log.Error("provision cannot start", "err", err)
		return ExitFailFast
	}
	if err := recordStart(cfg, handover.PhaseBootstrap); err != nil {
		if cfg.FallbackFollows {
			st.Error = err.Error()
			log.Error("provision cannot record the bootstrap's start; not starting it", "err", err)
			return ExitFailFast
		}
		log.Warn("record the bootstrap's start", "err", err)
	}
	started = true
	log.Info("provision starting", "argv", argv, "agent", cfg.Agent, "version", cfg.AgentVersion)
	env = slices.Concat(cfg.Env, env, []string{"AKS_NODE_CONTROLLER_VERSION=" + cfg.AgentVersion})
	exit, out, err := execute(ctx, argv, env, cfg.Stdout, cfg.Stderr)
	st.ExitCode, st.Output = strconv.Itoa(exit), out
	if err != nil {
		st.Error = err.Error()
	}
	log.Info("provision finished", "exitCode", exit, "err", err)
	return exit
}

// RunWithEvents runs Run between the provision command's two telemetry
// events: Starting, then one with its result. It is not a task.Task: Run
// recovers its own panics, because it must record them in provision.json,
// and provision has no budget (the bootstrap is bounded by the CSE).
func RunWithEvents(ctx context.Context, cfg Config) int {
	rec := task.Recorder{Root: cfg.Root, Log: cfg.Log, Version: cfg.AgentVersion}
	start := time.Now()
	rec.Event(event.TaskProvision, event.LevelInformational, "Starting", start, start)
	code := Run(ctx, cfg)
	if code == 0 {
		rec.Event(event.TaskProvision, event.LevelInformational, "Completed", start, time.Now())
	} else {
		rec.Event(event.TaskProvision, event.LevelError, fmt.Sprintf("aks-node-controller exited with error %d", code), start, time.Now())
	}
	return code
}

// recordStart writes provision-started.json.
func recordStart(cfg Config, phase string) error {
	return handover.Write(handover.StartFile(cfg.Root), handover.Record{LaunchID: cfg.LaunchID, Phase: phase, Agent: cfg.Agent, AgentVersion: cfg.AgentVersion})
}

// Abandon records a provisioning whose agent died after the bootstrap
// started, with code as its exit code, so provision-wait does not wait out
// its timeout for a status nobody will write.
func Abandon(root layout.Root, code int, reason string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	return WriteStatus(root, Status{ExitCode: strconv.Itoa(code), Error: reason, StartTime: now, EndTime: now})
}

// command decides what to run. nbc-cmd.sh runs as `/bin/bash -- <file>`;
// without it the image's bootstrap script runs with the target taken from
// the node config in its environment.
func command(cfg Config) (argv, env []string, err error) {
	if cfg.NBCCmdPath != "" {
		if _, err := os.Stat(cfg.NBCCmdPath); err != nil {
			return nil, nil, fmt.Errorf("nbc-cmd: %w", err)
		}
		return []string{"/bin/bash", "--", cfg.NBCCmdPath}, nil, nil
	}
	if cfg.ConfigPath == "" {
		return nil, nil, errors.New("neither --provision-config nor --nbc-cmd given")
	}
	data, err := capfile.Read(cfg.ConfigPath, nodeconfig.MaxConfigSize)
	if err != nil {
		return nil, nil, fmt.Errorf("read provision config: %w", err)
	}
	var c nodeconfigv1.Configuration
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &c); err != nil {
		return nil, nil, fmt.Errorf("parse provision config %s: %w", cfg.ConfigPath, err)
	}
	if v := c.GetVersion(); v != "v0" && v != "v1" {
		return nil, nil, fmt.Errorf("provision config %s: unsupported version %q (want v0 or v1)", cfg.ConfigPath, v)
	}
	script := filepath.Join(cfg.Root.Containers(), "provision_start.sh")
	env = []string{
		"AKS_NODE_CONFIG=" + cfg.ConfigPath,
		"API_SERVER_NAME=" + c.GetApiServerConfig().GetApiServerName(),
		"KUBE_CA_CRT=" + c.GetKubernetesCaCert(),
	}
	return []string{"/bin/bash", "--", script}, env, nil
}

// execute runs the bootstrap and returns its exit code and output tail.
// Services it starts may keep running after it exits, by design; a
// cancelled ctx kills the whole bootstrap tree.
func execute(ctx context.Context, argv, env []string, stdout, stderr io.Writer) (int, string, error) {
	res, err := proc.Run(ctx, proc.Cmd{
		Args: argv, Env: env, Stdout: stdout, Stderr: stderr,
		TailSize: outputTail, Linger: true,
	})
	tail := string(res.Tail)
	switch {
	case err == nil:
		return 0, tail, nil
	case res.ExitCode > 0:
		return res.ExitCode, tail, fmt.Errorf("bootstrap exited with code %d", res.ExitCode)
	case ctx.Err() != nil:
		return ExitFailFast, tail, fmt.Errorf("bootstrap stopped: %w", ctx.Err())
	default:
		return ExitFailFast, tail, fmt.Errorf("bootstrap: %w", err)
	}
}

// WriteStatus writes provision.json, then provision.complete, durably:
// their presence is what the CSE extension waits for.
func WriteStatus(root layout.Root, st Status) error {
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
