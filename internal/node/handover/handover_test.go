package handover

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"nodehotfix/internal/node/layout"
)

// shims are the shell that mirrors this contract: the launcher shim, the
// helper script and the bats suites' fake agent.
var shims = []string{
	"../../../deploy/node/aks-node-controller-launcher.sh",
	"../../../deploy/node/aks-node-controller-hotfix.sh",
	"../../../test/launcher/fake-agent.sh",
}

func readShim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestShimsMirrorTheContract: every environment name and record path the
// shell uses is one this package defines, spelled as it defines it.
func TestShimsMirrorTheContract(t *testing.T) {
	t.Parallel()
	envs := []string{EnvLaunchID, EnvAgent, EnvBakedFallback}
	paths := []string{launchFile, startFile}
	envRe := regexp.MustCompile(`AKS_NODE_CONTROLLER_[A-Z0-9_]*`)
	pathRe := regexp.MustCompile(`var/log/azure/aks/[A-Za-z0-9._-]+`)
	for _, path := range shims {
		sh := readShim(t, path)
		for _, name := range envRe.FindAllString(sh, -1) {
			if !slices.Contains(envs, name) {
				t.Errorf("%s: %s is no name of the contract (%v)", filepath.Base(path), name, envs)
			}
		}
		for _, p := range pathRe.FindAllString(sh, -1) {
			if !slices.Contains(paths, p) {
				t.Errorf("%s: %s is no record of the contract (%v)", filepath.Base(path), p, paths)
			}
		}
	}
}

// TestLauncherShimReadsTheRecord pins the shim's few lines to the Go side:
// it exports the launch ID under EnvLaunchID, reads LaunchFile under its
// root, at most maxRecord bytes, and matches the compact JSON that Write
// writes of LaunchID.
func TestLauncherShimReadsTheRecord(t *testing.T) {
	t.Parallel()
	sh := readShim(t, shims[0])
	data, err := json.Marshal(Record{LaunchID: "@id@"})
	if err != nil {
		t.Fatal(err)
	}
	field, _, ok := strings.Cut(strings.TrimPrefix(string(data), "{"), ",")
	if !ok || !strings.HasSuffix(field, `"@id@"`) {
		t.Fatalf("Record's JSON %s does not start with the launch ID", data)
	}
	match := strings.ReplaceAll(strings.Replace(field, "@id@", "${"+EnvLaunchID+"}", 1), `"`, `\"`)
	for _, want := range []string{
		"export " + EnvLaunchID + "=",
		`="${root%/}/` + launchFile + `"`,
		"read -r -n " + strconv.Itoa(maxRecord) + " ",
		`== *"` + match + `"* ]]`,
	} {
		if strings.Count(sh, want) != 1 {
			t.Errorf("the launcher shim has %d of %q, want 1", strings.Count(sh, want), want)
		}
	}
	if got, want := filepath.Join("/", launchFile), LaunchFile("/"); got != want {
		t.Errorf("LaunchFile(/) = %s, want %s", want, got)
	}
}

// TestFakeAgentWritesARecord: the record the bats suites' fake agent
// writes is one Read accepts.
func TestFakeAgentWritesARecord(t *testing.T) {
	t.Parallel()
	sh := readShim(t, shims[2])
	m := regexp.MustCompile(`printf '(\{"LaunchID".*\})'`).FindStringSubmatch(sh)
	if m == nil {
		t.Fatal("fake-agent.sh writes no record")
	}
	rec := strings.NewReplacer("%s", "42-7", "%d", "7").Replace(m[1])
	dec := json.NewDecoder(bytes.NewReader([]byte(rec)))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("fake-agent.sh's record %s: %v", rec, err)
	}
	root := layout.Root(t.TempDir())
	if err := os.MkdirAll(filepath.Dir(LaunchFile(root)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(LaunchFile(root), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := Read(LaunchFile(root), "42-7"); !ok {
		t.Errorf("Read refuses fake-agent.sh's record %s", rec)
	}
}

// TestRecords: a record counts only for its own launch ID, a phase
// only in StartFile's bootstrap record.
func TestRecords(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	if err := Write(StartFile(root), Record{LaunchID: "1-1", Phase: PhasePreflight}); err != nil {
		t.Fatal(err)
	}
	if r, ok := Read(StartFile(root), "1-1"); !ok || r.Phase != PhasePreflight || r.Pid != os.Getpid() || r.Time == "" {
		t.Errorf("Read = %+v, %v", r, ok)
	}
	if Started(root, "1-1") {
		t.Error("a preflight counts as the bootstrap's start")
	}
	if err := Write(StartFile(root), Record{LaunchID: "1-1", Phase: PhaseBootstrap}); err != nil {
		t.Fatal(err)
	}
	if !Started(root, "1-1") || Started(root, "1-2") || Started(root, "") {
		t.Error("Started does not match exactly the recorded launch ID")
	}
}
