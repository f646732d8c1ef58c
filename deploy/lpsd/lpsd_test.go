// Package deploy checks lpsd's deployment artifacts (the systemd unit, the
// container image definition, the Kubernetes manifests) against the lpsd
// that ships: its real flags and defaults, the Makefile's build flags.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// repoRoot is the module root, relative to this package's directory.
const repoRoot = "../.."

// shutdownBound is how long lpsd may take to stop once --drain-delay has
// passed: the node listener's shutdown (10 s, internal/lps) runs alongside
// the admin server's graceful stop (10 s), then the HTTP server's (5 s,
// internal/lpsd). A stop timeout must exceed drain delay + this.
const shutdownBound = 15 * time.Second

// testVersion is stamped into the lpsd these tests build.
const testVersion = "deploytest"

// flagInfo is one of lpsd's flags as its -h output shows it.
type flagInfo struct {
	kind string // "" for a bool flag, else the placeholder: file, address, duration, string, int
	def  string // the default, unquoted; "" when -h shows none
}

// lpsd is a built lpsd and the flags it reports.
type lpsd struct {
	bin   string
	flags map[string]flagInfo
}

// The lpsd build, shared by the tests of this binary and removed by
// TestMain.
var (
	buildOnce sync.Once
	built     lpsd
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// builtLPSD builds lpsd once per test binary with the Makefile's build
// flags and reads its flags from -h. Slow (a compile), so -short skips it.
func builtLPSD(t *testing.T) lpsd {
	t.Helper()
	if testing.Short() {
		t.Skip("builds lpsd; skipped with -short")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lpsd-deploy-test-")
		if buildErr != nil {
			return
		}
		built, buildErr = buildLPSD(filepath.Join(buildDir, "lpsd"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func buildLPSD(out string) (lpsd, error) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		return lpsd{}, err
	}
	env, args, err := makefileBuild(string(mk))
	if err != nil {
		return lpsd{}, err
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "${VERSION}", testVersion)
	}
	cmd := exec.Command("go", append(append([]string{"build"}, args...), "-o", out, "./cmd/lpsd")...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return lpsd{}, fmt.Errorf("%v: %v\n%s", cmd.Args, err, b)
	}
	ver, err := exec.Command(out, "--version").Output()
	if err != nil {
		return lpsd{}, fmt.Errorf("lpsd --version: %v", err)
	}
	// The Makefile's -ldflags must reach main.version, or images and units
	// run an unstamped lpsd.
	if !strings.HasPrefix(string(ver), "lpsd "+testVersion+" ") {
		return lpsd{}, fmt.Errorf("lpsd --version = %q, want it stamped %q by the Makefile's build flags", ver, testVersion)
	}
	var help bytes.Buffer
	cmd = exec.Command(out, "-h")
	cmd.Stderr = &help
	_ = cmd.Run() // -h exits 2
	flags := parseHelp(help.String())
	if len(flags) < 20 {
		return lpsd{}, fmt.Errorf("lpsd -h: found only %d flags in:\n%s", len(flags), help.String())
	}
	return lpsd{bin: out, flags: flags}, nil
}

var (
	helpFlag    = regexp.MustCompile(`^  -([a-z][a-z0-9-]*)(?: (\S+))?$`)
	helpDefault = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
)

// parseHelp reads the flag package's PrintDefaults output: a line
// "  -name placeholder" per flag, then its usage, ending in (default X).
func parseHelp(help string) map[string]flagInfo {
	flags := map[string]flagInfo{}
	var cur string
	for _, line := range strings.Split(help, "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			cur = m[1]
			flags[cur] = flagInfo{kind: m[2]}
			continue
		}
		if m := helpDefault.FindStringSubmatch(strings.TrimSpace(line)); m != nil && cur != "" {
			f := flags[cur]
			f.def = m[1]
			flags[cur] = f
		}
	}
	return flags
}

// makefileBuild returns the environment and go build flags of the Makefile's
// build recipe, with $(VERSION) written ${VERSION}.
func makefileBuild(mk string) (env, args []string, err error) {
	for _, line := range strings.Split(mk, "\n") {
		if strings.Contains(line, "go build") && strings.Contains(line, "cmd/$$b") {
			return goBuild(strings.ReplaceAll(line, "$(VERSION)", "${VERSION}"))
		}
	}
	return nil, nil, fmt.Errorf("Makefile: no go build line for cmd/$$b")
}

// goBuild splits "[NAME=VALUE ...] go build FLAGS -o ..." into the
// environment and the flags before -o.
func goBuild(cmdline string) (env, args []string, err error) {
	words, err := shellWords(cmdline)
	if err != nil {
		return nil, nil, err
	}
	i := 0
	for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
		env = append(env, words[i])
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
		return nil, nil, fmt.Errorf("%q: want [NAME=VALUE ...] go build ...", cmdline)
	}
	for _, w := range words[i+2:] {
		if w == "-o" {
			break
		}
		args = append(args, w)
	}
	return env, args, nil
}

// shellWords splits a command line on blanks, honouring double quotes (all
// the build lines use).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range strings.TrimSpace(s) {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("%q: unterminated quote", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// checkArgs checks a command line's lpsd arguments: each is --name=value
// (or --name for a bool) naming a real flag, none twice. It returns the
// values by flag name.
func checkArgs(t *testing.T, where string, args []string, flags map[string]flagInfo) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		f, ok := flags[name]
		switch {
		case !strings.HasPrefix(a, "--"):
			t.Errorf("%s: argument %q: want --flag=value", where, a)
		case !ok:
			t.Errorf("%s: %q: lpsd has no flag --%s", where, a, name)
		case f.kind != "" && !hasVal:
			t.Errorf("%s: %q: want --%s=VALUE (one argument, so no value is mistaken for a flag)", where, a, name)
		}
		if _, dup := vals[name]; dup {
			t.Errorf("%s: --%s given twice", where, name)
		}
		vals[name] = val
	}
	return vals
}

// fileFlags are the flags naming a file lpsd reads (placeholder "file"),
// except --addr-file, which it writes.
func fileFlags(vals map[string]string, flags map[string]flagInfo) map[string]string {
	out := map[string]string{}
	for name, v := range vals {
		if flags[name].kind == "file" && name != "addr-file" {
			out[name] = v
		}
	}
	return out
}

func TestParseHelp(t *testing.T) {
	help := "Usage of lpsd:\n" +
		"  -admin-listen address\n    \tadmin API gRPC/TLS address (default \"127.0.0.1:8444\")\n" +
		"  -drain-delay duration\n    \ton SIGTERM (default 5s)\n" +
		"  -etcd-allow-plaintext\n    \tallow plain text\n" +
		"  -tls-cert file\n    \tPEM certificate file (required)\n"
	got := parseHelp(help)
	want := map[string]flagInfo{
		"admin-listen":         {kind: "address", def: "127.0.0.1:8444"},
		"drain-delay":          {kind: "duration", def: "5s"},
		"etcd-allow-plaintext": {},
		"tls-cert":             {kind: "file"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(flagInfo{})); diff != "" {
		t.Errorf("parseHelp mismatch (-want +got):\n%s", diff)
	}
}

func TestGoBuild(t *testing.T) {
	env, args, err := goBuild(`CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/lpsd ./cmd/lpsd`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"CGO_ENABLED=0"}, env); diff != "" {
		t.Errorf("goBuild env mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"-trimpath", "-ldflags", "-X main.version=${VERSION}"}, args); diff != "" {
		t.Errorf("goBuild args mismatch (-want +got):\n%s", diff)
	}
}

// proc is an lpsd started by a test, with its output in a log file.
type proc struct {
	cmd    *exec.Cmd
	exited chan error
	log    string
	// addrs are the bound addresses from --addr-file.
	addrs struct{ GRPC, Admin, HTTP string }
}

// startProc runs argv (lpsd, or a wrapper that execs it, with --addr-file
// among the arguments) as cred (nil: as the test) and waits until lpsd has
// written addrFile.
func startProc(t *testing.T, argv []string, cred *syscall.Credential, addrFile string) *proc {
	t.Helper()
	p := &proc{exited: make(chan error, 1), log: filepath.Join(filepath.Dir(addrFile), "lpsd.log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if cred != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	p.poll(t, "lpsd wrote "+addrFile, func() bool {
		data, err := os.ReadFile(addrFile)
		return err == nil && json.Unmarshal(data, &p.addrs) == nil && p.addrs.HTTP != ""
	})
	return p
}

// fatalf fails the test with lpsd's log.
func (p *proc) fatalf(t *testing.T, format string, a ...any) {
	t.Helper()
	log, _ := os.ReadFile(p.log)
	t.Fatalf(format+"\nlpsd's log:\n%s", append(a, log)...)
}

// poll waits up to 30 s for done, failing early if lpsd exits.
func (p *proc) poll(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		select {
		case err := <-p.exited:
			p.fatalf(t, "lpsd exited (%v) before: %s", err, what)
		default:
		}
		if time.Now().After(deadline) {
			p.fatalf(t, "not within 30s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get returns the status code of GET path on lpsd's HTTP listener (0 when
// it does not answer).
func (p *proc) get(path string) int {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + p.addrs.HTTP + path)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode
}

// stop sends SIGTERM to pid (lpsd's, which is not the started process
// under a wrapper) and fails unless lpsd exits 0 within 30 s.
func (p *proc) stop(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			p.fatalf(t, "lpsd after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		p.fatalf(t, "lpsd still running 30s after SIGTERM")
	}
}
