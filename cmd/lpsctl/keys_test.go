package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodehotfix/internal/release"
)

func TestKeysGenerate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "release.key"), filepath.Join(dir, "release.pub")
	out := mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", pub, "--comment", "ops 2026", "--json")
	var got struct {
		KeyID      string `json:"key_id"`
		PrivateKey string `json:"private_key"`
		PublicKey  string `json:"public_key"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("keys generate --json: %v\n%s", err, out)
	}
	fi, err := os.Stat(priv)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode = %v, want 0600", fi.Mode().Perm())
	}
	pubData, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := release.ParseKeySet(pubData)
	if err != nil {
		t.Fatalf("public key file does not parse: %v", err)
	}
	if ids := ks.KeyIDs(); len(ids) != 1 || ids[0] != got.KeyID || !strings.HasSuffix(strings.TrimSpace(string(pubData)), "ops 2026") {
		t.Errorf("public key file %q (ids %v), want key %s with the comment", pubData, ids, got.KeyID)
	}
	privData, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.ParsePrivateKey(privData); err != nil {
		t.Errorf("private key file does not parse: %v", err)
	}

	// Either file existing refuses the whole command and changes nothing.
	other := filepath.Join(dir, "other.key")
	for _, args := range [][]string{
		{"--out-private", priv, "--out-public", filepath.Join(dir, "new.pub")},
		{"--out-private", other, "--out-public", pub},
	} {
		_, errOut, code := lpsctl(t, append([]string{"keys", "generate"}, args...)...)
		if code != exitError || !strings.Contains(errOut, "already exists; refusing to overwrite") {
			t.Errorf("keys generate %v: exit %d, stderr %q; want a refusal", args, code, errOut)
		}
	}
	if _, err := os.Lstat(other); err == nil {
		t.Errorf("refused keys generate left %s behind", other)
	}
	if after, _ := os.ReadFile(priv); string(after) != string(privData) {
		t.Error("refused keys generate changed the existing private key")
	}
	if _, errOut, code := lpsctl(t, "keys", "generate", "--out-private", priv); code != exitUsage || !strings.Contains(errOut, "--out-public is required") {
		t.Errorf("keys generate without --out-public: exit %d, stderr %q", code, errOut)
	}
}
