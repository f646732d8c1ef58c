package provision

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/node/handover"
	"nodehotfix/internal/node/layout"
)

func readStatus(t *testing.T, root layout.Root) Status {
	t.Helper()
	if _, err := os.Stat(root.ProvisionComplete()); err != nil {
		t.Fatalf("provision.complete: %v", err)
	}
	data, err := os.ReadFile(root.ProvisionJSON())
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		nbc        string // nbc-cmd content; "" = not given
		config     string // config content; "" = not given
		script     string // provision_start.sh content
		wantCode   int
		wantOutput string
		wantErr    string
	}{
		{name: "nbc-cmd success", nbc: `echo hello; exit 0`, wantCode: 0, wantOutput: "hello\n"},
		{name: "bootstrap learns the agent version", nbc: `echo "agent=$AKS_NODE_CONTROLLER_VERSION"`, wantCode: 0, wantOutput: "agent=202604.01.1\n"},
		{name: "nbc-cmd failure code propagates", nbc: `echo bad >&2; exit 7`, wantCode: 7, wantOutput: "bad\n", wantErr: "exited with code 7"},
		{name: "nbc-cmd wins over config", nbc: `echo nbc`, config: `{"version":"v1"}`, script: "echo script", wantCode: 0, wantOutput: "nbc\n"},
		{name: "config runs the image bootstrap", config: `{"version":"v1","api_server_config":{"api_server_name":"api.x"}}`, script: `echo "api=$API_SERVER_NAME"`, wantCode: 0, wantOutput: "api=api.x\n"},
		{name: "config with bad version fails fast", config: `{"version":"v9"}`, wantCode: ExitFailFast, wantErr: "unsupported version"},
		{name: "unparsable config fails fast", config: `{`, wantCode: ExitFailFast, wantErr: "parse provision config"},
		{name: "no inputs fail fast", wantCode: ExitFailFast, wantErr: "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := layout.Root(t.TempDir())
			cfg := Config{Root: root, AgentVersion: "202604.01.1"}
			if tt.nbc != "" {
				cfg.NBCCmdPath = root.NBCCmd()
				writeScript(t, cfg.NBCCmdPath, tt.nbc)
			}
			if tt.config != "" {
				cfg.ConfigPath = root.NodeConfig()
				writeScript(t, cfg.ConfigPath, tt.config)
			}
			if tt.script != "" {
				writeScript(t, filepath.Join(root.Containers(), "provision_start.sh"), tt.script)
			}
			if code := Run(t.Context(), cfg); code != tt.wantCode {
				t.Errorf("Run = %d, want %d", code, tt.wantCode)
			}
			st := readStatus(t, root)
			if st.ExitCode != strconv.Itoa(tt.wantCode) {
				t.Errorf("ExitCode = %q, want %d", st.ExitCode, tt.wantCode)
			}
			if st.Output != tt.wantOutput {
				t.Errorf("Output = %q, want %q", st.Output, tt.wantOutput)
			}
			if !strings.Contains(st.Error, tt.wantErr) || (tt.wantErr == "" && st.Error != "") {
				t.Errorf("Error = %q, want containing %q", st.Error, tt.wantErr)
			}
			if st.StartTime == "" || st.EndTime == "" || st.ExecDuration == "" {
				t.Errorf("timings missing: %+v", st)
			}
		})
	}
}

func TestRunOutputIsCappedToTail(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	writeScript(t, root.NBCCmd(), `head -c 200000 /dev/zero | tr '\0' a; echo END`)
	if code := Run(t.Context(), Config{Root: root, NBCCmdPath: root.NBCCmd()}); code != 0 {
		t.Fatalf("Run = %d", code)
	}
	st := readStatus(t, root)
	if len(st.Output) != outputTail || !strings.HasSuffix(st.Output, "aEND\n") {
		t.Errorf("Output is %d bytes ending %q, want the last %d bytes", len(st.Output), st.Output[len(st.Output)-8:], outputTail)
	}
}

func TestRunCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	marker := filepath.Join(t.TempDir(), "child-survived")
	writeScript(t, root.NBCCmd(), `(sleep 30; touch `+marker+`) & sleep 30`)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if code := Run(ctx, Config{Root: root, NBCCmdPath: root.NBCCmd()}); code == 0 {
		t.Fatalf("Run of a cancelled bootstrap = 0")
	}
	// The grandchild would create the marker after 30 s; killing the group
	// means it never does. Checking now only proves the kill reached it if
	// it is gone from the process table, so look for it there.
	if pids := processesMentioning(t, marker); len(pids) > 0 {
		t.Errorf("bootstrap child still running after cancel: pids %v", pids)
	}
	if st := readStatus(t, root); !strings.Contains(st.Error, "bootstrap") || st.ExitCode == "0" {
		t.Errorf("status = %+v", st)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   string
		wantErr  string
		wantCode int
	}{
		{name: "success", status: `{"ExitCode":"0","Error":"","Output":"ok"}`},
		{name: "non-zero", status: `{"ExitCode":"7","Error":"boom","Output":""}`, wantErr: "ExitCode 7: boom", wantCode: 7},
		{name: "missing exit code", status: `{"Output":""}`, wantErr: "ExitCode missing", wantCode: 1},
		{name: "not an integer", status: `{"ExitCode":"x"}`, wantErr: "not an integer", wantCode: 1},
		{name: "not json", status: `nope`, wantErr: "parse", wantCode: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := layout.Root(t.TempDir())
			writeScript(t, root.ProvisionJSON(), tt.status)
			writeScript(t, root.ProvisionComplete(), "")
			raw, _, err := Wait(t.Context(), root)
			if string(raw) != tt.status {
				t.Errorf("raw = %q, want %q", raw, tt.status)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Wait: %v", err)
				}
				return
			}
			var se *StatusError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr) || se.Code() != tt.wantCode {
				t.Errorf("Wait error = %v (code %d), want %q / %d", err, se.Code(), tt.wantErr, tt.wantCode)
			}
		})
	}
}

func TestWaitSeesLateCompletion(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	if err := os.MkdirAll(root.Containers(), 0o755); err != nil {
		t.Fatal(err)
	}
	type result struct {
		st  Status
		err error
	}
	got := make(chan result, 1)
	go func() {
		_, st, err := Wait(t.Context(), root)
		got <- result{st, err}
	}()
	writeScript(t, root.NBCCmd(), "exit 0")
	if code := Run(t.Context(), Config{Root: root, NBCCmdPath: root.NBCCmd()}); code != 0 {
		t.Fatalf("Run = %d", code)
	}
	r := <-got
	if r.err != nil || r.st.ExitCode != "0" {
		t.Errorf("Wait = %+v, %v", r.st, r.err)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := Wait(ctx, layout.Root(t.TempDir())); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want deadline exceeded", err)
	}
}

// processesMentioning lists live processes whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(cmdlines) == 0 {
		t.Fatalf("cannot list processes: %v", err)
	}
	var pids []string
	for _, c := range cmdlines {
		data, err := os.ReadFile(c)
		if err == nil && strings.Contains(string(data), s) {
			pids = append(pids, filepath.Base(filepath.Dir(c)))
		}
	}
	return pids
}

// TestRunRecordsStartUnderLaunch: the start record carries the launch ID
// before the bootstrap runs, and provision.json says which agent ran.
func TestRunRecordsStartUnderLaunch(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	nbc := filepath.Join(string(root), "nbc.sh")
	// The bootstrap sees the record already written.
	writeScript(t, nbc, `cat `+handover.StartFile(root))
	code := Run(t.Context(), Config{Root: root, NBCCmdPath: nbc, AgentVersion: "202604.01.1", LaunchID: "42-7", Agent: "hotfix", Fallback: ""})
	if code != 0 {
		t.Fatalf("Run = %d", code)
	}
	st := readStatus(t, root)
	if !strings.Contains(st.Output, `"LaunchID":"42-7"`) || !strings.Contains(st.Output, `"AgentVersion":"202604.01.1"`) {
		t.Errorf("the bootstrap saw start record %q", st.Output)
	}
	if st.Agent != "hotfix" || st.AgentVersion != "202604.01.1" {
		t.Errorf("provision.json agent = %q %q", st.Agent, st.AgentVersion)
	}
	if !handover.Started(root, "42-7") || handover.Started(root, "42-8") || handover.Started(root, "") {
		t.Error("Started does not match exactly the recorded launch ID")
	}
}

// TestRunFallbackFollows: when a same-boot fallback follows, a failure
// before the bootstrap writes no status (provision-wait must not see it),
// and a start that cannot be recorded keeps the bootstrap from starting.
func TestRunFallbackFollows(t *testing.T) {
	t.Parallel()
	t.Run("preflight-failure", func(t *testing.T) {
		t.Parallel()
		root := layout.Root(t.TempDir())
		code := Run(t.Context(), Config{Root: root, NBCCmdPath: filepath.Join(string(root), "missing.sh"), LaunchID: "1-1", FallbackFollows: true})
		if code != ExitFailFast {
			t.Fatalf("Run = %d, want %d", code, ExitFailFast)
		}
		for _, p := range []string{root.ProvisionJSON(), root.ProvisionComplete()} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists (%v); the fallback writes the status", p, err)
			}
		}
		if s, ok := handover.Read(handover.StartFile(root), "1-1"); !ok || s.Phase != handover.PhasePreflight || handover.Started(root, "1-1") {
			t.Errorf("start record = %+v, %v; want the preflight only", s, ok)
		}
	})
	t.Run("start-not-recordable", func(t *testing.T) {
		t.Parallel()
		root := layout.Root(t.TempDir())
		marker := filepath.Join(string(root), "bootstrap-ran")
		nbc := filepath.Join(string(root), "nbc.sh")
		writeScript(t, nbc, "touch "+marker)
		// A directory where the record goes: it cannot be replaced.
		if err := os.MkdirAll(handover.StartFile(root), 0o755); err != nil {
			t.Fatal(err)
		}
		if code := Run(t.Context(), Config{Root: root, NBCCmdPath: nbc, LaunchID: "1-1", FallbackFollows: true}); code != ExitFailFast {
			t.Fatalf("Run = %d, want %d", code, ExitFailFast)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the bootstrap ran although its start could not be recorded")
		}
		if _, err := os.Stat(root.ProvisionComplete()); err == nil {
			t.Error("provision.complete written; the fallback writes the status")
		}
	})
	t.Run("last-attempt-runs-anyway", func(t *testing.T) {
		t.Parallel()
		root := layout.Root(t.TempDir())
		marker := filepath.Join(string(root), "bootstrap-ran")
		nbc := filepath.Join(string(root), "nbc.sh")
		writeScript(t, nbc, "touch "+marker)
		if err := os.MkdirAll(handover.StartFile(root), 0o755); err != nil {
			t.Fatal(err)
		}
		// No fallback follows (the baked agent): provisioning is never
		// blocked by the record.
		if code := Run(t.Context(), Config{Root: root, NBCCmdPath: nbc, LaunchID: "1-1", Agent: "baked", Fallback: "exited with code 2"}); code != 0 {
			t.Fatalf("Run = %d, want 0", code)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Error("the bootstrap did not run")
		}
		if st := readStatus(t, root); st.Agent != "baked" || st.Fallback != "exited with code 2" {
			t.Errorf("provision.json = %+v", st)
		}
	})
}

func TestAbandon(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	if err := Abandon(root, 137, "hotfix agent killed by killed after the bootstrap started"); err != nil {
		t.Fatal(err)
	}
	if st := readStatus(t, root); st.ExitCode != "137" || !strings.Contains(st.Error, "killed") {
		t.Errorf("status = %+v", st)
	}
}

func TestStatusMark(t *testing.T) {
	t.Parallel()
	root := layout.Root(t.TempDir())
	before := handover.MarkStatus(root)
	if before.Changed(root) {
		t.Fatal("an absent status changed by itself")
	}
	if err := WriteStatus(root, Status{ExitCode: "1"}); err != nil {
		t.Fatal(err)
	}
	if !before.Changed(root) {
		t.Error("a written status is not a change")
	}
	again := handover.MarkStatus(root)
	if err := WriteStatus(root, Status{ExitCode: "1"}); err != nil {
		t.Fatal(err)
	}
	if !again.Changed(root) {
		t.Error("a rewritten status (same content) is not a change")
	}
}

// TestRecordedExit: the exit code provision.json records, or the
// fallback for a status that is missing, unparsable or no exit code.
func TestRecordedExit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, status string
		want         int
	}{
		{"none", "", 99},
		{"zero", `{"ExitCode":"0"}`, 0},
		{"failed", `{"ExitCode":"5","Error":"x"}`, 5},
		{"not-json", `{"ExitCode":`, 99},
		{"not-a-number", `{"ExitCode":"five"}`, 99},
		{"negative", `{"ExitCode":"-1"}`, 99},
		{"too-large", `{"ExitCode":"256"}`, 99},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := layout.Root(t.TempDir())
			if tt.status != "" {
				if err := os.MkdirAll(filepath.Dir(root.ProvisionJSON()), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(root.ProvisionJSON(), []byte(tt.status), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := RecordedExit(root, 99); got != tt.want {
				t.Errorf("RecordedExit(%s) = %d, want %d", tt.status, got, tt.want)
			}
		})
	}
}
