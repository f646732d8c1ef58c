package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// genKeys makes key pairs name.key/name.pub in dir and returns their IDs.
func genKeys(t *testing.T, dir string, names ...string) map[string]string {
	t.Helper()
	ids := make(map[string]string)
	for _, n := range names {
		out := mustRun(t, "keys", "generate", "--out-private", filepath.Join(dir, n+".key"), "--out-public", filepath.Join(dir, n+".pub"), "--json")
		var got struct {
			KeyID string `json:"key_id"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		ids[n] = got.KeyID
	}
	return ids
}

func readKeySet(t *testing.T, path string) release.KeySet {
	t.Helper()
	ks, err := release.ParseKeySet([]byte(readFile(t, path)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ks
}

// TestCoSignAndRotate: a 2-of-3 key set baked by keys init, a release
// co-signed offline in either order, a rotation built and co-signed, and
// the chain walked by keys verify, as an operator runs them.
func TestCoSignAndRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := genKeys(t, dir, "a", "b", "c", "d")
	p := func(n string) string { return filepath.Join(dir, n) }
	root := p("root.pub")
	mustRun(t, "keys", "init", "--public-key", p("a.pub"), "--public-key", p("b.pub"), "--public-key", p("c.pub"), "--threshold", "2", "--out", root)
	rootKeys := readKeySet(t, root)
	if rootKeys.Threshold() != 2 || rootKeys.Version() != 1 || !cmp.Equal(rootKeys.KeyIDs(), []string{ids["a"], ids["b"], ids["c"]}) {
		t.Fatalf("keys init wrote version %d threshold %d keys %v", rootKeys.Version(), rootKeys.Threshold(), rootKeys.KeyIDs())
	}

	// A release signed once is below the threshold; co-signed in either
	// order it verifies.
	art := fakeAgent(t, dir, "agent", "202604.01.3", "")
	once := p("once.json")
	mustRun(t, "release", "sign", "--key", p("c.key"), "--base", "202604.01", "--version", "202604.01.3",
		"--artifact", "linux/amd64="+art+",https://b.example.com/a", "--valid-for", "30d", "--out", once)
	if _, err := rootKeys.Verify([]byte(readFile(t, once)), time.Now()); !isReason(err, release.ReasonBelowThreshold) {
		t.Errorf("Verify(signed once) = %v, want below-threshold", err)
	}
	out := mustRun(t, "release", "sign", "--envelope", once, "--key", p("a.key"), "--out", p("twice.json"), "-o", "json")
	var js struct {
		KeyID string `json:"key_id"`
		Type  string `json:"type"`
		ID    string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.KeyID != ids["a"] || js.Type != "release" || js.ID != "202604.01.3" {
		t.Errorf("release sign --envelope -o json = %s (%v)", out, err)
	}
	verifyEnvelope(t, p("twice.json"), root)
	mustRun(t, "release", "sign", "--envelope", once, "--key", p("b.key"), "--out", once) // in place
	verifyEnvelope(t, once, root)
	for name, tt := range map[string]struct {
		args   []string
		code   int
		stderr string
	}{
		"already-signed": {[]string{"--envelope", once, "--key", p("c.key"), "--out", "-"}, exitError, "already signed by key " + ids["c"]},
		"with-base":      {[]string{"--envelope", once, "--key", p("d.key"), "--base", "202604.01", "--out", "-"}, exitUsage, "--base describes a new release"},
		"no-out":         {[]string{"--envelope", once, "--key", p("d.key")}, exitUsage, "--out is required"},
		"not-envelope":   {[]string{"--envelope", root, "--key", p("d.key"), "--out", "-"}, exitError, "--envelope " + root},
	} {
		if _, errOut, code := lpsctl(t, append([]string{"release", "sign"}, tt.args...)...); code != tt.code || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, errOut, tt.code, tt.stderr)
		}
	}

	// Rotate: drop a, add d, still 2 of 3. Signed by b, it needs one more
	// of version 1's keys and one more of its own.
	link := p("keyset-2.json")
	out = mustRun(t, "keys", "rotate", "--current", root, "--add-key", p("d.pub"), "--remove-key", ids["a"],
		"--valid-for", "365d", "--key", p("b.key"), "--out", link, "-o", "json")
	var rot struct {
		Version        int64    `json:"version"`
		Threshold      int      `json:"threshold"`
		Keys           []string `json:"keys"`
		Signers        []string `json:"signers"`
		MissingCurrent *int     `json:"missing_current"`
		MissingOwn     *int     `json:"missing_own"`
	}
	if err := json.Unmarshal([]byte(out), &rot); err != nil {
		t.Fatalf("keys rotate -o json: %v\n%s", err, out)
	}
	if rot.Version != 2 || rot.Threshold != 2 || !cmp.Equal(rot.Keys, []string{ids["b"], ids["c"], ids["d"]}) ||
		rot.MissingCurrent == nil || *rot.MissingCurrent != 1 || rot.MissingOwn == nil || *rot.MissingOwn != 1 {
		t.Errorf("keys rotate -o json = %s", out)
	}
	_, errOut, code := lpsctl(t, "keys", "verify", "--root", root, link)
	if code != exitError || !strings.Contains(errOut, link) || !strings.Contains(errOut, "below-threshold") {
		t.Errorf("keys verify(signed once): exit %d, stderr %q; want a below-threshold refusal naming the file", code, errOut)
	}
	// d is only in the new set, a only in the old: both are needed.
	text := mustRun(t, "keys", "rotate", "--envelope", link, "--current", root, "--key", p("d.key"), "--out", link)
	if !strings.Contains(text, "needs 1 more of version 1's keys") {
		t.Errorf("keys rotate --envelope (own threshold met) printed:\n%s", text)
	}
	text = mustRun(t, "keys", "rotate", "--envelope", link, "--current", root, "--key", p("a.key"), "--out", link)
	if !strings.Contains(text, "fully signed") {
		t.Errorf("keys rotate --envelope (both thresholds met) printed:\n%s", text)
	}
	out = mustRun(t, "keys", "verify", "--root", root, link, "--json")
	var walked struct {
		Version int64    `json:"version"`
		Keys    []string `json:"keys"`
		Expires string   `json:"expires"`
	}
	if err := json.Unmarshal([]byte(out), &walked); err != nil || walked.Version != 2 || !cmp.Equal(walked.Keys, rot.Keys) || walked.Expires == "" {
		t.Errorf("keys verify --json = %s (%v)", out, err)
	}

	// The next rotation starts from the envelope; the chain walks both.
	link3 := p("keyset-3.json")
	mustRun(t, "keys", "rotate", "--current", link, "--threshold", "1", "--valid-for", "30d", "--key", p("b.key"), "--out", link3)
	mustRun(t, "keys", "rotate", "--envelope", link3, "--key", p("c.key"), "--out", link3)
	out = mustRun(t, "keys", "verify", "--root", root, link, link3)
	if !strings.Contains(out, "key-set version 3: 1 of 3 keys sign") {
		t.Errorf("keys verify (two links) = %q", out)
	}
	// Out of order is refused, naming the link.
	if _, errOut, code := lpsctl(t, "keys", "verify", "--root", root, link3, link); code != exitError || !strings.Contains(errOut, link3) {
		t.Errorf("keys verify (out of order): exit %d, stderr %q", code, errOut)
	}
}

func isReason(err error, r release.Reason) bool {
	var ve *release.VerifyError
	return errors.As(err, &ve) && ve.Reason == r
}

func TestKeysInitAndRotateErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := genKeys(t, dir, "a", "b")
	p := func(n string) string { return filepath.Join(dir, n) }
	root := p("root.pub")
	_, logKey, _ := translog.GenerateLogKey("log.example/log")
	_, witKey, _ := translog.GenerateWitnessKey("w1")
	mustRun(t, "keys", "init", "--public-key", p("a.pub"), "--public-key", p("b.pub"), "--threshold", "2",
		"--log-key", logKey, "--witness", witKey, "--witness-quorum", "1", "--out", root)
	if l := readKeySet(t, root).Log(); l.Key != logKey || l.Quorum != 1 || l.MaxCheckpointAge != 24*time.Hour {
		t.Errorf("keys init log policy = %+v", l)
	}
	garbage := writeFile(t, dir, "garbage", "hello\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"init-threshold-over", []string{"keys", "init", "--public-key", p("a.pub"), "--threshold", "2", "--out", "-"}, exitUsage, "threshold 2"},
		{"init-same-key-twice", []string{"keys", "init", "--public-key", p("a.pub"), "--public-key", p("a.pub"), "--out", "-"}, exitUsage, "key " + ids["a"] + " is given twice"},
		{"init-bad-file", []string{"keys", "init", "--public-key", garbage, "--out", "-"}, exitError, "--public-key " + garbage + ": parse release keys: line 1"},
		{"init-witness-no-log", []string{"keys", "init", "--public-key", p("a.pub"), "--witness", "w+1+AQ==", "--out", "-"}, exitUsage, "log policy without a log key"},
		{"init-keys-swapped", []string{"keys", "init", "--public-key", p("a.pub"), "--log-key", witKey, "--witness", logKey, "--witness-quorum", "1", "--out", "-"}, exitUsage, "--log-key is the log's key"},
		{"init-typo-key", []string{"keys", "init", "--public-key", p("a.pub"), "--log-key", logKey, "--witness", "foo+deadbeef+AAAA", "--witness-quorum", "1", "--out", "-"}, exitUsage, "the log policy"},
		{"init-no-key", []string{"keys", "init", "--out", "-"}, exitUsage, "--public-key is required"},
		{"rotate-unknown-remove", []string{"keys", "rotate", "--current", root, "--remove-key", "0000000000000000", "--valid-for", "30d", "--key", p("a.key"), "--out", "-"}, exitUsage, "--remove-key 0000000000000000: not a key of version 1"},
		{"rotate-add-present", []string{"keys", "rotate", "--current", root, "--add-key", p("a.pub"), "--valid-for", "30d", "--key", p("a.key"), "--out", "-"}, exitUsage, "already in the set"},
		{"rotate-threshold-over", []string{"keys", "rotate", "--current", root, "--remove-key", ids["a"], "--valid-for", "30d", "--key", p("a.key"), "--out", "-"}, exitUsage, "threshold 2"},
		{"rotate-no-expiry", []string{"keys", "rotate", "--current", root, "--key", p("a.key"), "--out", "-"}, exitUsage, "exactly one of --expires and --valid-for"},
		{"rotate-too-short", []string{"keys", "rotate", "--current", root, "--valid-for", "10m", "--key", p("a.key"), "--out", "-"}, exitUsage, "at least 1h"},
		{"rotate-no-current", []string{"keys", "rotate", "--valid-for", "30d", "--key", p("a.key"), "--out", "-"}, exitUsage, "--current is required"},
		{"rotate-envelope-with-build-flag", []string{"keys", "rotate", "--envelope", root, "--threshold", "1", "--key", p("a.key"), "--out", "-"}, exitUsage, "--threshold describes a new version"},
		{"rotate-envelope-not-key-set", []string{"keys", "rotate", "--envelope", root, "--key", p("a.key"), "--out", "-"}, exitError, "--envelope " + root},
		{"verify-no-root", []string{"keys", "verify"}, exitUsage, "--root is required"},
		{"verify-garbage-link", []string{"keys", "verify", "--root", root, garbage}, exitError, garbage + ": walk key sets: link 0"},
		{"typo", []string{"keys", "rotat"}, exitUsage, `did you mean "rotate"?`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := lpsctl(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tt.code, tt.stderr)
			}
		})
	}
	// The log policy carries over to the next version unless replaced.
	link := p("ks2.json")
	mustRun(t, "keys", "rotate", "--current", root, "--valid-for", "30d", "--key", p("a.key"), "--out", link)
	d, err := release.InspectKeySet([]byte(readFile(t, link)))
	if err != nil || d.Log.Key != logKey || d.Threshold != 2 {
		t.Errorf("rotated document = %+v, %v; want the current log policy and threshold", d, err)
	}
	if _, err := os.Stat(p("ks2.json")); err != nil {
		t.Error(err)
	}
}

// TestPublishBelowThreshold: lpsd with a 2-of-3 key set refuses an
// envelope signed once (exit 3), naming its signer and saying how to
// co-sign; the co-signed one publishes.
func TestPublishBelowThreshold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := genKeys(t, dir, "a", "b", "c")
	p := func(n string) string { return filepath.Join(dir, n) }
	mustRun(t, "keys", "init", "--public-key", p("a.pub"), "--public-key", p("b.pub"), "--public-key", p("c.pub"), "--threshold", "2", "--out", p("root.pub"))
	ks := readKeySet(t, p("root.pub"))
	srv := startServerKeys(t, &ks)
	art := fakeAgent(t, dir, "agent", "202604.01.3", "")
	env := p("env.json")
	mustRun(t, "release", "sign", "--key", p("b.key"), "--base", "202604.01", "--version", "202604.01.3",
		"--artifact", "linux/amd64="+art+",https://b.example.com/a", "--valid-for", "30d", "--out", env)
	_, errOut, code := lpsctl(t, append([]string{"release", "publish", "--reason", "test", "--envelope", env}, srv.conn()...)...)
	if code != exitRefused || !strings.Contains(errOut, ids["b"]) || !strings.Contains(errOut, "1 more signature") ||
		!strings.Contains(errOut, "lpsctl release sign --envelope "+env) {
		t.Errorf("publish signed once: exit %d, stderr %q; want %d naming %s, the one missing and how to co-sign", code, errOut, exitRefused, ids["b"])
	}
	mustRun(t, "release", "sign", "--envelope", env, "--key", p("c.key"), "--out", env)
	mustRun(t, append([]string{"release", "publish", "--reason", "test", "--envelope", env}, srv.conn()...)...)
}
