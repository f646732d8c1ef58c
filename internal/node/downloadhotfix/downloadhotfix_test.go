package downloadhotfix

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/release"
)

const (
	baked  = "202604.01.0"
	target = "202604.01.1"
)

var (
	agentsMu sync.Mutex
	agents   = map[string][]byte{}
)

// fakeAgent returns the bytes of a real ELF executable that reports ver.
func fakeAgent(t *testing.T, ver string) []byte {
	t.Helper()
	agentsMu.Lock()
	defer agentsMu.Unlock()
	if b, ok := agents[ver]; ok {
		return b
	}
	out := filepath.Join(t.TempDir(), "agent")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+ver, "-o", out, "./testdata/fakeagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fake agent: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	agents[ver] = b
	return b
}

type fixture struct {
	t       *testing.T
	root    layout.Root
	srv     *httptest.Server
	hits    atomic.Int32
	body    []byte
	caPEM   []byte
	version string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, root: layout.Root(t.TempDir()), version: baked}
	if err := os.MkdirAll(f.root.Containers(), 0o755); err != nil {
		t.Fatal(err)
	}
	// The baked binary's mode is what the hotfix gets.
	if err := os.WriteFile(f.root.BakedBinary(), []byte("baked"), 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chmod(f.root.BakedBinary(), 0o750)
	f.body = fakeAgent(t, target)
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		w.Write(f.body)
	}))
	t.Cleanup(f.srv.Close)
	f.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	return f
}

func (f *fixture) keys() (pubLine []byte, sign func(release.Release) json.RawMessage) {
	pub, priv, err := release.GenerateKey(rand.Reader)
	if err != nil {
		f.t.Fatal(err)
	}
	return release.MarshalPublicKey(pub, "test"), func(r release.Release) json.RawMessage {
		env, err := release.Sign(r, priv)
		if err != nil {
			f.t.Fatal(err)
		}
		return env
	}
}

func (f *fixture) installKeys(line []byte) {
	f.t.Helper()
	if err := os.WriteFile(f.root.ReleaseKeys(), line, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) release(body []byte, mutate func(*release.Release)) release.Release {
	sum := sha256.Sum256(body)
	r := release.Release{
		Base:    "202604.01",
		Version: target,
		Artifacts: map[string]release.Artifact{
			release.Platform(runtime.GOOS, runtime.GOARCH): {URL: f.srv.URL + "/agent", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(body))},
		},
		NotAfter: time.Now().Add(24 * time.Hour),
	}
	if mutate != nil {
		mutate(&r)
	}
	return r
}

func (f *fixture) writePointer(p hotfix.Pointer) {
	f.t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.root.Pointer(), data, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) stageOld(content string) {
	f.t.Helper()
	if err := os.WriteFile(f.root.HotfixBinary(), []byte(content), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) run() Result {
	f.t.Helper()
	return Run(within(f.t, time.Minute), Config{Root: f.root, Version: f.version, ArtifactCAPEM: f.caPEM})
}

// noTemps asserts nothing but the expected files is in the staging dir.
func (f *fixture) noTemps() {
	f.t.Helper()
	entries, _ := os.ReadDir(f.root.Containers())
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			f.t.Errorf("temp file left in staging dir: %s", e.Name())
		}
	}
}

func (f *fixture) staged() (string, bool) {
	data, err := os.ReadFile(f.root.HotfixBinary())
	if err != nil {
		return "", false
	}
	return string(data), true
}

func TestRunStagesSignedRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pubLine, sign := f.keys()
	f.installKeys(pubLine)
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{sign(f.release(f.body, nil))}})

	res := f.run()
	if res.Outcome != Staged || res.Route != RouteDirect || res.Version != target || res.ExitCode() != 0 {
		t.Fatalf("Run = %+v", res)
	}
	got, ok := f.staged()
	if !ok || got != string(f.body) {
		t.Fatal("staged binary differs from the artifact")
	}
	if fi, _ := os.Stat(f.root.HotfixBinary()); fi.Mode().Perm() != 0o750 {
		t.Errorf("staged mode = %v, want the baked binary's 0750", fi.Mode().Perm())
	}
	out, err := exec.Command(f.root.HotfixBinary(), "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != target {
		t.Errorf("staged binary version = %q, %v", out, err)
	}
	f.noTemps()

	// A second run finds the verified hotfix in place and downloads nothing.
	res = f.run()
	if res.Outcome != AlreadyStaged || f.hits.Load() != 1 {
		t.Errorf("second Run = %+v after %d downloads, want alreadyStaged after 1", res, f.hits.Load())
	}
	if got, want := res.Message(), "download-hotfix outcome=alreadyStaged route=none version=202604.01.1"; got != want {
		t.Errorf("Message() = %q, want %q", got, want)
	}
}

func TestRunRefusesUntrustedReleases(t *testing.T) {
	t.Parallel()
	other := func(f *fixture) func(release.Release) json.RawMessage {
		_, sign := f.keys()
		return sign
	}
	tests := []struct {
		name     string
		releases func(f *fixture, sign func(release.Release) json.RawMessage) []json.RawMessage
		want     string
	}{
		{"unsigned (no releases)", func(*fixture, func(release.Release) json.RawMessage) []json.RawMessage { return nil }, "carries no release"},
		{"wrong key", func(f *fixture, _ func(release.Release) json.RawMessage) []json.RawMessage {
			return []json.RawMessage{other(f)(f.release(f.body, nil))}
		}, "untrusted"},
		{"tampered", func(f *fixture, sign func(release.Release) json.RawMessage) []json.RawMessage {
			env := sign(f.release(f.body, nil))
			var m map[string]any
			json.Unmarshal(env, &m)
			m["payload"] = strings.Replace(m["payload"].(string), "A", "B", 1)
			b, _ := json.Marshal(m)
			return []json.RawMessage{b}
		}, "release 0"},
		{"other version", func(f *fixture, sign func(release.Release) json.RawMessage) []json.RawMessage {
			return []json.RawMessage{sign(f.release(f.body, func(r *release.Release) { r.Version = "202604.01.2" }))}
		}, "verified releases are of 202604.01.2"},
		{"other arch", func(f *fixture, sign func(release.Release) json.RawMessage) []json.RawMessage {
			return []json.RawMessage{sign(f.release(f.body, func(r *release.Release) {
				a := r.Artifacts[release.Platform(runtime.GOOS, runtime.GOARCH)]
				r.Artifacts = map[string]release.Artifact{"linux/riscv64": a}
			}))}
		}, "no artifact for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			pubLine, sign := f.keys()
			f.installKeys(pubLine)
			f.stageOld("old hotfix")
			f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: tt.releases(f, sign)})
			res := f.run()
			if res.Outcome != Untrusted || res.Err == nil || !strings.Contains(res.Err.Error(), tt.want) || res.ExitCode() != 0 {
				t.Fatalf("Run = %+v, want untrusted mentioning %q", res, tt.want)
			}
			if f.hits.Load() != 0 {
				t.Error("downloaded an untrusted artifact")
			}
			if _, ok := f.staged(); ok || !res.Removed {
				t.Error("stale hotfix binary not removed")
			}
		})
	}
}

func TestRunExpiredRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pub, priv, _ := release.GenerateKey(rand.Reader)
	f.installKeys(release.MarshalPublicKey(pub, ""))
	r := f.release(f.body, func(r *release.Release) { r.NotAfter = time.Now().Add(-time.Hour) })
	env, err := release.Sign(r, priv)
	if err != nil {
		t.Fatal(err)
	}
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}})
	if res := f.run(); res.Outcome != Untrusted || !strings.Contains(res.Err.Error(), "expired") {
		t.Fatalf("Run = %+v, want untrusted (expired)", res)
	}
}

func TestRunRejectsBadArtifacts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		signed func(f *fixture) []byte // what the release signs
		served func(f *fixture) []byte // what the server sends
		want   string
	}{
		{"wrong bytes", func(f *fixture) []byte { return f.body }, func(f *fixture) []byte {
			b := append([]byte(nil), f.body...)
			b[len(b)/2] ^= 1
			return b
		}, "sha256"},
		{"archive, not a binary", func(*fixture) []byte { return []byte("!<arch>\ndebian-binary   ...") }, func(*fixture) []byte { return []byte("!<arch>\ndebian-binary   ...") }, "not an ELF"},
		{"binary of another version", func(f *fixture) []byte { return fakeAgent(f.t, "202604.01.7") }, func(f *fixture) []byte { return fakeAgent(f.t, "202604.01.7") }, `reports version "202604.01.7"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			pubLine, sign := f.keys()
			f.installKeys(pubLine)
			f.stageOld("old hotfix")
			signed := tt.signed(f)
			f.body = tt.served(f)
			f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{sign(f.release(signed, nil))}})
			res := f.run()
			// The release's own bytes are at fault: the service counts
			// artifactIntegrity against the release, not as an outage.
			if res.Outcome != ArtifactIntegrity || !res.Failed() || !strings.Contains(res.Err.Error(), tt.want) || res.ExitCode() != 1 {
				t.Fatalf("Run = %+v, want artifactIntegrity mentioning %q", res, tt.want)
			}
			if got, ok := f.staged(); ok || !res.Removed {
				t.Errorf("staged binary = %q, want the stale one removed", got)
			}
			f.noTemps()
		})
	}
}

func TestRunRemovesWhatNoLongerApplies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    hotfix.Pointer
		want Outcome
	}{
		{"map lacks this base", hotfix.Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}}, NoHotfixForBase},
		{"tombstone (patch 0)", hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.0"}}, Revoked},
		{"other base in value", hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202605.30.2"}}, NotNewer},
		{"malformed target", hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1-1"}}, NotNewer},
		{"revoked", hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Revoked: []string{target}}, Revoked},
		{"legacy version revoked", hotfix.Pointer{Version: target, Revoked: []string{target}}, Revoked},
		{"unreadable revocation", hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, RevokedUnreadable: []json.RawMessage{json.RawMessage(`"garbage"`)}}, UnreadableRevocation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.stageOld("old hotfix")
			f.writePointer(tt.p)
			res := f.run()
			if res.Outcome != tt.want || !res.Removed || res.ExitCode() != 0 {
				t.Fatalf("Run = %+v, want %s with removal", res, tt.want)
			}
			if _, ok := f.staged(); ok {
				t.Error("hotfix binary still staged")
			}
		})
	}
}

func TestRunPointerStates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pointer string // "-" = absent
		version string
		want    Outcome
	}{
		{"absent", "-", baked, NoPointer},
		{"blank", "  \n", baked, NoPointer},
		{"empty object", "{}", baked, NoPointer},
		{"invalid JSON", `{"hotfixes":`, baked, InvalidPointer},
		{"dev build", `{"hotfixes":{"202604.01":"202604.01.1"}}`, "dev", UnparsableVersion},
		{"a directory at the path", "dir", baked, InvalidPointer},
		{"a FIFO at the path", "fifo", baked, InvalidPointer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.version = tt.version
			switch tt.pointer {
			case "-":
			case "dir":
				os.Mkdir(f.root.Pointer(), 0o755)
			case "fifo":
				syscall.Mkfifo(f.root.Pointer(), 0o600)
			default:
				os.WriteFile(f.root.Pointer(), []byte(tt.pointer), 0o600)
			}
			if res := f.run(); res.Outcome != tt.want || res.ExitCode() != 0 {
				t.Fatalf("Run = %+v, want %s", res, tt.want)
			}
		})
	}
}

func TestRunWaitsForConcurrentRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}})
	lk, err := os.OpenFile(f.root.HotfixLock(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	res := Run(within(t, 300*time.Millisecond), Config{Root: f.root, Version: baked})
	if res.Outcome != Busy || res.ExitCode() != 0 {
		t.Fatalf("Run while locked = %+v, want busy", res)
	}
	syscall.Flock(int(lk.Fd()), syscall.LOCK_UN)
	if res := f.run(); res.Outcome != NoHotfixForBase {
		t.Fatalf("Run after unlock = %+v", res)
	}
}

func TestRunScriptsHotfix(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	yml := "#cloud-config\nwrite_files:\n- path: /opt/azure/containers/provision_source.sh\n  permissions: \"0744\"\n  content: |\n    echo patched\n"
	if err := os.WriteFile(f.root.NodeCustomData(), []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	f.writePointer(hotfix.Pointer{ScriptsVersion: "202604.01.1"})
	res := f.run()
	if res.Scripts != "applied" {
		t.Fatalf("Run = %+v, want scripts applied", res)
	}
	got, err := os.ReadFile(filepath.Join(string(f.root), "opt/azure/containers/provision_source.sh"))
	if err != nil || string(got) != "echo patched\n" {
		t.Errorf("script = %q, %v", got, err)
	}

	g := newFixture(t)
	os.WriteFile(g.root.NodeCustomData(), []byte(yml), 0o600)
	g.writePointer(hotfix.Pointer{ScriptsVersion: "202605.30.1"})
	if res := g.run(); res.Scripts != "skipped" {
		t.Errorf("other-base scripts_version: Run = %+v, want skipped", res)
	}
	if _, err := os.Stat(filepath.Join(string(g.root), "opt/azure/containers/provision_source.sh")); err == nil {
		t.Error("scripts for another base were applied")
	}
}

// TestRunPackageManagerRoute drives the no-keys route with fake apt tools on
// PATH that record their argv and install the fake agent.
func TestRunPackageManagerRoute(t *testing.T) {
	f := newFixture(t)
	root := string(f.root)
	os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=ubuntu\nVERSION_ID=\"22.04\"\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/microsoft-prod.list"), []byte("deb x"), 0o644)
	agentPath := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(agentPath, fakeAgent(t, target), 0o755)

	record := fakeTools(t, map[string]string{
		"dpkg":      "exit 0",
		"apt-cache": `echo " aks-node-controller | ` + target + `0-ubuntu22.04u1 | x"; echo " aks-node-controller | ` + target + `-ubuntu22.04u1 | x"`,
		"apt-get":   fmt.Sprintf(`case "$1" in install) mkdir -p %[1]s/usr/bin && cp %[2]s %[1]s/usr/bin/aks-node-controller;; esac`, root, agentPath),
	})

	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
	res := f.run()
	if res.Outcome != Staged || res.Route != RoutePackageManager {
		t.Fatalf("Run = %+v", res)
	}
	argv, _ := os.ReadFile(record)
	if !strings.Contains(string(argv), "apt-get install -y --allow-downgrades -o Dpkg::Options::=--force-confold aks-node-controller="+target+"-ubuntu22.04u1\n") {
		t.Errorf("apt-get was not called with the listed version pinned in full; calls:\n%s", argv)
	}
	if strings.Contains(string(argv), target+"*") {
		t.Error("apt-get version was globbed")
	}
	if got, _ := f.staged(); got != string(fakeAgent(t, target)) {
		t.Error("staged binary is not the installed agent")
	}
	// The source file is malformed, so the repository route gave way.
	if got, want := res.Message(), "download-hotfix outcome=staged route=package-manager version="+target+" repositoryFallback="; !strings.HasPrefix(got, want) || res.RepositoryErr == nil {
		t.Errorf("Message() = %q, want %q…", got, want)
	}
}

// fakeTools puts scripts named by tools on PATH (so t cannot be parallel)
// that append their argv to the file returned, then run their body.
func fakeTools(t *testing.T, tools map[string]string) (record string) {
	t.Helper()
	bin := t.TempDir()
	record = filepath.Join(t.TempDir(), "argv")
	for name, body := range tools {
		s := fmt.Sprintf("#!/bin/sh\necho \"%s $*\" >> %s\n%s\n", name, record, body)
		if err := os.WriteFile(filepath.Join(bin, name), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	return record
}

// within returns the test's context bounded by d, the run's budget (the
// command's lifecycle sets it in production).
func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRunRemovesLeftoverTemps(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leftover := filepath.Join(f.root.Containers(), ".aks-node-controller-hotfix.tmp-123")
	other := filepath.Join(f.root.Containers(), ".unrelated.tmp-1")
	os.WriteFile(leftover, []byte("partial"), 0o600)
	os.WriteFile(other, []byte("x"), 0o600)
	f.run()
	if _, err := os.Stat(leftover); err == nil {
		t.Error("leftover temp file of an interrupted run was not removed")
	}
	if _, err := os.Stat(other); err != nil {
		t.Error("an unrelated file was removed")
	}
}

// TestRunPackageManagerNoSuchVersion: a repository without a package of the
// target version is its own outcome, a failure, and nothing is installed.
func TestRunPackageManagerNoSuchVersion(t *testing.T) {
	f := newFixture(t)
	root := string(f.root)
	os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=ubuntu\nVERSION_ID=\"22.04\"\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/microsoft-prod.list"), []byte("deb x"), 0o644)
	record := fakeTools(t, map[string]string{
		"dpkg":      "exit 0",
		"apt-cache": `echo " aks-node-controller | ` + target + `0-ubuntu22.04u1 | x"`,
		"apt-get":   "exit 0",
	})
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
	res := f.run()
	if res.Outcome != NoPackage || !res.Failed() || res.ExitCode() != 1 || !strings.Contains(res.Err.Error(), target+"0-ubuntu22.04u1") {
		t.Fatalf("Run = %+v, want noPackage naming what the repository has", res)
	}
	argv, _ := os.ReadFile(record)
	if strings.Contains(string(argv), "apt-get install") {
		t.Errorf("installed without a matching package:\n%s", argv)
	}
}
