// Package harness runs nodehotfix's real binaries as processes on loopback,
// for the end-to-end tests, the demo and the benchmarks.
package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(data), "module nodehotfix") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of module nodehotfix not found above the working directory")
		}
		dir = parent
	}
}

// Binaries are built executables.
type Binaries struct {
	LPSD, LPSCtl, IMDS string
	// Launcher is the repository's launcher script.
	Launcher string
	dir      string
}

// Build compiles lpsd, lpsctl and imds-emulator into dir.
func Build(ctx context.Context, dir string) (Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		LPSD:     filepath.Join(dir, "lpsd"),
		LPSCtl:   filepath.Join(dir, "lpsctl"),
		IMDS:     filepath.Join(dir, "imds-emulator"),
		Launcher: filepath.Join(root, "deploy/node/aks-node-controller-launcher.sh"),
		dir:      dir,
	}
	// One invocation builds the three commands with shared work in parallel.
	cmd := exec.CommandContext(ctx, "go", slices.Concat([]string{"build"}, BuildFlags, []string{"-o", dir + string(filepath.Separator), "./cmd/lpsd", "./cmd/lpsctl", "./cmd/imds-emulator"})...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return b, nil
}

// BuildAgent compiles aks-node-controller stamped with version to out.
func BuildAgent(ctx context.Context, out, version string) error {
	ldflags := ""
	if version != "" {
		ldflags = "-X main.version=" + version
	}
	return GoBuild(ctx, "./cmd/aks-node-controller", out, ldflags)
}

// BuildFlags are the Makefile's go build flags, which every build of a
// binary the tests and benchmarks run uses (TestBuildFlagsAreTheMakefiles
// pins them): -trimpath, and the grpcnotrace tag, which leaves
// golang.org/x/net/trace (and html/template with it) out of the binaries,
// a fifth of the agent's size and the work of their package init at every
// start: nothing here uses gRPC's request tracing.
var BuildFlags = []string{"-trimpath", "-tags", "grpcnotrace"}

// GoBuild compiles the module's package pkg (e.g. "./cmd/lpsd") to out the
// way the Makefile does (CGO off, BuildFlags), passing ldflags (may be
// empty) to the linker.
func GoBuild(ctx context.Context, pkg, out, ldflags string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	args := slices.Concat([]string{"build"}, BuildFlags, []string{"-o", out})
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Proc is a started process whose output goes to a log file.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	once    sync.Once
}

// Start runs argv in its own process group with output to logPath.
func Start(name, logPath string, argv, env []string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group and SIGKILL after grace; it
// returns once the process is gone.
func (p *Proc) Stop(grace time.Duration) {
	p.once.Do(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// Kill sends SIGKILL to the process group and waits for it.
func (p *Proc) Kill() {
	p.once.Do(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// Log returns the process's output so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// WaitFile waits for path to exist with non-empty content and returns its
// first line, failing early if p exits.
func WaitFile(ctx context.Context, p *Proc, path string) (string, error) {
	for {
		if f, err := os.Open(path); err == nil {
			line, _ := bufio.NewReader(f).ReadString('\n')
			f.Close()
			if line = strings.TrimSpace(line); line != "" {
				return line, nil
			}
		}
		if p != nil && p.Exited() {
			return "", fmt.Errorf("%s exited before writing %s:\n%s", p.Name, path, p.Log())
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
