package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nodehotfix/internal/lps"
)

const (
	unitFile     = "systemd/lpsd.service"
	sysusersFile = "systemd/lpsd.sysusers.conf"
	// allowNoSystemdEnv, set to 1, lets TestSystemdAnalyze skip where
	// systemd-analyze is missing; CI installs it (.ci/run), so there it runs.
	allowNoSystemdEnv = "LPSD_DEPLOY_ALLOW_NO_SYSTEMD_ANALYZE"
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
		if os.Getenv(allowNoSystemdEnv) == "1" {
			t.Skipf("systemd-analyze not found and %s=1", allowNoSystemdEnv)
		}
		t.Fatalf("systemd-analyze not found (Debian package systemd; .ci/run installs it); set %s=1 to skip", allowNoSystemdEnv)
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
