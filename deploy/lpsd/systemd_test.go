package deploy

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nodehotfix/internal/lps"
	"nodehotfix/test/harness"
)

const (
	unitFile     = "systemd/lpsd.service"
	sysusersFile = "systemd/lpsd.sysusers.conf"
	// allowNoToolsEnv, set to 1, lets the tests that need systemd-analyze
	// or strace skip where they are missing; CI installs both (.ci/run),
	// so there they run.
	allowNoToolsEnv = "LPSD_DEPLOY_ALLOW_NO_TOOLS"
	// maxExposure caps systemd-analyze security's exposure score (0-10,
	// lower is better; the unit scores 1.1 with systemd 252).
	maxExposure = 2.0
)

// unit is a parsed unit file: section, then key, then its values in order.
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseUnit reads a unit file: [Section] lines, Key=Value lines, lines
// ending in a backslash continued, # and ; comments.
func parseUnit(text string) (unit, error) {
	u := unit{}
	var section, pending string
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line, pending = pending+" "+line, ""
		} else if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending = strings.TrimSuffix(line, `\`)
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("line %d: %q: want Key=Value in a [Section]", n, line)
		}
		u[section][k] = append(u[section][k], strings.TrimSpace(v))
	}
	return u, sc.Err()
}

func readUnit(t *testing.T) unit {
	t.Helper()
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(string(data))
	if err != nil {
		t.Fatalf("%s: %v", unitFile, err)
	}
	return u
}

// execStart returns the unit's ExecStart binary and arguments.
func execStart(t *testing.T, u unit) (string, []string) {
	t.Helper()
	f := strings.Fields(u.get("Service", "ExecStart"))
	if len(f) == 0 {
		t.Fatalf("%s: no ExecStart", unitFile)
	}
	return f[0], f[1:]
}

func TestSystemdUnitSettings(t *testing.T) {
	u := readUnit(t)
	for _, c := range []struct{ key, want string }{
		// lpsd has no sd_notify support, so notify would time out.
		{"Type", "exec"},
		{"User", "lpsd"},
		{"Group", "lpsd"},
		{"ExecReload", "/bin/kill -HUP $MAINPID"},
		{"KillSignal", "SIGTERM"},
		{"Restart", "on-failure"},
		{"RestartPreventExitStatus", "2"}, // lpsd's usage errors (cmd/lpsd/doc.go)
		{"StateDirectory", "lpsd"},
		{"ConfigurationDirectory", "lpsd"},
		{"UMask", "0077"},
		{"CapabilityBoundingSet", ""},
		{"AmbientCapabilities", ""},
		{"NoNewPrivileges", "yes"},
		{"ProtectSystem", "strict"},
		{"ProtectHome", "yes"},
		{"PrivateTmp", "yes"},
		{"PrivateDevices", "yes"},
		{"ProtectKernelTunables", "yes"},
		{"ProtectKernelModules", "yes"},
		{"ProtectControlGroups", "yes"},
		{"RestrictNamespaces", "yes"},
		{"MemoryDenyWriteExecute", "yes"},
		{"SystemCallArchitectures", "native"},
	} {
		vals, ok := u["Service"][c.key]
		if !ok {
			t.Errorf("%s: [Service] has no %s=, want %s=%s", unitFile, c.key, c.key, c.want)
			continue
		}
		if got := vals[len(vals)-1]; got != c.want {
			t.Errorf("%s: %s=%s, want %s=%s", unitFile, c.key, got, c.key, c.want)
		}
	}
	if f := u["Service"]["SystemCallFilter"]; len(f) == 0 || f[0] != "@system-service" {
		t.Errorf("%s: SystemCallFilter=%q, want @system-service first", unitFile, f)
	}
	if u.get("Service", "DynamicUser") == "yes" {
		t.Errorf("%s: DynamicUser=yes: its user cannot own the 0600 secrets in /etc/lpsd", unitFile)
	}
	nofile, err := strconv.Atoi(u.get("Service", "LimitNOFILE"))
	// Headroom over the connection cap for the listeners, the store, etcd
	// and connections being shed.
	if err != nil || nofile < lps.DefaultMaxConnections+1024 {
		t.Errorf("%s: LimitNOFILE=%s, want a number at least %d (--max-connections default %d, plus headroom)",
			unitFile, u.get("Service", "LimitNOFILE"), lps.DefaultMaxConnections+1024, lps.DefaultMaxConnections)
	}

	users, err := os.ReadFile(sysusersFile)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^u lpsd `).Match(users) {
		t.Errorf("%s does not create the user lpsd that %s runs as", sysusersFile, unitFile)
	}
}

// TestSystemdUnitFlags checks ExecStart against the built lpsd's flags, the
// stop timeout against the drain delay, and that every path is where the
// unit's directories put it.
func TestSystemdUnitFlags(t *testing.T) {
	l := builtLPSD(t)
	u := readUnit(t)
	_, args := execStart(t, u)
	vals := checkArgs(t, unitFile+" ExecStart", args, l.flags)

	for _, f := range []string{"tls-cert", "tls-key", "store"} {
		if vals[f] == "" {
			t.Errorf("%s: ExecStart sets no --%s", unitFile, f)
		}
	}
	configDir := "/etc/" + u.get("Service", "ConfigurationDirectory")
	for name, p := range fileFlags(vals, l.flags) {
		if path.Dir(p) != configDir {
			t.Errorf("%s: --%s=%s: want a file in %s (ConfigurationDirectory)", unitFile, name, p, configDir)
		}
	}
	kind, boltPath, _ := strings.Cut(vals["store"], ":")
	stateDir := "/var/lib/" + u.get("Service", "StateDirectory")
	if kind != "bolt" || path.Dir(boltPath) != stateDir {
		t.Errorf("%s: --store=%s: want bolt:%s/FILE (StateDirectory)", unitFile, vals["store"], stateDir)
	}

	drain := vals["drain-delay"]
	if drain == "" {
		drain = l.flags["drain-delay"].def
	}
	checkStopTimeout(t, unitFile+" TimeoutStopSec", u.get("Service", "TimeoutStopSec"), drain)
}

// checkStopTimeout fails unless timeout (a Go duration) exceeds drain plus
// shutdownBound.
func checkStopTimeout(t *testing.T, where, timeout, drain string) {
	t.Helper()
	d, err := time.ParseDuration(drain)
	if err != nil {
		t.Fatalf("--drain-delay %q: %v", drain, err)
	}
	got, err := time.ParseDuration(timeout)
	if err != nil {
		t.Errorf("%s=%q: want a duration such as 30s", where, timeout)
		return
	}
	if got <= d+shutdownBound {
		t.Errorf("%s=%v: want more than --drain-delay %v + %v for the listeners to stop", where, got, d, shutdownBound)
	}
}

// TestSystemdAnalyze runs systemd-analyze verify on the unit, with ExecStart
// pointing at the built lpsd (verify wants it to exist), and fails on any
// line it prints; then logs and bounds the security exposure score.
func TestSystemdAnalyze(t *testing.T) {
	l := builtLPSD(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv(allowNoToolsEnv) == "1" {
			t.Skipf("systemd-analyze not found and %s=1", allowNoToolsEnv)
		}
		t.Fatalf("systemd-analyze not found (Debian package systemd; .ci/run installs it); set %s=1 to skip", allowNoToolsEnv)
	}
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := execStart(t, readUnit(t))
	unitPath := filepath.Join(t.TempDir(), "lpsd.service")
	if err := os.WriteFile(unitPath, []byte(strings.Replace(string(data), "ExecStart="+bin, "ExecStart="+l.bin, 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.CommandContext(t.Context(), analyze, "verify", "--man=no", unitPath).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}

	// --threshold takes the score times ten; over it, the command fails.
	cmd := exec.CommandContext(t.Context(), analyze, "security", "--offline=yes", "--no-pager",
		fmt.Sprintf("--threshold=%d", int(maxExposure*10)), unitPath)
	out, err = cmd.CombinedOutput()
	score := regexp.MustCompile(`Overall exposure level for lpsd.service: (\S+ \S+)`).FindSubmatch(out)
	if score == nil {
		t.Fatalf("systemd-analyze security: no score (%v):\n%s", err, out)
	}
	t.Logf("systemd-analyze security %s: exposure %s", unitFile, score[1])
	if err != nil {
		var exposed []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "✗") {
				exposed = append(exposed, line)
			}
		}
		t.Errorf("systemd-analyze security: %v: exposure %s over %.1f; what is exposed:\n%s", err, score[1], maxExposure, strings.Join(exposed, "\n"))
	}

	// systemd-sysusers writes passwd and group under --root; it chowns
	// them, so it needs root.
	if os.Geteuid() != 0 {
		t.Logf("not root: %s left unchecked by systemd-sysusers", sysusersFile)
		return
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(t.Context(), "systemd-sysusers", "--root="+root, "-")
	cmd.Stdin = strings.NewReader(mustRead(t, sysusersFile))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers %s: %v\n%s", sysusersFile, err, out)
	}
	if passwd := mustRead(t, filepath.Join(root, "etc/passwd")); !strings.HasPrefix(passwd, "lpsd:") {
		t.Errorf("systemd-sysusers %s: passwd = %q, want the user lpsd", sysusersFile, passwd)
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseUnit(t *testing.T) {
	u, err := parseUnit("# c\n[Service]\nExecStart=/bin/x \\\n\t--a=1 \\\n\t--b\nX=1\nX=2\nEmpty=\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(u.get("Service", "ExecStart")), []string{"/bin/x", "--a=1", "--b"}; !cmp.Equal(got, want) {
		t.Errorf("parseUnit: ExecStart fields = %q, want %q", got, want)
	}
	if diff := cmp.Diff(map[string][]string{"X": {"1", "2"}, "Empty": {""}}, u["Service"], cmpopts.IgnoreMapEntries(func(k string, _ []string) bool { return k == "ExecStart" })); diff != "" {
		t.Errorf("parseUnit mismatch (-want +got):\n%s", diff)
	}
	if _, err := parseUnit("Key=outside\n"); err == nil {
		t.Errorf("parseUnit(key outside a section) = nil error, want one")
	}
}

// TestIntegrationSyscallFilter runs the built lpsd under strace through
// start, an admin publish and rollout, /metrics, SIGHUP and SIGTERM, and
// fails on any system call the unit's SystemCallFilter= lines deny or any
// socket family RestrictAddressFamilies= does not allow: verify checks
// neither, and lpsd would meet EPERM only when running under systemd.
func TestIntegrationSyscallFilter(t *testing.T) {
	l := builtLPSD(t)
	tool := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			if os.Getenv(allowNoToolsEnv) == "1" {
				t.Skipf("%s not found and %s=1", name, allowNoToolsEnv)
			}
			t.Fatalf("%s not found (.ci/run installs it); set %s=1 to skip", name, allowNoToolsEnv)
		}
		return p
	}
	strace, analyze := tool("strace"), tool("systemd-analyze")
	u := readUnit(t)
	allowed, denied := map[string]bool{}, map[string]bool{}
	for _, v := range u["Service"]["SystemCallFilter"] {
		into := allowed
		if strings.HasPrefix(v, "~") {
			into, v = denied, v[1:]
		}
		for _, g := range strings.Fields(v) {
			expandSyscalls(t, analyze, g, into)
		}
	}
	families := strings.Fields(u.get("Service", "RestrictAddressFamilies"))

	ctx := t.Context()
	dir := t.TempDir()
	lpsctl := filepath.Join(dir, "lpsctl")
	if err := harness.GoBuild(ctx, "./cmd/lpsctl", lpsctl, ""); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "strace.out")
	wrapper := filepath.Join(dir, "lpsd-traced")
	script := fmt.Sprintf("#!/bin/sh\nexec %s -f -qq -o %s %s \"$@\"\n", strace, trace, l.bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	priv, pub := filepath.Join(dir, "release.key"), filepath.Join(dir, "release-keys.pub")
	if out, err := exec.CommandContext(ctx, lpsctl, "keys", "generate", "--out-private", priv, "--out-public", pub).CombinedOutput(); err != nil {
		t.Fatalf("lpsctl keys generate: %v\n%s", err, out)
	}
	srv, err := harness.StartLPSD(ctx, harness.Binaries{LPSD: wrapper, LPSCtl: lpsctl}, dir, harness.LPSDOptions{
		Extra: []string{"--release-keys", pub},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	// strace's child is lpsd: signal it, not strace.
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", srv.Pid(), srv.Pid()))
	pid, err2 := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil || err2 != nil {
		t.Fatalf("lpsd's pid under strace %d: %v %v (%q)", srv.Pid(), err, err2, children)
	}

	agent := filepath.Join(dir, "agent")
	if err := os.WriteFile(agent, []byte("a hotfix agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	const version = "202604.01.1"
	envelope, err := srv.SignRelease(ctx, dir, harness.Release{Version: version, Binary: agent, URL: "https://cdn.example/agent", KeyFile: priv})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"release", "publish", "--envelope", envelope, "--reason", "syscall test"},
		{"rollout", "set", version, "--percent", "5", "--reason", "syscall test"},
		{"status"},
	} {
		if _, err := srv.Ctl(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, p := range []string{"/metrics", "/readyz", "/healthz"} {
		resp, err := client.Get("http://" + srv.HTTPAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", p, resp.Status)
		}
	}
	for _, sig := range []struct {
		sig  syscall.Signal
		done func() bool
	}{
		{syscall.SIGHUP, func() bool { return strings.Contains(srv.Log(), `"msg":"SIGHUP reload"`) }},
		{syscall.SIGTERM, srv.Exited},
	} {
		if err := syscall.Kill(pid, sig.sig); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, sig.sig.String(), sig.done)
	}

	used, socketFamilies, opened := tracedCalls(t, mustRead(t, trace))
	var bad []string
	for call := range used {
		if !allowed[call] || denied[call] {
			bad = append(bad, call)
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("lpsd called %v, which %s's SystemCallFilter= denies (%d calls traced)", bad, unitFile, len(used))
	}
	for f := range socketFamilies {
		if !slices.Contains(families, f) {
			t.Errorf("lpsd opened an %s socket; %s's RestrictAddressFamilies=%v refuses it", f, unitFile, families)
		}
	}
	// ProcSubset=pid hides the rest of /proc, which lpsd reads: Go its
	// listen backlog (/proc/sys/net/core/somaxconn), the process collector
	// its start time (/proc/stat).
	if u.get("Service", "ProcSubset") == "pid" {
		for p := range opened {
			if strings.HasPrefix(p, "/proc/") && !procPID.MatchString(p) {
				t.Errorf("lpsd opened %s, which %s's ProcSubset=pid hides", p, unitFile)
			}
		}
	}
	t.Logf("%d distinct system calls traced; socket families %v", len(used), slices.Sorted(maps.Keys(socketFamilies)))
}

// expandSyscalls adds the system calls of a name or @group (nested groups
// included) as systemd-analyze syscall-filter lists them.
func expandSyscalls(t *testing.T, analyze, name string, into map[string]bool) {
	t.Helper()
	if !strings.HasPrefix(name, "@") {
		into[name] = true
		return
	}
	out, err := exec.CommandContext(t.Context(), analyze, "syscall-filter", "--no-pager", name).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
	}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		if f := strings.TrimSpace(line); f != "" && !strings.HasPrefix(f, "#") {
			expandSyscalls(t, analyze, f, into)
		}
	}
}

var (
	traceCall   = regexp.MustCompile(`^\d+\s+([a-z0-9_]+)\(`)
	traceSocket = regexp.MustCompile(`^\d+\s+socket\((AF_[A-Z0-9]+)`)
	traceOpen   = regexp.MustCompile(`^\d+\s+openat\([^,]+, "([^"]+)"`)
	procPID     = regexp.MustCompile(`^/proc/(self|thread-self|\d+)/`)
)

// tracedCalls returns the system calls, socket families and opened paths in
// strace -f output.
func tracedCalls(t *testing.T, out string) (calls, families, opened map[string]bool) {
	t.Helper()
	calls, families, opened = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if m := traceCall.FindStringSubmatch(line); m != nil {
			calls[m[1]] = true
		}
		if m := traceSocket.FindStringSubmatch(line); m != nil {
			families[m[1]] = true
		}
		if m := traceOpen.FindStringSubmatch(line); m != nil {
			opened[m[1]] = true
		}
	}
	if !calls["execve"] || !calls["socket"] || !opened["/proc/sys/net/core/somaxconn"] {
		t.Fatalf("strace output has no execve or socket call, or no open of somaxconn: %.500s", out)
	}
	return calls, families, opened
}

// waitFor polls done until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: not done within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
