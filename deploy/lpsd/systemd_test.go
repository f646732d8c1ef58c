package deploy

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
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
	// serviceUID stands in for the unit's User=lpsd when the tests run as
	// root.
	serviceUID = 64123
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

// execStart returns the unit's ExecStart binary and arguments, with
// ${VAR} expanded from its Environment= assignments as systemd does.
func execStart(t *testing.T, u unit) (string, []string) {
	t.Helper()
	env := map[string]string{}
	for _, line := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	f := strings.Fields(u.get("Service", "ExecStart"))
	if len(f) == 0 {
		t.Fatalf("%s: no ExecStart", unitFile)
	}
	for i, a := range f {
		f[i] = unitVar.ReplaceAllStringFunc(a, func(m string) string {
			name := unitVar.FindStringSubmatch(m)[1]
			v, ok := env[name]
			if !ok {
				t.Errorf("%s: ExecStart uses ${%s}, which no Environment= sets", unitFile, name)
			}
			return v
		})
	}
	return f[0], f[1:]
}

// unitVar is a ${VAR} reference in a unit's command line.
var unitVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

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
	// The labels rollout scopes match come from Environment=, so a
	// drop-in sets them without repeating ExecStart.
	for _, f := range []string{"region", "deploy-env"} {
		if _, ok := vals[f]; !ok || !strings.Contains(u.get("Service", "ExecStart"), "--"+f+"=${") {
			t.Errorf("%s: ExecStart sets no --%s from Environment=", unitFile, f)
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

// TestIntegrationSyscallFilter runs the built lpsd on the unit's ExecStart
// arguments under strace through start, an admin publish and rollout,
// /metrics, SIGHUP and SIGTERM, and fails on any system call the unit's
// SystemCallFilter= lines deny, any socket family RestrictAddressFamilies=
// refuses, and any /proc file a ProcSubset=pid would hide: verify checks
// none of these, and lpsd would meet them only when running under systemd.
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
	ctl := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, lpsctl, args...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("lpsctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// The unit's files under a root of their own: /etc/lpsd/X is
	// root/etc/lpsd/X. Secrets 0600, owned by the service user.
	root := filepath.Join(dir, "root")
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(randomBytes(t, 32))
	tokenFile := filepath.Join(dir, "ops.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	releaseKey := filepath.Join(dir, "release.key")
	_, args := execStart(t, u)
	var files []string
	for i, a := range args {
		name, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case name == "store":
			kind, p, _ := strings.Cut(v, ":")
			// StateDirectoryMode=0700 for the state directory only.
			if err := os.MkdirAll(filepath.Join(root, path.Dir(path.Dir(p))), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(root, path.Dir(p)), 0o700); err != nil {
				t.Fatal(err)
			}
			files = append(files, filepath.Join(root, path.Dir(p)))
			args[i] = "--store=" + kind + ":" + filepath.Join(root, p)
		case l.flags[name].kind == "file":
			local := filepath.Join(root, v)
			if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
				t.Fatal(err)
			}
			switch name {
			case "tls-cert":
				err = os.WriteFile(local, []byte(mustRead(t, tlsFiles.CertFile)), 0o644)
			case "tls-key":
				err = os.WriteFile(local, []byte(mustRead(t, tlsFiles.KeyFile)), 0o600)
			case "admin-token-file":
				err = os.WriteFile(local, []byte("ops:"+token+"\n"), 0o600)
			case "release-keys":
				ctl(nil, "keys", "generate", "--out-private", releaseKey, "--out-public", local)
				err = os.Chmod(local, 0o644)
			default:
				t.Fatalf("ExecStart --%s: this test has no content for it", name)
			}
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, local)
			args[i] = "--" + name + "=" + local
		}
	}
	addrFile := filepath.Join(dir, "run", "addr.json")
	if err := os.MkdirAll(filepath.Dir(addrFile), 0o755); err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Dir(addrFile))
	args = append(args, "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--http-listen=127.0.0.1:0", "--addr-file="+addrFile)

	trace := filepath.Join(dir, "strace.out")
	wrapper := filepath.Join(dir, "lpsd-traced")
	script := fmt.Sprintf("#!/bin/sh\nexec %s -f -qq -o %s %s \"$@\"\n", strace, trace, l.bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// As root, run as a service user of its own (the unit's User=), owning
	// what systemd and the README give it.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: serviceUID, Gid: serviceUID}
		for _, p := range []string{filepath.Dir(l.bin), filepath.Dir(dir), dir} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range append(files, trace) {
			if _, err := os.Stat(f); os.IsNotExist(err) {
				os.WriteFile(f, nil, 0o600)
			}
			if err := os.Chown(f, serviceUID, serviceUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := startProc(t, append([]string{wrapper}, args...), cred, addrFile)
	// strace's child is lpsd: signal it, not strace.
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.cmd.Process.Pid, p.cmd.Process.Pid))
	pid, err2 := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil || err2 != nil {
		t.Fatalf("lpsd's pid under strace %d: %v %v (%q)", p.cmd.Process.Pid, err, err2, children)
	}
	p.poll(t, "/readyz answers 200", func() bool { return p.get("/readyz") == http.StatusOK })

	agent := filepath.Join(dir, "agent")
	if err := os.WriteFile(agent, []byte("a hotfix agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	const version = "202604.01.1"
	envelope := filepath.Join(dir, "release.json")
	ctl(nil, "release", "sign", "--key", releaseKey, "--base", "202604.01", "--version", version,
		"--artifact", fmt.Sprintf("%s/%s=%s,https://cdn.example/agent", runtime.GOOS, runtime.GOARCH, agent),
		"--valid-for", "24h", "--out", envelope, "--skip-version-check") // a stand-in, not an agent
	env := []string{"LPSCTL_SERVER=" + p.addrs.Admin, "LPSCTL_CA=" + tlsFiles.CAFile, "LPSCTL_TOKEN_FILE=" + tokenFile}
	ctl(env, "release", "publish", "--envelope", envelope, "--reason", "syscall test")
	ctl(env, "rollout", "set", version, "--percent", "5", "--reason", "syscall test")
	ctl(env, "status")
	for _, path := range []string{"/metrics", "/healthz"} {
		if code := p.get(path); code != http.StatusOK {
			p.fatalf(t, "GET %s: %d, want 200", path, code)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.poll(t, "SIGHUP reload logged", func() bool { return strings.Contains(mustRead(t, p.log), `"msg":"SIGHUP reload"`) })
	p.stop(t, pid)

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
