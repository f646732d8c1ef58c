package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/test/harness"
)

// TestIntegrationLogRestore is docs/transparency-log.md's backup and
// restore, on real processes: lpsd on a bbolt file with a log key and a
// witness (its own process), the file copied with lpsd stopped at 2
// records; the log grows to 4 (a release, exported then by a monitor, and
// a revocation, exported by the next run) and the backup is copied back.
// The restarted lpsd learns from the witness that it is behind and
// refuses to publish (which would fork the log); lpsctl log restore from
// the older export re-appends its one record and exits 3, as lpsd still
// refuses appends; from the newer export it re-appends the revocation,
// after which the witness cosigns the same tree again, the revocation
// holds, and publishing goes on.
func TestIntegrationLogRestore(t *testing.T) {
	integration(t)
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	tr, err := harness.StartTrust(ctx, env.bins, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	imds, err := harness.StartIMDS(ctx, env.bins, dir, "11111111-2222-3333-4444-555555555555", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { imds.Stop(5 * time.Second) })
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "lpsd.db")
	start := func() *harness.LPSD {
		t.Helper()
		l, err := harness.StartLPSD(ctx, env.bins, dir, harness.LPSDOptions{IMDSRoots: imds.RootsFile, TLS: tlsFiles, Extra: tr.LPSDFlags()})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctl := func(l *harness.LPSD, args ...string) string {
		t.Helper()
		out, err := l.Ctl(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	stand := filepath.Join(dir, "agent")
	if err := os.WriteFile(stand, []byte("a stand-in agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	publish := func(l *harness.LPSD, version string) (string, error) {
		t.Helper()
		path, err := l.SignRelease(ctx, t.TempDir(), harness.Release{Version: version, Binary: stand, URL: "https://blob.example/" + version, KeyFile: tr.Keys["a"], SkipVersionCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.CoSign(ctx, path, "b"); err != nil {
			t.Fatal(err)
		}
		return l.Ctl(ctx, "release", "publish", "--envelope", path, "--reason", "e2e")
	}
	mustPublish := func(l *harness.LPSD, version string) {
		t.Helper()
		if out, err := publish(l, version); err != nil {
			t.Fatalf("publish %s: %v\n%s", version, err, out)
		}
	}

	l := start()
	mustPublish(l, "202604.01.1")
	mustPublish(l, "202604.01.2")
	if err := l.WaitLogged(ctx, 2); err != nil {
		t.Fatal(err)
	}
	l.Stop(10 * time.Second)
	backup := db + ".backup"
	copyFile(t, db, backup)

	l = start()
	mustPublish(l, "202604.01.3")
	if err := l.WaitLogged(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// A monitor's export from before the revocation: older than the log
	// nodes are shown next.
	older := filepath.Join(dir, "export-older")
	ctl(l, "log", "export", "--url", "http://"+l.HTTPAddr+"/log/", "--log-key", tr.LogVKey, older)
	ctl(l, "revoke", "202604.01.2", "--reason", "e2e: bad")
	if err := l.WaitLogged(ctx, 4); err != nil {
		t.Fatalf("%v\nwitness log:\n%s", err, tr.Witness.Log())
	}
	export := filepath.Join(dir, "export")
	ctl(l, "log", "export", "--url", "http://"+l.HTTPAddr+"/log/", "--log-key", tr.LogVKey, export)
	l.Stop(10 * time.Second)

	copyFile(t, backup, db)
	l = start()
	t.Cleanup(func() { l.Stop(10 * time.Second) })
	var st struct {
		Size, WitnessedSize int64 `json:",omitempty"`
		AppendsRefused      bool  `json:"appends_refused"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := json.Unmarshal([]byte(ctl(l, "log", "status", "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.AppendsRefused || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !st.AppendsRefused {
		t.Fatalf("log status on the restored store = %+v, want appends refused: the witness cosigned 4\n%s", st, l.Log())
	}
	out, err := publish(l, "202604.01.4")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "lpsctl log restore") {
		t.Fatalf("publish on the restored store = %v, %s; want exit 3 naming lpsctl log restore", err, out)
	}
	// The revocation the backup does not hold: 202604.01.2 is served
	// again until the log is restored, unless halted (nothing appended).
	ctl(l, "rollout", "set", "202604.01.2", "--percent", "5", "--reason", "e2e")
	ctl(l, "rollout", "halt", "202604.01.2", "--reason", "e2e: revoked before the disk loss")

	// The older export holds one of the two records: re-appended, and
	// lpsctl says lpsd still refuses appends, and what to do (exit 3).
	out, err = l.Ctl(ctx, "log", "restore", "--dir", older, "--log-key", tr.LogVKey, "--reason", "e2e: restore from the older export")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "still refuses appends") || !strings.Contains(err.Error(), "newer export") {
		t.Fatalf("restore from an export older than the witness's tree = %v, %s; want exit 3 saying appends are still refused", err, out)
	}
	dry := ctl(l, "log", "restore", "--dir", export, "--log-key", tr.LogVKey, "--dry-run")
	if !strings.Contains(dry, "revocation") || strings.Contains(dry, "202604.01.3") {
		t.Errorf("restore --dry-run = %q, want record 3 (the revocation) alone: the older export restored record 2", dry)
	}
	var res struct {
		From, Size int64
		Records    []struct {
			Index        int64
			Kind, Target string
		}
	}
	if err := json.Unmarshal([]byte(ctl(l, "log", "restore", "--dir", export, "--log-key", tr.LogVKey, "--reason", "e2e: restore", "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.From != 3 || res.Size != 4 || len(res.Records) != 1 || res.Records[0].Kind != "revocation" || res.Records[0].Target != "202604.01.2" {
		t.Fatalf("restore = %+v, want record 3 re-appended, revoking 202604.01.2", res)
	}
	if again := ctl(l, "log", "restore", "--dir", export, "--log-key", tr.LogVKey, "--reason", "e2e: again"); !strings.Contains(again, "nothing to restore") {
		t.Errorf("restore again = %q, want nothing to restore", again)
	}
	// The witness cosigns the restored tree (4, the one it cosigned), so
	// the kept checkpoint moves on, and the log extends the export.
	if err := l.WaitLogged(ctx, 4); err != nil {
		t.Fatalf("%v\nwitness log:\n%s\nlpsd log:\n%s", err, tr.Witness.Log(), l.Log())
	}
	ctl(l, "log", "--url", "http://"+l.HTTPAddr+"/log/", "--log-key", tr.LogVKey, "--state", filepath.Join(dir, "monitor.state"))
	var status struct {
		Releases []struct {
			Version string
			Revoked bool
		}
	}
	if err := json.Unmarshal([]byte(ctl(l, "status", "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	revoked := map[string]bool{}
	for _, r := range status.Releases {
		revoked[r.Version] = r.Revoked
	}
	if !revoked["202604.01.2"] || revoked["202604.01.3"] {
		t.Errorf("revoked after the restore = %v, want 202604.01.2 only", revoked)
	}
	mustPublish(l, "202604.01.4")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
