package localdns

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/node/component"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/release"
)

const corefile = ".:53 {\n    forward . 168.63.129.16\n}\n"

var now = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)

func key(t *testing.T, seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	priv := ed25519.NewKeyFromSeed(s)
	return priv.Public().(ed25519.PublicKey), priv
}

func served(t *testing.T, priv ed25519.PrivateKey, name, config string) string {
	t.Helper()
	env, err := release.SignComponent(release.ComponentConfig{Component: name, Version: 1, Config: config, NotAfter: now.Add(time.Hour)}, priv)
	if err != nil {
		t.Fatal(err)
	}
	body, err := release.ServedComponent(env)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func rootWithPool(t *testing.T, pool string) layout.Root {
	t.Helper()
	root := layout.Root(t.TempDir())
	if pool != "" {
		if err := os.MkdirAll(filepath.Dir(root.NodeConfig()), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := `{"version":"v1","kubeletConfig":{"kubeletNodeLabels":{"kubernetes.azure.com/agentpool":"` + pool + `"}}}`
		if err := os.WriteFile(root.NodeConfig(), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestApply(t *testing.T) {
	t.Parallel()
	ks, priv := key(t, 1)
	_, other := key(t, 2)
	b64 := base64.StdEncoding.EncodeToString([]byte(corefile))
	perPool := `{"agentPools":{"np1":{"corefile":` + quoteJSON(corefile) + `,"corefileVersion":"v7"}},"profiles":{"np2":{"corefileBase64":"` + b64 + `"}}}`
	tests := []struct {
		name    string
		pool    string
		keys    ed25519.PublicKey
		served  string
		want    Outcome
		version string
	}{
		{name: "top-level", served: `{"corefile":` + quoteJSON(corefile) + `}`, want: Applied},
		{name: "top-level-version-ignored", served: `{"corefile":` + quoteJSON(corefile) + `,"corefileVersion":"v1"}`, want: Applied},
		{name: "core-file", served: `{"coreFile":` + quoteJSON(corefile) + `}`, want: Applied},
		{name: "base64", served: `{"corefile_base64":"` + b64 + `"}`, want: Applied},
		{name: "agent-pool", pool: "np1", served: perPool, want: Applied, version: "v7"},
		{name: "profiles", pool: "np2", served: perPool, want: Applied},
		{name: "other-pool", pool: "np3", served: perPool, want: NoCorefileData},
		{name: "no-pool-label", served: perPool, want: Failed},
		{name: "empty", served: "", want: NoCorefileData},
		{name: "profile-only", served: `{"localDnsProfile":{"enableLocalDns":true}}`, want: NoCorefileData},
		{name: "bad-base64", served: `{"corefileBase64":"!!"}`, want: Failed},
		{name: "not-json", served: `corefile`, want: Failed},
		{name: "signed", keys: ks, served: served(t, priv, Component, `{"corefile":`+quoteJSON(corefile)+`}`), want: Applied},
		{name: "signed-no-keys", served: served(t, priv, Component, `{"corefile":`+quoteJSON(corefile)+`}`), want: Applied},
		{name: "untrusted", keys: ks, served: served(t, other, Component, `{"corefile":"x"}`), want: Failed},
		{name: "other-component", keys: ks, served: served(t, priv, "otherThing", `{"corefile":"x"}`), want: Failed},
		{name: "unsigned-with-keys", keys: ks, served: `{"corefile":"x"}`, want: Failed},
		{name: "oversized", served: `{"corefile":"` + strings.Repeat("x", release.MaxComponentServedSize) + `"}`, want: Failed},
		{name: "oversized-with-keys", keys: ks, served: `{"corefile":"` + strings.Repeat("x", release.MaxComponentServedSize) + `"}`, want: Failed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := rootWithPool(t, tc.pool)
			if tc.keys != nil {
				writeKeys(t, root, tc.keys)
			}
			res := Apply(Config{Root: root, Now: now}, tc.served)
			if res.Outcome != tc.want || res.Version != tc.version {
				t.Fatalf("Apply() = %s %q (%v), want %s %q", res.Outcome, res.Version, res.Err, tc.want, tc.version)
			}
			if tc.want != Applied {
				if _, err := os.Stat(root.LocalDNSCorefile()); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a %s outcome left a corefile (%v)", tc.want, err)
				}
				return
			}
			got, err := os.ReadFile(root.LocalDNSCorefile())
			if err != nil || string(got) != corefile {
				t.Errorf("corefile = %q (%v), want %q", got, err, corefile)
			}
			if v, _ := os.ReadFile(root.LocalDNSCorefile() + ".version"); strings.TrimSpace(string(v)) != tc.version {
				t.Errorf("version file %q, want %q", v, tc.version)
			}
			if again := Apply(Config{Root: root, Now: now}, tc.served); again.Outcome != AlreadyCurrent {
				t.Errorf("second Apply() = %s (%v), want alreadyCurrent", again.Outcome, again.Err)
			}
		})
	}
}

func TestApplyOutputAndVersionChange(t *testing.T) {
	t.Parallel()
	root := rootWithPool(t, "np1")
	out := filepath.Join(t.TempDir(), "deep", "corefile")
	cfg := func(v string) string {
		return `{"agentPools":{"np1":{"corefile":` + quoteJSON(corefile) + `,"configChecksum":"` + v + `"}}}`
	}
	if res := Apply(Config{Root: root, Output: out}, cfg("a")); res.Outcome != Applied {
		t.Fatalf("Apply() = %s (%v)", res.Outcome, res.Err)
	}
	// The same Corefile under a new version is applied again, for its
	// version file.
	if res := Apply(Config{Root: root, Output: out}, cfg("b")); res.Outcome != Applied {
		t.Errorf("Apply(new version) = %s (%v), want applied", res.Outcome, res.Err)
	}
	if v, _ := os.ReadFile(out + ".version"); string(v) != "b\n" {
		t.Errorf("version file %q, want b", v)
	}
}

func TestApplyUnwritable(t *testing.T) {
	t.Parallel()
	root := rootWithPool(t, "")
	out := filepath.Join(t.TempDir(), "corefile")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if res := Apply(Config{Root: root, Output: out}, `{"corefile":"x"}`); res.Outcome != Failed || res.Err == nil {
		t.Errorf("Apply(over a directory) = %s (%v), want failed", res.Outcome, res.Err)
	}
}

func writeKeys(t *testing.T, root layout.Root, pub ed25519.PublicKey) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(root.ReleaseKeys()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root.ReleaseKeys(), release.MarshalPublicKey(pub, "test"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestApplyDamagedKeys(t *testing.T) {
	t.Parallel()
	root := rootWithPool(t, "")
	if err := os.MkdirAll(filepath.Dir(root.ReleaseKeys()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root.ReleaseKeys(), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := Apply(Config{Root: root, Now: now}, `{"corefile":"x"}`); res.Outcome != Failed {
		t.Errorf("Apply(damaged key file) = %s, want failed", res.Outcome)
	}
}

func TestLoadKeysDamaged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.pub")
	if ks, err := component.LoadKeys(path); ks != nil || err != nil {
		t.Errorf("LoadKeys(missing) = %v, %v; want no keys", ks, err)
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := component.LoadKeys(path); err == nil {
		t.Error("LoadKeys(damaged) = nil error")
	}
}

func quoteJSON(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
