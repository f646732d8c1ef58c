package facts

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
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

// node is a node root whose staged hotfix leaves a mark when it is run.
type node struct {
	t      *testing.T
	root   layout.Root
	ran    string
	script []byte
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, root: layout.Root(t.TempDir())}
	n.ran = filepath.Join(t.TempDir(), "ran")
	if err := os.MkdirAll(n.root.Containers(), 0o755); err != nil {
		t.Fatal(err)
	}
	n.script = []byte("#!/bin/sh\ntouch " + n.ran + "\necho " + target + "\n")
	if err := os.WriteFile(n.root.HotfixBinary(), n.script, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// keys installs a release key and returns a pointer requesting target with
// a release of it whose artifact has digest sum.
func (n *node) keys(sum string) hotfix.Pointer {
	n.t.Helper()
	pub, priv, err := release.GenerateKey(rand.Reader)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(n.root.ReleaseKeys(), release.MarshalPublicKey(pub, ""), 0o644); err != nil {
		n.t.Fatal(err)
	}
	env, err := release.Sign(release.Release{
		Base: "202604.01", Version: target, NotAfter: time.Now().Add(time.Hour),
		Artifacts: map[string]release.Artifact{release.Platform(runtime.GOOS, runtime.GOARCH): {URL: "https://x/a", SHA256: sum, Size: 1}},
	}, priv)
	if err != nil {
		n.t.Fatal(err)
	}
	return hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}}
}

func (n *node) pointer(p hotfix.Pointer) {
	n.t.Helper()
	data, err := p.MarshalJSON()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(n.root.Pointer(), data, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) wasRun() bool {
	_, err := os.Stat(n.ran)
	return err == nil
}

// TestGatherRunsOnlyWhatMayRun: the staged binary is executed (`version`)
// only when the pointer and the keys would let it run; a revoked, an
// unrequested, an unsigned or an unsafe one is never started.
func TestGatherRunsOnlyWhatMayRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   func(n *node)
		wantRun bool
		reason  hotfix.Reason
	}{
		{name: "no-keys-target", setup: func(n *node) { n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}}) }, wantRun: true, reason: hotfix.ReasonHotfix},
		{name: "signed-digest", setup: func(n *node) {
			sum := sha256.Sum256(n.script)
			n.pointer(n.keys(hex.EncodeToString(sum[:])))
		}, wantRun: true, reason: hotfix.ReasonHotfix},
		{name: "unsigned-bytes", setup: func(n *node) { n.pointer(n.keys(hex.EncodeToString(make([]byte, 32)))) }, reason: hotfix.ReasonStagedMismatch},
		{name: "revoked", setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Revoked: []string{target}})
		}, reason: hotfix.ReasonRevoked},
		{name: "unreadable-revocation", setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, RevokedUnreadable: []json.RawMessage{json.RawMessage(`"garbage"`)}})
		}, reason: hotfix.ReasonUnreadableRevocation},
		{name: "not-requested", setup: func(n *node) { n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}}) }, reason: hotfix.ReasonNoHotfixForBase},
		{name: "no-pointer", setup: func(*node) {}, reason: hotfix.ReasonNoPointer},
		{name: "group-writable-dir", setup: func(n *node) {
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
			if err := os.Chmod(n.root.Containers(), 0o775); err != nil {
				n.t.Fatal(err)
			}
		}, reason: hotfix.ReasonStagedUnsafe},
		{name: "keys-but-no-release", setup: func(n *node) {
			n.keys(hex.EncodeToString(make([]byte, 32)))
			n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
		}, reason: hotfix.ReasonUntrusted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t)
			tt.setup(n)
			f := Gather(t.Context(), Config{Root: n.root, Baked: baked})
			if d := hotfix.Select(f.Input); d.Reason != tt.reason {
				t.Errorf("Select = %s (%s), want %s", d.Reason, d.Detail, tt.reason)
			}
			if n.wasRun() != tt.wantRun {
				t.Errorf("staged binary run: %v, want %v", n.wasRun(), tt.wantRun)
			}
		})
	}
}

// TestGatherPointerSymlink: a symlinked pointer is refused, not followed.
func TestGatherPointerSymlink(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	n.pointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}})
	real := n.root.Pointer() + ".real"
	if err := os.Rename(n.root.Pointer(), real); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, n.root.Pointer()); err != nil {
		t.Fatal(err)
	}
	f := Gather(t.Context(), Config{Root: n.root, Baked: baked})
	if d := hotfix.Select(f.Input); d.Reason != hotfix.ReasonInvalidPointer || n.wasRun() {
		t.Errorf("Select = %s (%s), run %v; want invalidPointer and nothing run", d.Reason, d.Detail, n.wasRun())
	}
}
