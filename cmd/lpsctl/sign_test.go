package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/release"
)

func TestReleaseSignVerifiesWithTheGeneratedKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", pub)
	a := fakeAgent(t, dir, "a", "202604.01.7", "amd64")
	b := fakeAgent(t, dir, "b", "202604.01.7", "arm64!")
	amd64, arm64 := readFile(t, a), readFile(t, b)
	env := filepath.Join(dir, "env.json")
	out := mustRun(t, "release", "sign", "--key", priv, "--base", "202604.01", "--version", "202604.01.7",
		"--artifact", "linux/amd64="+a+",https://blob.example.com/x?sig=a&b=c",
		"--artifact", "linux/arm64="+b+",https://blob.example.com/y",
		"--not-after", "2099-01-02T03:04:05Z", "--out", env, "--json")

	got := verifyEnvelope(t, env, pub)
	want := release.Release{
		Base: "202604.01", Version: "202604.01.7",
		Artifacts: map[string]release.Artifact{
			"linux/amd64": {URL: "https://blob.example.com/x?sig=a&b=c", SHA256: sum(amd64), Size: int64(len(amd64))},
			"linux/arm64": {URL: "https://blob.example.com/y", SHA256: sum(arm64), Size: int64(len(arm64))},
		},
		NotAfter: time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("signed release (-want +got):\n%s", diff)
	}
	var js struct {
		Out      string `json:"out"`
		KeyID    string `json:"key_id"`
		NotAfter string `json:"not_after"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.Out != env || js.NotAfter != "2099-01-02T03:04:05Z" || js.KeyID == "" {
		t.Errorf("release sign --json = %s (%v)", out, err)
	}

	// a reports 202604.01.7: signing it as .8 needs the check skipped.
	stdout := mustRun(t, "release", "sign", "--key", priv, "--base", "202604.01", "--version", "202604.01.8",
		"--artifact", "linux/amd64="+a+",https://blob.example.com/x", "--valid-for", "1h", "--out", "-", "--skip-version-check")
	if _, err := release.Inspect([]byte(stdout)); err != nil {
		t.Errorf("release sign --out - printed no envelope: %v\n%s", err, stdout)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReleaseSignChecksVersion: each artifact's stamped version is read,
// never run, and one stamped with another version, carrying no stamp or not
// an ELF file is refused, saying how to go on; nothing is written then. A
// binary for another architecture is checked like any other.
// --skip-version-check signs without the check.
func TestReleaseSignChecksVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	priv := filepath.Join(dir, "k")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", filepath.Join(dir, "k.pub"))
	const v = "202604.01.5"
	good := fakeAgent(t, dir, "good", v, "")
	arm := fakeAgent(t, dir, "arm", v, "arm64")
	older := fakeAgent(t, dir, "older", "202604.01.4", "")
	stripped := filepath.Join(dir, "stripped")
	if err := os.WriteFile(stripped, stampedAgent(t, "amd64", "-s -w -X main.version="+v), 0o755); err != nil {
		t.Fatal(err)
	}
	// A script that would print the right version, and would run: never run.
	ran := filepath.Join(dir, "ran")
	script := writeFile(t, dir, "script", "#!/bin/sh\ntouch "+ran+"\necho "+v+"\n")
	os.Chmod(script, 0o755)
	broken := writeFile(t, dir, "broken", "\x7fELF but not an ELF file")
	out := filepath.Join(dir, "out.json")
	sign := func(art string, extra ...string) (string, int) {
		t.Helper()
		args := append([]string{"release", "sign", "--key", priv, "--base", "202604.01", "--version", v, "--valid-for", "1h", "--out", out,
			"--artifact", "linux/amd64=" + good + ",https://b.example.com/a", "--artifact", "linux/arm64=" + art + ",https://b.example.com/b"}, extra...)
		_, errOut, code := lpsctl(t, args...)
		return errOut, code
	}
	for name, tt := range map[string]struct{ art, want string }{
		"mismatch": {older, "--artifact linux/arm64: " + older + ` is stamped version "202604.01.4", not --version 202604.01.5: nodes would refuse it`},
		"stripped": {stripped, "no stamped version"},
		"script":   {script, "give --skip-version-check to sign it unchecked"},
		"broken":   {broken, "give --skip-version-check to sign it unchecked"},
	} {
		if errOut, code := sign(tt.art); code != exitError || !strings.Contains(errOut, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, errOut, exitError, tt.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: a refused release sign wrote %s", name, out)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("release sign ran an artifact")
	}
	if errOut, code := sign(arm); code != exitOK {
		t.Errorf("artifacts stamped --version, one for arm64: exit %d, %s", code, errOut)
	}
	if errOut, code := sign(script, "--skip-version-check"); code != exitOK {
		t.Errorf("--skip-version-check: exit %d, %s", code, errOut)
	}
}

func TestReleaseSignErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	priv := filepath.Join(dir, "k")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", filepath.Join(dir, "k.pub"))
	art := writeFile(t, dir, "art", "x")
	empty := writeFile(t, dir, "empty", "")
	notKey := writeFile(t, dir, "notkey", "hello")
	missing := filepath.Join(dir, "missing")
	base := func(extra ...string) []string {
		return append([]string{"release", "sign", "--key", priv, "--base", "202604.01", "--version", "202604.01.1", "--out", filepath.Join(dir, "out.json")}, extra...)
	}
	ok := "linux/amd64=" + art + ",https://b.example.com/a"
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no-artifact", base("--valid-for", "1h"), exitUsage, "--artifact is required"},
		{"bad-artifact", base("--artifact", "linux/amd64="+art, "--valid-for", "1h"), exitUsage, "want PLATFORM=PATH,URL"},
		{"dup-platform", base("--artifact", ok, "--artifact", ok, "--valid-for", "1h"), exitUsage, "platform linux/amd64 given twice"},
		{"no-expiry", base("--artifact", ok), exitUsage, "exactly one of --not-after and --valid-for"},
		{"both-expiry", base("--artifact", ok, "--valid-for", "1h", "--not-after", "2099-01-01T00:00:00Z"), exitUsage, "exactly one"},
		{"past-expiry", base("--artifact", ok, "--not-after", "2001-01-01T00:00:00Z"), exitUsage, "not in the future"},
		{"too-short", base("--artifact", ok, "--valid-for", "2s"), exitUsage, "is 2s away: a release is signed for at least 1h"},
		{"too-soon", base("--artifact", ok, "--not-after", time.Now().Add(10*time.Minute).UTC().Format(time.RFC3339)), exitUsage, "a release is signed for at least 1h"},
		{"bad-time", base("--artifact", ok, "--not-after", "tomorrow"), exitUsage, `--not-after "tomorrow": want RFC 3339`},
		{"missing-artifact", base("--artifact", "linux/amd64="+missing+",https://b.example.com/a", "--valid-for", "1h"), exitError, "--artifact linux/amd64: open " + missing},
		{"empty-artifact", base("--artifact", "linux/amd64="+empty+",https://b.example.com/a", "--valid-for", "1h"), exitError, "0 bytes"},
		{"dir-artifact", base("--artifact", "linux/amd64="+dir+",https://b.example.com/a", "--valid-for", "1h"), exitError, "not a regular file"},
		{"http-url", base("--artifact", "linux/amd64="+art+",http://b.example.com/a", "--valid-for", "1h"), exitUsage, "scheme is not https"},
		// Checked before any artifact is read (the path does not exist).
		{"bad-base-first", []string{"release", "sign", "--key", priv, "--base", "foo", "--version", "202604.01.1", "--artifact", "linux/amd64=" + missing + ",https://b.example.com/a", "--valid-for", "1h", "--out", "-"}, exitUsage, `base "foo"`},
		{"out-stdout-json", []string{"release", "sign", "--key", priv, "--base", "202604.01", "--version", "202604.01.1", "--artifact", ok, "--valid-for", "1h", "--out", "-", "-o", "json"}, exitUsage, "--out - prints the envelope itself"},
		{"base-mismatch", []string{"release", "sign", "--key", priv, "--base", "202604.02", "--version", "202604.01.1", "--artifact", ok, "--valid-for", "1h", "--out", "-"}, exitUsage, `not of base "202604.02"`},
		{"bad-key", []string{"release", "sign", "--key", notKey, "--base", "202604.01", "--version", "202604.01.1", "--artifact", ok, "--valid-for", "1h", "--out", "-"}, exitError, "--key " + notKey + ": parse release private key"},
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
	// Ctrl-C while hashing: exit 130 and nothing written.
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(interrupted{os.Interrupt})
	var errOut bytes.Buffer
	if code := run(ctx, base("--artifact", ok, "--valid-for", "1h"), io.Discard, &errOut); code != exitInterrupted || errOut.String() != "lpsctl release sign: interrupted\n" {
		t.Errorf("interrupted sign: exit %d, %q", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "out.json")); err == nil {
		t.Error("a failed release sign wrote its --out file")
	}
}
