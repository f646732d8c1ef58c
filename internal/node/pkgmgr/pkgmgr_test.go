package pkgmgr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/proc"
)

// node is a fake node: a root directory with os-release and apt sources, and
// a PATH directory of fake tools that record their argv to a log.
type node struct {
	root, bin, log string
}

// newNode makes a fake node and points PATH at its tools only, so no real
// package manager can ever run. Tests using it cannot be parallel.
func newNode(t *testing.T, osRelease string, files ...string) node {
	t.Helper()
	dir := t.TempDir()
	n := node{root: filepath.Join(dir, "root"), bin: filepath.Join(dir, "bin"), log: filepath.Join(dir, "argv.log")}
	writeFile(t, filepath.Join(n.root, "etc/os-release"), osRelease)
	for _, f := range files {
		writeFile(t, filepath.Join(n.root, f), "deb https://packages.microsoft.com/ubuntu/22.04/prod jammy main\n")
	}
	if err := os.MkdirAll(filepath.Join(n.root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", n.bin)
	// env strips the assignments it is given and runs the rest, like env(1),
	// using only shell builtins since PATH holds nothing else.
	n.tool(t, "env", `while [ $# -gt 0 ]; do case "$1" in *=*) export "$1"; shift;; *) break;; esac; done
exec "$@"`)
	return n
}

// tool installs a fake executable that appends its argv (NUL-separated, one
// line per call) to the log and then runs body.
func (n node) tool(t *testing.T, name, body string) {
	t.Helper()
	script := fmt.Sprintf("#!/bin/sh\n{ printf '%%s\\0' \"${0##*/}\" \"$@\"; printf '\\n'; } >> '%s'\n%s\n", n.log, body)
	if err := os.WriteFile(filepath.Join(n.bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// installs is a tool body that creates the agent binary, as a successful
// package install does.
func (n node) installs() string {
	return fmt.Sprintf(`[ "$1" = install ] && : > '%s'; exit 0`, filepath.Join(n.root, "usr/bin/aks-node-controller"))
}

// failsUntil is a tool body that exits 100 on its first k calls, then
// behaves like then.
func (n node) failsUntil(k int, then string) string {
	count := n.log + ".count"
	return fmt.Sprintf(`c=0; [ -f '%[1]s' ] && read -r c < '%[1]s'; c=$((c+1)); echo "$c" > '%[1]s'
[ "$c" -gt %[2]d ] || { echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2; exit 100; }
%[3]s`, count, k, then)
}

// calls returns the recorded argv of every fake tool call, in order.
func (n node) calls(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile(n.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		calls = append(calls, strings.Split(strings.TrimSuffix(line, "\x00"), "\x00"))
	}
	return calls
}

const (
	version = "202604.01.1"
	// debFull and rpmFull are the full package versions of version, as the
	// real repositories name them.
	debFull = "202604.01.1-ubuntu22.04u1"
	rpmFull = "202604.01.1-1.azl3"
)

// madison is what apt-cache madison prints for a repository holding, among
// others, a version that a glob pin of 202604.01.1 would also match.
const madison = ` aks-node-controller | 202604.01.10-ubuntu22.04u1 | https://packages.microsoft.com/ubuntu/22.04/prod jammy/main amd64 Packages
 aks-node-controller | ` + debFull + ` | https://packages.microsoft.com/ubuntu/22.04/prod jammy/main amd64 Packages
 aks-node-controller | 202604.01.0-ubuntu22.04u1 | https://packages.microsoft.com/ubuntu/22.04/prod jammy/main amd64 Packages
`

// dnfList is what dnf list --showduplicates prints for the same.
const dnfList = `Last metadata expiration check: 0:00:01 ago on Tue Dec  1 09:00:00 2026.
Available Packages
aks-node-controller.x86_64   202604.01.0-1.azl3    azurelinux-official-base
aks-node-controller.x86_64   ` + rpmFull + `    azurelinux-official-base
aks-node-controller.x86_64   202604.01.10-1.azl3   azurelinux-official-base
`

// lists is a tool body that prints listing for a list command (apt-cache,
// or dnf/tdnf list) and otherwise behaves like then.
func lists(listing, then string) string {
	return fmt.Sprintf("case \"$1\" in list|madison) printf '%%s' '%s'; exit 0;; esac\n%s", listing, then)
}

func aptCalls(src string) [][]string {
	env := []string{"env", "DEBIAN_FRONTEND=noninteractive"}
	dpkg := []string{"dpkg", "--configure", "-a", "--force-confdef", "--force-confold"}
	update := []string{"apt-get", "update", "-o", "Dpkg::Options::=--force-confold",
		"-o", "Dir::Etc::sourcelist=" + src, "-o", "Dir::Etc::sourceparts=-"}
	madison := []string{"apt-cache", "madison", "aks-node-controller"}
	install := []string{"apt-get", "install", "-y", "--allow-downgrades",
		"-o", "Dpkg::Options::=--force-confold", "aks-node-controller=" + debFull}
	return [][]string{
		append(env[:2:2], dpkg...), dpkg,
		append(env[:2:2], update...), update,
		append(env[:2:2], madison...), madison,
		append(env[:2:2], install...), install,
	}
}

func TestInstallAPT(t *testing.T) {
	tests := []struct {
		name    string
		sources []string
		want    string // chosen source file under root; "" means error
	}{
		{name: "list", sources: []string{"etc/apt/sources.list.d/microsoft-prod.list"}, want: "etc/apt/sources.list.d/microsoft-prod.list"},
		{name: "deb822", sources: []string{"etc/apt/sources.list.d/microsoft-prod.sources"}, want: "etc/apt/sources.list.d/microsoft-prod.sources"},
		{name: "both", sources: []string{"etc/apt/sources.list.d/microsoft-prod.list", "etc/apt/sources.list.d/microsoft-prod.sources"}, want: "etc/apt/sources.list.d/microsoft-prod.list"},
		{name: "neither", sources: []string{"etc/apt/sources.list.d/other.list"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, "ID=ubuntu\nVERSION_ID=\"22.04\"\n", tt.sources...)
			n.tool(t, "dpkg", "exit 0")
			n.tool(t, "apt-get", n.installs())
			n.tool(t, "apt-cache", lists(madison, "exit 0"))

			bin, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root, Backoff: time.Millisecond}, version)
			if tt.want == "" {
				if err == nil {
					t.Fatal("Install = nil, want an error for a missing apt source")
				}
				if got := n.calls(t); len(got) != 0 {
					t.Errorf("Install ran %q, want no commands", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Install: %v", err)
			}
			if want := filepath.Join(n.root, "usr/bin/aks-node-controller"); bin != want {
				t.Errorf("Install = %q, want %q", bin, want)
			}
			if diff := cmp.Diff(aptCalls(filepath.Join(n.root, tt.want)), n.calls(t)); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInstallDNF(t *testing.T) {
	tests := []struct {
		name      string
		osRelease string
		tools     []string // fake tools on PATH besides env
		want      string   // the manager that must run
	}{
		{name: "azurelinux-dnf", osRelease: "ID=azurelinux\nVERSION_ID=\"3.0\"\n", tools: []string{"dnf", "tdnf"}, want: "dnf"},
		{name: "azurelinux-tdnf", osRelease: "ID=azurelinux\nVERSION_ID=\"3.0\"\n", tools: []string{"tdnf"}, want: "tdnf"},
		{name: "mariner-tdnf", osRelease: "ID=mariner\n", tools: []string{"tdnf"}, want: "tdnf"},
		{name: "usr-lib-os-release", osRelease: "", tools: []string{"dnf"}, want: "dnf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, tt.osRelease)
			if tt.osRelease == "" {
				os.Remove(filepath.Join(n.root, "etc/os-release"))
				writeFile(t, filepath.Join(n.root, "usr/lib/os-release"), "ID=azurelinux\n")
			}
			for _, tool := range tt.tools {
				n.tool(t, tool, lists(dnfList, n.installs()))
			}
			if _, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root}, version); err != nil {
				t.Fatalf("Install: %v", err)
			}
			want := [][]string{
				{tt.want, "list", "--refresh", "--showduplicates", "aks-node-controller"},
				{tt.want, "install", "-y", "--allowerasing", "aks-node-controller-" + rpmFull},
			}
			if diff := cmp.Diff(want, n.calls(t)); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInstallRefusesBeforeRunning(t *testing.T) {
	tests := []struct {
		name      string
		osRelease string
		version   string
		want      error
	}{
		{name: "flatcar", osRelease: "ID=flatcar\n", version: version, want: ErrUnsupportedOS},
		{name: "acl-variant", osRelease: "ID=azurelinux\nVARIANT_ID=azurecontainerlinux\n", version: version, want: ErrUnsupportedOS},
		{name: "debian", osRelease: "ID=debian\n", version: version, want: ErrUnsupportedOS},
		{name: "glob", osRelease: "ID=ubuntu\n", version: version + "*", want: hotfix.ErrMalformedVersion},
		{name: "option", osRelease: "ID=ubuntu\n", version: "--allow-unauthenticated", want: hotfix.ErrMalformedVersion},
		{name: "second-package", osRelease: "ID=ubuntu\n", version: version + " evil", want: hotfix.ErrMalformedVersion},
		{name: "dev", osRelease: "ID=azurelinux\n", version: "dev", want: hotfix.ErrMalformedVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, tt.osRelease, "etc/apt/sources.list.d/microsoft-prod.list")
			for _, tool := range []string{"dpkg", "apt-get", "dnf", "tdnf"} {
				n.tool(t, tool, n.installs())
			}
			_, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root}, tt.version)
			if !errors.Is(err, tt.want) {
				t.Errorf("Install(%q) = %v, want %v", tt.version, err, tt.want)
			}
			if got := n.calls(t); len(got) != 0 {
				t.Errorf("Install(%q) ran %q, want no commands", tt.version, got)
			}
		})
	}
}

func TestInstallRetriesFailingCommand(t *testing.T) {
	n := newNode(t, "ID=ubuntu\n", "etc/apt/sources.list.d/microsoft-prod.list")
	n.tool(t, "dpkg", "exit 0")
	n.tool(t, "apt-cache", lists(madison, "exit 0"))
	n.tool(t, "apt-get", `[ "$1" = install ] || exit 0
`+n.failsUntil(2, n.installs()))
	if _, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root, Backoff: time.Millisecond}, version); err != nil {
		t.Fatalf("Install: %v", err)
	}
	installs := 0
	for _, c := range n.calls(t) {
		if c[0] == "apt-get" && c[1] == "install" {
			installs++
		}
	}
	if installs != 3 {
		t.Errorf("apt-get install ran %d times, want 3", installs)
	}
}

func TestInstallAllAttemptsFail(t *testing.T) {
	n := newNode(t, "ID=ubuntu\n", "etc/apt/sources.list.d/microsoft-prod.list")
	n.tool(t, "dpkg", "exit 0")
	n.tool(t, "apt-get", n.failsUntil(99, "exit 0"))
	_, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root, Backoff: time.Millisecond}, version)
	var ce *proc.CmdError
	if !errors.As(err, &ce) {
		t.Fatalf("Install = %v, want a *proc.CmdError", err)
	}
	if got := ce.ExitCode(); got != 100 {
		t.Errorf("exit code = %d, want 100", got)
	}
	if !strings.Contains(err.Error(), "5 attempts") {
		t.Errorf("Install = %q, want the attempt count", err)
	}
	if !strings.Contains(string(ce.Output), "Could not get lock") {
		t.Errorf("Output = %q, want apt's message", ce.Output)
	}
	var updates int
	for _, c := range n.calls(t) {
		if c[0] == "apt-get" {
			if c[1] != "update" {
				t.Errorf("ran %q after update failed", c)
			}
			updates++
		}
	}
	if updates != 5 {
		t.Errorf("apt-get update ran %d times, want 5", updates)
	}
}

func TestInstallMissingBinary(t *testing.T) {
	n := newNode(t, "ID=mariner\n")
	n.tool(t, "tdnf", lists(dnfList, "exit 0"))
	if _, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root}, version); err == nil {
		t.Error("Install = nil, want an error when the binary is not installed")
	}
}

// TestInstallPicksTheExactVersion: the repositories' listing decides the
// full version; none or several matches are their own errors, and nothing
// is installed then.
func TestInstallPicksTheExactVersion(t *testing.T) {
	tests := []struct {
		name    string
		listing string
		want    error
	}{
		{name: "none", listing: " aks-node-controller | 202604.01.10-ubuntu22.04u1 | x\n aks-node-controller | 202604.01.2-ubuntu22.04u1 | x\n", want: ErrNoPackage},
		{name: "empty", listing: "", want: ErrNoPackage},
		{name: "two-revisions", listing: " aks-node-controller | 202604.01.1-ubuntu22.04u1 | x\n aks-node-controller | 202604.01.1-ubuntu22.04u2 | x\n", want: ErrAmbiguousPackage},
		{name: "hostile-version", listing: " aks-node-controller | --allow-unauthenticated | x\n aks-node-controller | 202604.01.1;reboot | x\n", want: ErrNoPackage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, "ID=ubuntu\n", "etc/apt/sources.list.d/microsoft-prod.list")
			n.tool(t, "dpkg", "exit 0")
			n.tool(t, "apt-get", n.installs())
			n.tool(t, "apt-cache", lists(tt.listing, "exit 0"))
			_, err := Install(t.Context(), ExecRunner{}, Config{Root: n.root, Backoff: time.Millisecond}, version)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Install = %v, want %v", err, tt.want)
			}
			for _, c := range n.calls(t) {
				if c[0] == "apt-get" && c[1] == "install" {
					t.Errorf("installed %q after %v", c, err)
				}
			}
		})
	}
}
