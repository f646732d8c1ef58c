package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/explain"
	"nodehotfix/internal/node/facts"
	"nodehotfix/internal/node/handover"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/provision"
	"nodehotfix/internal/node/report"
	"nodehotfix/internal/release"
)

const (
	baked  = "202604.01.0"
	target = "202604.01.1"
)

// node is a node root with recording steps.
type node struct {
	t        *testing.T
	root     layout.Root
	calls    []string
	provided []provisionArgs
	events   []string
	reports  []report.Outcome
	out      bytes.Buffer
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, root: layout.Root(t.TempDir())}
	for _, d := range []string{n.root.Containers(), filepath.Dir(n.root.ProvisionJSON())} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write(n.root.NBCCmd(), "echo bootstrap\n", 0o600)
	return n
}

func (n *node) write(path, content string, mode os.FileMode) {
	n.t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) pointer(p hotfix.Pointer) {
	n.t.Helper()
	data, err := p.MarshalJSON()
	if err != nil {
		n.t.Fatal(err)
	}
	n.write(n.root.Pointer(), string(data), 0o644)
}

// stageHotfix stages a shell-script agent reporting target; its provision
// runs body (with the node root as $1).
func (n *node) stageHotfix(body string) {
	n.write(n.root.HotfixBinary(), `#!/bin/sh
case "$1" in
version) echo `+target+`;;
provision) root=`+string(n.root)+`
`+body+`
;;
esac
`, 0o755)
}

// startsBootstrap is a hotfix provision that records the start as provision
// does, then runs the rest.
func startsBootstrap(rest string) string {
	return `printf '{"LaunchID":"%s","Phase":"bootstrap","AgentVersion":"` + target + `"}' "$AKS_NODE_CONTROLLER_LAUNCH_ID" >"$root/var/log/azure/aks/provision-started.json"
` + rest
}

func (n *node) launch() int {
	n.t.Helper()
	return Run(n.t.Context(), n.config())
}

// config is a launch of the node with recording steps.
func (n *node) config() Config {
	return Config{
		Root: n.root, Version: baked, HostnameWait: -1, Stdout: &n.out, Stderr: &n.out, StartTimeout: 300 * time.Millisecond,
		steps: &steps{
			checkHotfix: func(context.Context) report.Step {
				n.calls = append(n.calls, "check-hotfix")
				return report.Step{Outcome: "noHotfixAvailable", Elapsed: 3 * time.Millisecond}
			},
			downloadHotfix: func(context.Context) report.Step {
				n.calls = append(n.calls, "download-hotfix")
				return report.Step{Outcome: "alreadyStaged", Route: "none"}
			},
			report: func(_ context.Context, o report.Outcome) { n.reports = append(n.reports, o) },
			bakedProvision: func(_ context.Context, p provisionArgs) int {
				n.calls = append(n.calls, "baked-provision")
				n.provided = append(n.provided, p)
				return 0
			},
			event: func(level, msg string) { n.events = append(n.events, level+" "+msg) },
		},
	}
}

func TestRunGateAndFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		features string // "" = no file
		pointer  bool
		noConfig bool
		want     []string
		// events are the launcher's events: none without a pointer
		// (the reference's launcher writes none; check-hotfix has its
		// own), the choice with one.
		events []string
	}{
		{name: "no-config", noConfig: true, features: "ENABLE_PROVISIONING_HOTFIX=true\n", want: nil},
		{name: "flag-absent", want: []string{"baked-provision"}},
		{name: "flag-true", features: "ENABLE_PROVISIONING_HOTFIX=true\n", want: []string{"check-hotfix", "baked-provision"}},
		{name: "flag-quoted", features: "ENABLE_PROVISIONING_HOTFIX=\"true\"\n", want: []string{"baked-provision"}},
		{name: "flag-crlf", features: "ENABLE_PROVISIONING_HOTFIX=true\r\n", want: []string{"baked-provision"}},
		{name: "pointer-flag-off", pointer: true, want: []string{"download-hotfix", "baked-provision"},
			events: []string{"Informational launcher choice=baked reason=noHotfixForBase"}},
		{name: "flag-and-pointer", features: "ENABLE_PROVISIONING_HOTFIX=true\n", pointer: true, want: []string{"check-hotfix", "download-hotfix", "baked-provision"},
			events: []string{"Informational launcher choice=baked reason=noHotfixForBase"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			if tt.noConfig {
				os.Remove(n.root.NBCCmd())
			}
			if tt.features != "" {
				n.write(n.root.EnabledFeatures(), tt.features, 0o600)
			}
			if tt.pointer {
				n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}})
			}
			if code := n.launch(); code != 0 {
				t.Fatalf("Run = %d, want 0\n%s", code, n.out.String())
			}
			if !slices.Equal(n.calls, tt.want) {
				t.Errorf("calls = %v, want %v", n.calls, tt.want)
			}
			var events []string
			for _, e := range n.events {
				events = append(events, strings.SplitN(e, " detail=", 2)[0])
			}
			if !slices.Equal(events, tt.events) {
				t.Errorf("events = %q, want %q", n.events, tt.events)
			}
		})
	}
}

// TestRunFeaturesNeverReachThisProcess: a flag that names a shell or loader
// control variable (FUNCNEST=1 killed the bash launcher) is refused from the
// bootstrap's environment and never set in this process's; the other flags
// reach the bootstrap only.
func TestRunFeaturesNeverReachThisProcess(t *testing.T) {
	n := newNode(t)
	n.write(n.root.EnabledFeatures(), "FUNCNEST=1\nLD_PRELOAD=/tmp/evil.so\nENABLE_PROVISIONING_HOTFIX=true\nMY_FLAG=on\n", 0o600)
	if code := n.launch(); code != 0 {
		t.Fatalf("Run = %d\n%s", code, n.out.String())
	}
	if len(n.provided) != 1 {
		t.Fatalf("provisioned %d times, want 1", len(n.provided))
	}
	env := n.provided[0].Env
	if want := []string{"ENABLE_PROVISIONING_HOTFIX=true", "MY_FLAG=on"}; !slices.Equal(env, want) {
		t.Errorf("bootstrap env = %v, want %v", env, want)
	}
	for _, k := range []string{"FUNCNEST", "LD_PRELOAD", "MY_FLAG"} {
		if _, set := os.LookupEnv(k); set {
			t.Errorf("%s set in the agent's own environment", k)
		}
	}
}

func TestRunHotfixAndFallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		body         string
		wantCode     int
		wantFallback string // "" = no fallback
		wantStatus   string // provision.json ExitCode written by launch ("" = none)
	}{
		{name: "succeeds", body: startsBootstrap("exit 0"), wantCode: 0},
		{name: "bootstrap-failed", body: startsBootstrap("exit 7"), wantCode: 7},
		{name: "crash-before-bootstrap", body: "echo 'panic: boom' >&2; exit 2", wantFallback: "exited with code 2"},
		{name: "could-not-start", body: "exit 240", wantFallback: "exited with code 240"},
		{name: "killed-before-bootstrap", body: "kill -9 $$", wantFallback: "killed by killed"},
		{name: "killed-after-bootstrap", body: startsBootstrap("kill -9 $$"), wantCode: 137, wantStatus: "137"},
		// Its status written, then killed lingering (an OOM kill, a
		// helper it waited on): the status it wrote stands.
		{name: "killed-after-its-status", body: startsBootstrap(`mkdir -p "$root/opt/azure/containers"; echo '{"ExitCode":"0"}' >"$root/var/log/azure/aks/provision.json"; : >"$root/opt/azure/containers/provision.complete"; kill -9 $$`), wantCode: 0, wantStatus: "0"},
		{name: "reference-style-bootstrap-failed", body: `mkdir -p "$root/opt/azure/containers"; echo '{"ExitCode":"5"}' >"$root/var/log/azure/aks/provision.json"; : >"$root/opt/azure/containers/provision.complete"; exit 5`, wantCode: 5},
		{name: "reference-style-crash", body: "exit 2", wantFallback: "exited with code 2"},
		{name: "hung-in-preflight", body: `printf '{"LaunchID":"%s","Phase":"preflight"}' "$AKS_NODE_CONTROLLER_LAUNCH_ID" >"$root/var/log/azure/aks/provision-started.json"; exec sleep 600`, wantFallback: "did not start the bootstrap within 300ms"},
		{name: "stale-start-record", body: `printf '{"LaunchID":"an-earlier-boot"}' >"$root/var/log/azure/aks/provision-started.json"; exit 3`, wantFallback: "exited with code 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix(tt.body)
			code := n.launch()
			if !strings.Contains(n.out.String(), "Using hotfix binary: "+n.root.HotfixBinary()) {
				t.Fatalf("hotfix not chosen:\n%s", n.out.String())
			}
			if tt.wantFallback == "" {
				if code != tt.wantCode || len(n.provided) != 0 {
					t.Fatalf("Run = %d with %d baked provisions, want %d and none\n%s", code, len(n.provided), tt.wantCode, n.out.String())
				}
			} else {
				if len(n.provided) != 1 || !strings.Contains(n.provided[0].Fallback, tt.wantFallback) {
					t.Fatalf("baked provisions = %+v, want one with fallback %q\n%s", n.provided, tt.wantFallback, n.out.String())
				}
				if last := n.events[len(n.events)-1]; !strings.HasPrefix(last, "Error launcher choice=baked fallback=true") {
					t.Errorf("last event = %q, want the fallback", last)
				}
			}
			data, err := os.ReadFile(n.root.ProvisionJSON())
			switch {
			case tt.wantStatus == "" && err == nil && !strings.HasPrefix(tt.name, "reference-style"):
				t.Errorf("launch wrote provision.json %s, want none (the agent that provisions writes it)", data)
			case tt.wantStatus != "":
				var st provision.Status
				if err := json.Unmarshal(data, &st); err != nil || st.ExitCode != tt.wantStatus {
					t.Errorf("provision.json = %s (%v), want ExitCode %s", data, err, tt.wantStatus)
				}
			}
		})
	}
}

// TestRunRefusesTargetOfAnUnreadableRevokedList: a pointer whose revoked
// list has an entry that is not a version cannot say whether the target is
// revoked; launch runs the baked agent and says why.
func TestRunRefusesTargetOfAnUnreadableRevokedList(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	n.write(n.root.Pointer(), `{"hotfixes":{"202604.01":"`+target+`"},"revoked":["202604.01.9",{"v":1}]}`, 0o644)
	n.stageHotfix(startsBootstrap("exit 0"))
	if code := n.launch(); code != 0 || !slices.Equal(n.calls, []string{"download-hotfix", "baked-provision"}) {
		t.Fatalf("Run = %d, calls %v\n%s", code, n.calls, n.out.String())
	}
	if !strings.Contains(n.out.String(), "Using VHD-baked binary: ") || !strings.Contains(n.out.String(), "revoked list is unreadable") {
		t.Errorf("output lacks the baked choice and its reason:\n%s", n.out.String())
	}
}

// TestRunRefusesRevokedEvenIfDownloadFailed: download-hotfix did nothing
// (failed, busy); launch decides on the files as they are and never runs a
// revoked staged binary.
func TestRunRefusesRevokedEvenIfDownloadFailed(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Revoked: []string{target}})
	n.stageHotfix(startsBootstrap("exit 0"))
	if code := n.launch(); code != 0 || !slices.Equal(n.calls, []string{"download-hotfix", "baked-provision"}) {
		t.Fatalf("Run = %d, calls %v\n%s", code, n.calls, n.out.String())
	}
	if !strings.Contains(n.out.String(), "Using VHD-baked binary: ") || !strings.Contains(n.out.String(), "is revoked") {
		t.Errorf("output lacks the baked choice and its reason:\n%s", n.out.String())
	}
}

// TestExplainAgreesWithLaunch: in every node state, explain's verdict is
// the agent launch chooses.
func TestExplainAgreesWithLaunch(t *testing.T) {
	t.Parallel()
	states := map[string]func(n *node){
		"nothing":      func(*node) {},
		"pointer-only": func(n *node) { n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}}) },
		"staged-only":  func(n *node) { n.stageHotfix("exit 0") },
		"staged-target": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 0")
		},
		"revoked": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Revoked: []string{target}})
			n.stageHotfix("exit 0")
		},
		"other-base": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}})
			n.stageHotfix("exit 0")
		},
		"not-newer": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": baked}})
			n.stageHotfix("exit 0")
		},
		"group-writable": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 0")
			os.Chmod(n.root.HotfixBinary(), 0o775)
		},
		"not-executable": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 0")
			os.Chmod(n.root.HotfixBinary(), 0o644)
		},
		"symlinked-binary": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 0")
			os.Rename(n.root.HotfixBinary(), n.root.HotfixBinary()+".real")
			os.Symlink(n.root.HotfixBinary()+".real", n.root.HotfixBinary())
		},
		"keys-unsigned": func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 0")
			n.write(n.root.ReleaseKeys(), "not a key\n", 0o644)
		},
		"invalid-pointer": func(n *node) { n.write(n.root.Pointer(), "{", 0o644); n.stageHotfix("exit 0") },
		"unreadable-revocation": func(n *node) {
			n.write(n.root.Pointer(), `{"hotfixes":{"202604.01":"`+target+`"},"revoked":["202604.01.x"]}`, 0o644)
			n.stageHotfix("exit 0")
		},
	}
	for name, setup := range states {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			setup(n)
			d := Choose(t.Context(), facts.Config{Root: n.root, Baked: baked})
			r := explain.Run(t.Context(), explain.Config{Root: n.root, Version: baked})
			if r.Binary != d.Agent || r.Reason != d.Reason {
				t.Errorf("explain says %s (%s), launch chooses %s (%s)", r.Binary, r.Reason, d.Agent, d.Reason)
			}
			n.launch()
			chose := hotfix.AgentBaked
			if strings.Contains(n.out.String(), "Using hotfix binary: ") {
				chose = hotfix.AgentHotfix
			}
			if chose != r.Binary {
				t.Errorf("launch ran the %s agent, explain said %s\n%s", chose, r.Binary, n.out.String())
			}
		})
	}
}

// TestRunHandover: launch records that it provisions from here on (the
// shim's cue never to provision again); if it cannot, it provisions nothing
// and leaves the node to the shim's fallback.
func TestRunHandover(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	if code := n.launch(); code != 0 {
		t.Fatalf("Run = %d", code)
	}
	data, err := os.ReadFile(handover.LaunchFile(n.root))
	if err != nil || !strings.Contains(string(data), `"Agent":"baked"`) {
		t.Errorf("launch.json = %s, %v", data, err)
	}

	m := newNode(t)
	if err := os.MkdirAll(handover.LaunchFile(m.root), 0o755); err != nil {
		t.Fatal(err)
	}
	if code := m.launch(); code != provision.ExitFailFast || len(m.provided) != 0 {
		t.Fatalf("Run = %d after %d provisions, want %d and none", code, len(m.provided), provision.ExitFailFast)
	}
}

// TestRunQuotesControlCharacters: a staged binary whose `version` prints
// terminal escapes cannot put them on the operator's terminal.
func TestRunQuotesControlCharacters(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
	n.write(n.root.HotfixBinary(), "#!/bin/sh\nprintf '\\033[2J\\033]0;owned\\007'\n", 0o755)
	if code := n.launch(); code != 0 {
		t.Fatalf("Run = %d\n%s", code, n.out.String())
	}
	if strings.ContainsAny(n.out.String(), "\x1b\x07") {
		t.Errorf("launch printed raw control characters: %q", n.out.String())
	}
	if !strings.Contains(n.out.String(), `\x1b[2J`) {
		t.Errorf("the refused version is not shown quoted:\n%s", n.out.String())
	}
	for _, e := range n.events {
		if strings.ContainsAny(e, "\x1b\x07") {
			t.Errorf("event carries raw control characters: %q", e)
		}
	}
}

// TestRunReports: with the flag on, launch reports once after provisioning,
// what it chose and how it went (the control cohort too); with the flag off
// it reports nothing.
func TestRunReports(t *testing.T) {
	t.Parallel()
	flagOn := "ENABLE_PROVISIONING_HOTFIX=true\n"
	tests := []struct {
		name     string
		features string
		setup    func(n *node)
		want     []report.Outcome
	}{
		{name: "flag-off", setup: func(*node) {}},
		{name: "control", features: flagOn, setup: func(*node) {}, want: []report.Outcome{{
			Baked: baked, Agent: hotfix.AgentBaked, AgentVersion: baked, Decision: hotfix.ReasonNoPointer,
			Check: report.Step{Outcome: "noHotfixAvailable", Elapsed: 3 * time.Millisecond},
		}}},
		{name: "hotfix", features: flagOn, setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix(startsBootstrap("exit 4"))
		}, want: []report.Outcome{{
			Baked: baked, Agent: hotfix.AgentHotfix, AgentVersion: target, Hotfix: target, Requested: target, Decision: hotfix.ReasonHotfix, ExitCode: 4,
			Check:    report.Step{Outcome: "noHotfixAvailable", Elapsed: 3 * time.Millisecond},
			Download: report.Step{Outcome: "alreadyStaged", Route: "none"},
		}}},
		{name: "fallback", features: flagOn, setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 2")
		}, want: []report.Outcome{{
			Baked: baked, Agent: hotfix.AgentBaked, AgentVersion: baked, Hotfix: target, Requested: target, Decision: hotfix.ReasonHotfix,
			Fallback: true, FallbackReason: "exited with code 2",
			Check:    report.Step{Outcome: "noHotfixAvailable", Elapsed: 3 * time.Millisecond},
			Download: report.Step{Outcome: "alreadyStaged", Route: "none"},
		}}},
		// A hotfix that "succeeds" without ever starting the bootstrap
		// provisioned nothing: a failure, fallen back from in this boot.
		{name: "success without a bootstrap", features: flagOn, setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.stageHotfix("exit 0")
		}, want: []report.Outcome{{
			Baked: baked, Agent: hotfix.AgentBaked, AgentVersion: baked, Hotfix: target, Requested: target, Decision: hotfix.ReasonHotfix,
			Fallback: true, FallbackReason: "exited 0 without starting the bootstrap or writing provision.complete",
			Check:    report.Step{Outcome: "noHotfixAvailable", Elapsed: 3 * time.Millisecond},
			Download: report.Step{Outcome: "alreadyStaged", Route: "none"},
		}}},
		// Served a hotfix it did not run (here, its staged copy is another
		// version): the report names what was requested, so the service
		// counts the refusal against that release.
		{name: "refused", features: flagOn, setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			n.write(n.root.HotfixBinary(), "#!/bin/sh\necho 202604.01.9\n", 0o755)
		}, want: []report.Outcome{{
			Baked: baked, Agent: hotfix.AgentBaked, AgentVersion: baked, Requested: target, Decision: hotfix.ReasonStagedMismatch,
			Check:    report.Step{Outcome: "noHotfixAvailable", Elapsed: 3 * time.Millisecond},
			Download: report.Step{Outcome: "alreadyStaged", Route: "none"},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			if tt.features != "" {
				n.write(n.root.EnabledFeatures(), tt.features, 0o600)
			}
			tt.setup(n)
			n.launch()
			for i := range n.reports {
				n.reports[i].ProvisionDuration = 0 // wall time
			}
			if diff := cmp.Diff(tt.want, n.reports); diff != "" {
				t.Errorf("reports (-want +got):\n%s\n%s", diff, n.out.String())
			}
		})
	}
}

// TestRunAppliesEmbeddedHotfix: once it chose the hotfix agent, launch runs
// `<hotfix> apply-embedded-hotfix` before its provision, as the reference
// launcher does; a failing one (an agent too old for the command, a bad
// payload) is logged and provisioning goes on. The baked agent is never
// asked.
func TestRunAppliesEmbeddedHotfix(t *testing.T) {
	t.Parallel()
	for name, exit := range map[string]int{"applies": 0, "fails": 3} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			calls := filepath.Join(string(n.root), "calls")
			n.write(n.root.HotfixBinary(), fmt.Sprintf(`#!/bin/sh
echo "$1" >>%s
case "$1" in
version) echo %s;;
apply-embedded-hotfix) exit %d;;
provision) exit 0;;
esac
`, calls, target, exit), 0o755)
			if code := n.launch(); code != 0 {
				t.Fatalf("Run = %d, want the hotfix's provision's 0\n%s", code, n.out.String())
			}
			data, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Fields(string(data))
			if i := slices.Index(got, "apply-embedded-hotfix"); i < 0 || i > slices.Index(got, "provision") {
				t.Errorf("the hotfix agent was called with %v, want apply-embedded-hotfix before provision", got)
			}
			want := "ANC apply-embedded-hotfix completed"
			if exit != 0 {
				want = "ANC apply-embedded-hotfix failed\n"
			}
			if !strings.Contains(n.out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, n.out.String())
			}
		})
	}
}

// TestApplyEmbeddedKillsAHungChild: a hotfix agent whose
// apply-embedded-hotfix hangs is killed at the step's limit (here the
// context's, shorter than embedhotfix.Budget) and provisioning goes on.
func TestApplyEmbeddedKillsAHungChild(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	n.write(n.root.HotfixBinary(), "#!/bin/sh\nexec sleep 30\n", 0o755)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	cfg := n.config()
	cfg.defaults()
	start := time.Now()
	applyEmbedded(ctx, cfg, n.root.HotfixBinary())
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("applyEmbedded returned after %v, want soon after the limit", took)
	}
	if !strings.Contains(n.out.String(), "ANC apply-embedded-hotfix failed\n") {
		t.Errorf("output lacks the failure line:\n%s", n.out.String())
	}
}

// TestSelectAgent: the helper script's flow runs the same steps and the same
// decision as Run, applies the chosen hotfix's embedded payload, and never
// provisions, reports or records a handover: the launcher that called it
// provisions.
func TestSelectAgent(t *testing.T) {
	t.Parallel()
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hotfix-staged=%v", staged), func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			n.write(n.root.EnabledFeatures(), "ENABLE_PROVISIONING_HOTFIX=true\nMY_FLAG=on\n", 0o600)
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			calls := filepath.Join(string(n.root), "calls")
			if staged {
				n.write(n.root.HotfixBinary(), fmt.Sprintf("#!/bin/sh\necho \"$1\" >>%s\n[ \"$1\" = version ] && echo %s\nexit 0\n", calls, target), 0o755)
			}
			cfg := n.config()
			sel := SelectAgent(n.t.Context(), cfg)
			want, wantAgent := n.root.BakedBinary(), hotfix.AgentBaked
			if staged {
				want, wantAgent = n.root.HotfixBinary(), hotfix.AgentHotfix
			}
			if sel.Path != want || sel.Decision.Agent != wantAgent {
				t.Errorf("SelectAgent = %s (%s), want %s\n%s", sel.Path, sel.Decision.Agent, want, n.out.String())
			}
			if env := []string{"ENABLE_PROVISIONING_HOTFIX=true", "MY_FLAG=on"}; !slices.Equal(sel.Env, env) {
				t.Errorf("Env = %v, want %v", sel.Env, env)
			}
			if want := []string{"check-hotfix", "download-hotfix"}; !slices.Equal(n.calls, want) {
				t.Errorf("calls = %v, want %v", n.calls, want)
			}
			if len(n.reports) != 0 {
				t.Errorf("sent %d reports, want none", len(n.reports))
			}
			if _, err := os.Stat(handover.LaunchFile(n.root)); err == nil {
				t.Error("recorded a handover; the caller's launcher provisions")
			}
			data, _ := os.ReadFile(calls)
			if applied := strings.Contains(string(data), "apply-embedded-hotfix"); applied != staged {
				t.Errorf("apply-embedded-hotfix run = %v, want %v (calls %q)", applied, staged, data)
			}
			if strings.Contains(string(data), "provision") && !strings.Contains(string(data), "apply-embedded") {
				t.Errorf("the hotfix was asked to provision: %q", data)
			}
		})
	}
}

// TestRunReferenceLogLines: the launcher lines the reference's e2e and log
// queries look for, each at its moment.
func TestRunReferenceLogLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		checkFails, dlFails bool
		provisionCode       int
		want, wantNot       []string
	}{
		{
			name: "steps-succeed",
			want: []string{
				"ENABLE_PROVISIONING_HOTFIX=true; running check-hotfix to refresh hotfix pointer\n",
				"ANC check-hotfix completed; hotfix pointer refresh attempted\n",
				"Found ANC hotfix config at ",
				"ANC download-hotfix completed; binary selection follows\n",
				"Using VHD-baked binary: ",
				"aks-node-controller completed successfully\n",
			},
			wantNot: []string{"failed"},
		},
		{
			name: "steps-fail", checkFails: true, dlFails: true, provisionCode: 3,
			want: []string{
				"ANC check-hotfix failed; continuing (fail-open)\n",
				"ANC download-hotfix failed; binary selection follows\n",
				"aks-node-controller exited with code 3\n",
			},
			wantNot: []string{"completed successfully"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			n.write(n.root.EnabledFeatures(), "ENABLE_PROVISIONING_HOTFIX=true\n", 0o600)
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			cfg := n.config()
			cfg.steps.checkHotfix = func(context.Context) report.Step { return report.Step{Outcome: "x", Failed: tt.checkFails} }
			cfg.steps.downloadHotfix = func(context.Context) report.Step { return report.Step{Outcome: "y", Failed: tt.dlFails} }
			cfg.steps.bakedProvision = func(context.Context, provisionArgs) int { return tt.provisionCode }
			if code := Run(n.t.Context(), cfg); code != tt.provisionCode {
				t.Fatalf("Run = %d, want %d", code, tt.provisionCode)
			}
			out := n.out.String()
			last := 0
			for _, w := range tt.want {
				i := strings.Index(out[last:], w)
				if i < 0 {
					t.Fatalf("output lacks %q after offset %d (in order):\n%s", w, last, out)
				}
				last += i + len(w)
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestRunStartedReport: with the flag on, launch sends the started report
// of the hotfix it is about to run, and runs the agent without waiting for
// it (here the report does not end until the agent's provision has run);
// the outcome report waits for it. The baked agent, or the flag off, sends
// none.
func TestRunStartedReport(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		features string
		hotfix   bool
		want     []report.Start
	}{
		{name: "hotfix", features: "ENABLE_PROVISIONING_HOTFIX=true\n", hotfix: true, want: []report.Start{{Baked: baked, Hotfix: target, Check: 3 * time.Millisecond}}},
		{name: "flag-off", hotfix: true},
		{name: "baked", features: "ENABLE_PROVISIONING_HOTFIX=true\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			if tt.features != "" {
				n.write(n.root.EnabledFeatures(), tt.features, 0o600)
			}
			if tt.hotfix {
				n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			}
			ran := filepath.Join(string(n.root), "agent-ran")
			n.stageHotfix(startsBootstrap(`touch "$root/agent-ran"; exit 0`))
			var order []string
			var got []report.Start
			cfg := n.config()
			cfg.steps.started = func(ctx context.Context, s report.Start) {
				got = append(got, s)
				// The agent runs while this report is still out.
				deadline := time.Now().Add(10 * time.Second)
				for {
					if _, err := os.Stat(ran); err == nil {
						order = append(order, "started report done after the agent ran")
						return
					}
					if time.Now().After(deadline) {
						order = append(order, "started report gave up: the agent did not run while it was out")
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			sendOutcome := cfg.steps.report
			cfg.steps.report = func(ctx context.Context, o report.Outcome) {
				order = append(order, "outcome")
				sendOutcome(ctx, o)
			}
			Run(t.Context(), cfg)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("started reports (-want +got):\n%s\n%s", diff, n.out.String())
			}
			wantOrder := []string{"outcome"}
			if tt.want != nil {
				wantOrder = []string{"started report done after the agent ran", "outcome"}
			}
			if tt.features == "" {
				wantOrder = nil
			}
			if diff := cmp.Diff(wantOrder, order); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

// signedPointer installs a release key and points at target with a signed
// release of the staged binary's bytes, declaring launch records or not.
func (n *node) signedPointer(launchRecords bool) {
	n.t.Helper()
	pub, priv, err := release.GenerateKey(rand.Reader)
	if err != nil {
		n.t.Fatal(err)
	}
	n.write(n.root.ReleaseKeys(), string(release.MarshalPublicKey(pub, "")), 0o644)
	bin, err := os.ReadFile(n.root.HotfixBinary())
	if err != nil {
		n.t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	env, err := release.Sign(release.Release{
		Base: "202604.01", Version: target, NotAfter: time.Now().Add(time.Hour), LaunchRecords: launchRecords,
		Artifacts: map[string]release.Artifact{release.Platform(runtime.GOOS, runtime.GOARCH): {URL: "https://x/a", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(bin))}},
	}, priv)
	if err != nil {
		n.t.Fatal(err)
	}
	n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}})
}

// TestRunBoundsAHotfixThatWritesNoRecord: a hotfix agent that hangs before
// it writes its first launch record is killed after StartTimeout, and the
// baked agent provisions in the same boot, once, only when its signed
// release declares that its agent writes launch records; otherwise it is
// never timed (it may be a reference-style agent running its bootstrap):
// here one that writes nothing for longer than StartTimeout, then starts
// the bootstrap, provisions with its own exit code and no fallback.
func TestRunBoundsAHotfixThatWritesNoRecord(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		declared  bool
		body      string
		wantBaked int
		wantCode  int
		reason    string
	}{
		{name: "declared-and-hangs", declared: true, body: "exec sleep 60", wantBaked: 1, reason: "wrote no launch record within 300ms"},
		{name: "undeclared-and-slow", declared: false, body: "sleep 0.6\n" + startsBootstrap("exit 3"), wantCode: 3},
		{name: "declared-and-keeps-the-protocol", declared: true, body: startsBootstrap("exit 0")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			n.stageHotfix(tt.body)
			n.signedPointer(tt.declared)
			start := time.Now()
			code := n.launch()
			if code != tt.wantCode {
				t.Errorf("launch = %d, want %d\n%s", code, tt.wantCode, n.out.String())
			}
			if got := len(n.provided); got != tt.wantBaked {
				t.Errorf("%d baked provisions, want %d\n%s", got, tt.wantBaked, n.out.String())
			}
			if tt.reason != "" && (len(n.provided) != 1 || !strings.Contains(n.provided[0].Fallback, tt.reason)) {
				t.Errorf("fallback = %+v, want the reason %q", n.provided, tt.reason)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("launch took %v", d)
			}
		})
	}
}

// TestRunKilledAfterBootstrapStatusRecords: a hotfix agent killed after
// its bootstrap started keeps the status it wrote only when it wrote one
// (a new provision.json that parses, and a new provision.complete); a
// stale status it removed, or one that does not parse, is replaced by
// launch's record of the kill, so provision-wait never waits out its
// timeout nor reads an earlier boot's result.
func TestRunKilledAfterBootstrapStatusRecords(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, body string
		stale      bool
	}{
		{"stale-status-removed", `rm -f "$root/opt/azure/containers/provision.complete"; kill -9 $$`, true},
		{"stale-status-left", `kill -9 $$`, true},
		{"status-that-does-not-parse", `mkdir -p "$root/opt/azure/containers"; echo 'garbage' >"$root/var/log/azure/aks/provision.json"; : >"$root/opt/azure/containers/provision.complete"; kill -9 $$`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			if tt.stale {
				for _, p := range []string{n.root.ProvisionJSON(), n.root.ProvisionComplete()} {
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				n.write(n.root.ProvisionJSON(), `{"ExitCode":"0"}`, 0o600)
				n.write(n.root.ProvisionComplete(), "", 0o600)
			}
			n.stageHotfix(startsBootstrap(tt.body))
			if code := n.launch(); code != 137 || len(n.provided) != 0 {
				t.Errorf("Run = %d with %d baked provisions, want 137 and none (the bootstrap started)\n%s", code, len(n.provided), n.out.String())
			}
			_, st, err := provision.Wait(t.Context(), n.root)
			if se := (*provision.StatusError)(nil); !errors.As(err, &se) || st.ExitCode != "137" {
				t.Errorf("provision-wait reads %+v, %v; want launch's record of the kill, ExitCode 137", st, err)
			}
		})
	}
}
