package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/note"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
)

// testLog is a log served over HTTP by tiles.Handler, and its keys.
type testLog struct {
	src    *tiles.MemSource
	signer note.Signer
	vkey   string
	url    string
}

func newTestLog(t *testing.T, records ...[]byte) *testLog {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "nodehotfix.example/log")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	src, err := tiles.NewMemSource(records...)
	if err != nil {
		t.Fatal(err)
	}
	l := &testLog{src: src, signer: signer, vkey: vkey}
	l.sign(t)
	srv := httptest.NewServer(tiles.Handler(src))
	t.Cleanup(srv.Close)
	l.url = srv.URL + "/"
	return l
}

func (l *testLog) sign(t *testing.T) {
	t.Helper()
	if err := l.src.Sign(l.signer); err != nil {
		t.Fatal(err)
	}
}

func (l *testLog) append(t *testing.T, records ...[]byte) {
	t.Helper()
	for _, r := range records {
		if err := l.src.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	l.sign(t)
}

func logRelease(t *testing.T, version string) ([]byte, string) {
	t.Helper()
	pub, priv, err := release.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := release.Sign(release.Release{
		Base: "202604.01", Version: version,
		Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://cdn.example/a", SHA256: strings.Repeat("0", 64), Size: 1}},
		NotAfter:  time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return env, release.KeyID(pub)
}

func revocation(version string) []byte {
	return []byte(`{"type":"nodehotfix-revocation","version":"` + version + `","time":"2026-05-01T00:00:00Z"}`)
}

func TestLog(t *testing.T) {
	t.Parallel()
	rel, _ := logRelease(t, "202604.01.3")
	l := newTestLog(t, rel)
	state := filepath.Join(t.TempDir(), "log.state")
	args := []string{"log", "--url", l.url, "--log-key", l.vkey, "--state", state}

	out, errOut, code := lpsctl(t, append(args, "-o", "json")...)
	if code != exitOK || !strings.Contains(errOut, "first use") {
		t.Fatalf("first log: exit %d, stderr %q; want 0 and first use said", code, errOut)
	}
	var doc logJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("log -o json: %v\n%s", err, out)
	}
	want := []recordJSON{{Index: 0, Kind: "release", Version: "202604.01.3", Base: "202604.01"}}
	ignore := func(rs []recordJSON) []recordJSON {
		for i := range rs {
			rs[i].Hash, rs[i].NotAfter, rs[i].Time = "", nil, nil
		}
		return rs
	}
	if diff := cmp.Diff(want, ignore(doc.Records)); diff != "" || !doc.FirstUse || doc.Kept != nil || doc.Size != 1 {
		t.Errorf("first log = %+v (-want +got records):\n%s", doc, diff)
	}

	l.append(t, revocation("202604.01.3"))
	out, errOut, code = lpsctl(t, append(args, "--since", "1")...)
	if code != exitOK || strings.Contains(errOut, "first use") {
		t.Fatalf("second log: exit %d, stderr %q", code, errOut)
	}
	for _, s := range []string{"2 records", "extends the kept checkpoint of 1 records", "revocation", "revoked at 2026-05-01T00:00:00Z"} {
		if !strings.Contains(out, s) {
			t.Errorf("second log's text lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "release") {
		t.Errorf("log --since 1 listed record 0:\n%s", out)
	}
	y := mustRun(t, append(args, "-o", "yaml")...)
	if !strings.HasPrefix(y, "---\n") || !strings.Contains(y, "kind: revocation") {
		t.Errorf("log -o yaml:\n%s", y)
	}
}

// TestLogFork: a log that rewrote its history under the same key is a
// fork: exit 7, both checkpoints shown, the state kept.
func TestLogFork(t *testing.T) {
	t.Parallel()
	rel, _ := logRelease(t, "202604.01.3")
	honest := newTestLog(t, rel, revocation("202604.01.3"))
	state := filepath.Join(t.TempDir(), "log.state")
	mustRun(t, "log", "--url", honest.url, "--log-key", honest.vkey, "--state", state)

	// The same key signs a history without the revocation.
	forked, err := tiles.NewMemSource(rel, revocation("202604.01.2"), revocation("202604.01.4"))
	if err != nil {
		t.Fatal(err)
	}
	if err := forked.Sign(honest.signer); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tiles.Handler(forked))
	t.Cleanup(srv.Close)
	args := []string{"log", "--url", srv.URL, "--log-key", honest.vkey, "--state", state}
	out, errOut, code := lpsctl(t, args...)
	if code != exitFork || !strings.Contains(out, "FORK of log") || !strings.Contains(out, "kept:   2 records") || !strings.Contains(out, "served: 3 records") || !strings.Contains(errOut, "forked") {
		t.Errorf("log of a fork: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	out, _, code = lpsctl(t, append(args, "--json")...)
	var doc struct {
		Fork forkJSON `json:"fork"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != exitFork || err != nil || doc.Fork.Kept.Size != 2 || doc.Fork.Served.Size != 3 || doc.Fork.Served.Note == "" {
		t.Errorf("log --json of a fork: exit %d, %v\n%s", code, err, out)
	}
	// The state still holds the honest checkpoint.
	mustRun(t, "log", "--url", honest.url, "--log-key", honest.vkey, "--state", state)
}

func TestLogExport(t *testing.T) {
	t.Parallel()
	rel, _ := logRelease(t, "202604.01.3")
	l := newTestLog(t, rel)
	for i := range 300 {
		l.append(t, revocation("202604.01."+string(rune('a'+i%26))))
	}
	dir := t.TempDir()
	out := mustRun(t, "log", "export", "--url", l.url, "--log-key", l.vkey, dir, "-o", "json")
	var ex exportJSON
	if err := json.Unmarshal([]byte(out), &ex); err != nil || ex.Size != 301 || ex.PreviousSize != nil || ex.Bundles != 2 {
		t.Fatalf("log export = %+v, %v\n%s", ex, err, out)
	}
	fromURL := mustRun(t, "log", "--url", l.url, "--log-key", l.vkey, "--json")
	fromDir := mustRun(t, "log", "--dir", dir, "--log-key", l.vkey, "--json")
	if fromURL != fromDir {
		t.Errorf("log --dir of the export differs from log --url:\n%s\n%s", fromDir, fromURL)
	}
	l.append(t, revocation("202604.01.9"))
	if out := mustRun(t, "log", "export", "--url", l.url, "--log-key", l.vkey, dir); !strings.Contains(out, "extending the export of 301 records") {
		t.Errorf("second export: %s", out)
	}
}

func TestLogUsage(t *testing.T) {
	t.Parallel()
	l := newTestLog(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"log", "--url", l.url}, exitUsage, "--log-key is required"},
		{[]string{"log", "--log-key", l.vkey}, exitUsage, "give one of --url and --dir"},
		{[]string{"log", "--url", l.url, "--dir", ".", "--log-key", l.vkey}, exitUsage, "give one of --url and --dir"},
		{[]string{"log", "--url", l.url, "--log-key", "nonsense"}, exitUsage, "--log-key"},
		{[]string{"log", "--url", "ftp://x/", "--log-key", l.vkey}, exitUsage, "--url"},
		{[]string{"log", "export", "--log-key", l.vkey, t.TempDir()}, exitUsage, "--url is required"},
		{[]string{"log", "export", "--url", l.url, "--log-key", l.vkey}, exitUsage, "missing argument DIR"},
		{[]string{"log", "--dir", filepath.Join(t.TempDir(), "none"), "--log-key", l.vkey}, exitError, "--dir"},
	} {
		_, errOut, code := lpsctl(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("lpsctl %v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
	// Another key's log is refused, not listed.
	other := newTestLog(t)
	if _, errOut, code := lpsctl(t, "log", "--url", l.url, "--log-key", other.vkey); code != exitError || !strings.Contains(errOut, "bad-checkpoint") {
		t.Errorf("log with another log's key: exit %d, stderr %q", code, errOut)
	}
}

// TestLogRoot: with --root, each release's real signers are checked
// against the key set in force; one under its threshold is flagged, exit 8.
func TestLogRoot(t *testing.T) {
	t.Parallel()
	pub1, priv1, _ := release.GenerateKey(nil)
	pub2, priv2, _ := release.GenerateKey(nil)
	id1, id2 := release.KeyID(pub1), release.KeyID(pub2)
	rootFile := filepath.Join(t.TempDir(), "root.pub")
	data, err := release.MarshalKeySetFile(release.KeySetDocument{Version: 1, Threshold: 2, Keys: []ed25519.PublicKey{pub1, pub2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sign := func(version string, privs ...ed25519.PrivateKey) []byte {
		env, err := release.Sign(release.Release{
			Base: "202604.01", Version: version,
			Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://cdn.example/a", SHA256: strings.Repeat("0", 64), Size: 1}},
			NotAfter:  time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		}, privs[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range privs[1:] {
			if env, err = release.AddSignature(env, p); err != nil {
				t.Fatal(err)
			}
		}
		return env
	}
	l := newTestLog(t, sign("202604.01.1", priv1, priv2))
	args := []string{"log", "--url", l.url, "--log-key", l.vkey, "--root", rootFile}

	out := mustRun(t, append(args, "-o", "json")...)
	var doc logJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.Records[0].Check; doc.Flagged != 0 || doc.RootVersion != 1 || doc.KeySet == nil || doc.KeySet.Version != 1 ||
		c == nil || c.Status != tiles.StatusVerified || !cmp.Equal(c.Signers, []string{id1, id2}) {
		t.Errorf("log --root of a release signed 2 of 2 = %s", out)
	}

	l.append(t, sign("202604.01.2", priv2))
	out, _, code := lpsctl(t, append(args, "-o", "json")...)
	doc = logJSON{}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.Records[1].Check; code != exitFlagged || doc.Flagged != 1 || !doc.Records[1].Flagged || c.Status != tiles.StatusBelowThreshold || !cmp.Equal(c.Signers, []string{id2}) {
		t.Errorf("log --root of a release signed 1 of 2: exit %d\n%s", code, out)
	}
	out, errOut, code := lpsctl(t, args...)
	for _, s := range []string{"key sets walked from --root version 1 to version 1", "FLAGGED below-threshold", "signed by " + id2 + ": 1 of threshold 2", "1 records FLAGGED"} {
		if !strings.Contains(out, s) {
			t.Errorf("log --root text lacks %q:\n%s", s, out)
		}
	}
	if code != exitFlagged || !strings.Contains(errOut, "1 flagged records") {
		t.Errorf("log --root text: exit %d, stderr %q; want %d", code, errOut, exitFlagged)
	}

	// Without --root, signers are unverified and nothing is flagged.
	out = mustRun(t, "log", "--url", l.url, "--log-key", l.vkey)
	if !strings.Contains(out, "signers unverified: no --root") || !strings.Contains(out, "unverified") || strings.Contains(out, "FLAGGED") {
		t.Errorf("log without --root:\n%s", out)
	}
}

// TestLogWitness: --witness requires the quorum's fresh cosignatures.
func TestLogWitness(t *testing.T) {
	t.Parallel()
	rel, _ := logRelease(t, "202604.01.3")
	l := newTestLog(t, rel)
	wskey, wvkey, err := translog.GenerateWitnessKey("witness.example")
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := lpsctl(t, "log", "--url", l.url, "--log-key", l.vkey, "--witness", wvkey)
	if code != exitError || !strings.Contains(errOut, "no-quorum") {
		t.Errorf("log --witness of an uncosigned log: exit %d, stderr %q", code, errOut)
	}
	// Cosign the served checkpoint as the witness would.
	cosigner, err := translog.NewCosigner(wskey, nil)
	if err != nil {
		t.Fatal(err)
	}
	size, msg, _ := l.src.Checkpoint(t.Context())
	lv, err := translog.ParseLogKey(l.vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(msg, note.VerifierList(lv))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, cosigner)
	if err != nil {
		t.Fatal(err)
	}
	l.src.SetCheckpoint(size, cosigned)
	out := mustRun(t, "log", "--url", l.url, "--log-key", l.vkey, "--witness", wvkey, "--max-age", "1h")
	if !strings.Contains(out, "cosigned by 1 witnesses (quorum 1): witness.example at ") {
		t.Errorf("log --witness of a cosigned log:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--witness", "nonsense"}, "--witness"},
		{[]string{"--witness", l.vkey}, "--witness"}, // a log key is no witness key
		{[]string{"--witness", wvkey, "--witness-quorum", "2"}, "--witness-quorum 2"},
		{[]string{"--max-age", "0s"}, "--max-age"},
	} {
		args := append([]string{"log", "--url", l.url, "--log-key", l.vkey}, tc.args...)
		if _, errOut, code := lpsctl(t, args...); code != exitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("lpsctl %v: exit %d, stderr %q; want usage naming %s", tc.args, code, errOut, tc.msg)
		}
	}
}
