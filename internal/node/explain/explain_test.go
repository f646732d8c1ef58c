package explain

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/release"
)

type fixture struct {
	root    layout.Root
	binary  []byte
	pointer hotfix.Pointer
}

func newFixture(t *testing.T, keys bool, flag string) fixture {
	t.Helper()
	f := fixture{root: layout.Root(t.TempDir()), binary: []byte("#!/bin/sh\necho 202604.01.1\n")}
	os.MkdirAll(f.root.Containers(), 0o755)
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(f.root.NodeConfig(), `{"version":"v1","api_server_config":{"api_server_name":"api.x"},"kubernetes_ca_cert":"Q0EK"}`)
	if flag != "" {
		write(f.root.EnabledFeatures(), "ENABLE_PROVISIONING_HOTFIX="+flag+"\n")
	}
	pub, priv, _ := release.GenerateKey(rand.Reader)
	sum := sha256.Sum256(f.binary)
	env, err := release.Sign(release.Release{
		Base: "202604.01", Version: "202604.01.1", NotAfter: time.Now().Add(time.Hour),
		Artifacts: map[string]release.Artifact{release.Platform(runtime.GOOS, runtime.GOARCH): {URL: "https://x/a", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(f.binary))}},
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	f.pointer = hotfix.Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, Releases: []json.RawMessage{env}}
	if keys {
		write(f.root.ReleaseKeys(), string(release.MarshalPublicKey(pub, "")))
	}
	return f
}

func (f fixture) writePointer(t *testing.T) {
	data, _ := json.Marshal(f.pointer)
	os.WriteFile(f.root.Pointer(), data, 0o600)
}

func (f fixture) stage(t *testing.T, b []byte) {
	os.WriteFile(f.root.HotfixBinary(), b, 0o755)
}

func lastFailed(r Report) string {
	for _, s := range r.Steps {
		if !s.OK {
			return s.Step
		}
	}
	return ""
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		setup      func(t *testing.T, f *fixture)
		keys       bool
		flag       string
		wantBinary string
		wantFailed string
	}{
		{"staged and verified", func(t *testing.T, f *fixture) { f.writePointer(t); f.stage(t, f.binary) }, true, "true", "hotfix", ""},
		{"not staged yet", func(t *testing.T, f *fixture) { f.writePointer(t) }, true, "true", "baked", "staged"},
		{"staged bytes differ", func(t *testing.T, f *fixture) { f.writePointer(t); f.stage(t, []byte("other")) }, true, "true", "baked", "staged"},
		{"flag off but custom-data pointer", func(t *testing.T, f *fixture) { f.writePointer(t); f.stage(t, f.binary) }, true, "", "hotfix", "feature-flag"},
		{"no pointer", func(*testing.T, *fixture) {}, true, "true", "baked", "pointer"},
		{"revoked", func(t *testing.T, f *fixture) { f.pointer.Revoked = []string{"202604.01.1"}; f.writePointer(t) }, true, "true", "baked", "revocation"},
		{"unreadable revocation", func(t *testing.T, f *fixture) {
			f.pointer.RevokedUnreadable = []json.RawMessage{json.RawMessage(`"202604.01.x"`)}
			f.writePointer(t)
			f.stage(t, f.binary)
		}, true, "true", "baked", "revocation"},
		{"unsigned with keys", func(t *testing.T, f *fixture) { f.pointer.Releases = nil; f.writePointer(t) }, true, "true", "baked", "trust"},
		{"no keys: package manager", func(t *testing.T, f *fixture) { f.writePointer(t); f.stage(t, f.binary) }, false, "true", "hotfix", ""},
		{"no keys: staged reports another version", func(t *testing.T, f *fixture) {
			f.writePointer(t)
			f.stage(t, []byte("#!/bin/sh\necho 202604.01.7\n"))
		}, false, "true", "baked", "staged"},
		{"staged group-writable", func(t *testing.T, f *fixture) {
			f.writePointer(t)
			f.stage(t, f.binary)
			os.Chmod(f.root.HotfixBinary(), 0o775)
		}, true, "true", "baked", "staged"},
		{"staged not executable", func(t *testing.T, f *fixture) {
			f.writePointer(t)
			f.stage(t, f.binary)
			os.Chmod(f.root.HotfixBinary(), 0o644)
		}, false, "true", "baked", "staged"},
		{"pointer is a symlink", func(t *testing.T, f *fixture) {
			f.writePointer(t)
			os.Rename(f.root.Pointer(), f.root.Pointer()+".real")
			os.Symlink(f.root.Pointer()+".real", f.root.Pointer())
			f.stage(t, f.binary)
		}, true, "true", "baked", "pointer"},
		{"other base", func(t *testing.T, f *fixture) {
			f.pointer.Hotfixes = map[string]string{"202605.30": "202605.30.1"}
			f.writePointer(t)
		}, true, "true", "baked", "pointer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.keys, tt.flag)
			tt.setup(t, &f)
			r := Run(t.Context(), Config{Root: f.root, Version: "202604.01.0"})
			if string(r.Binary) != tt.wantBinary || lastFailed(r) != tt.wantFailed {
				t.Errorf("Run = binary %s, first failed step %q; want %s, %q\n%+v", r.Binary, lastFailed(r), tt.wantBinary, tt.wantFailed, r.Steps)
			}
		})
	}
	r := Run(t.Context(), Config{Root: layout.Root(t.TempDir()), Version: "dev"})
	last := r.Steps[len(r.Steps)-1]
	if r.Binary != "baked" || last.Step != "baked-version" || last.OK || !strings.Contains(last.Detail, "not YYYYMM.DD.PATCH") {
		t.Errorf("dev build: %+v", r)
	}
}
