package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestComponentFlow(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	dir := t.TempDir()
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	priv, pub := filepath.Join(dir, "release.key"), filepath.Join(dir, "release.pub")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", pub)
	cfg := writeFile(t, dir, "localdns.json", `{"corefile": ".:53 {\n    forward . 168.63.129.16\n}\n"}`+"\n")
	env := filepath.Join(dir, "localDNS-3.json")

	out := mustRun(t, "component", "sign", "--key", priv, "--component", "localDNS", "--version", "3", "--config", cfg, "--valid-for", "30d", "--out", env)
	if !strings.Contains(out, "signed localDNS@3") {
		t.Errorf("component sign output: %q", out)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad-name", []string{"component", "sign", "--key", priv, "--component", "local-dns", "--version", "1", "--config", cfg, "--valid-for", "30d", "--out", "-"}, exitUsage, "--component"},
		{"not-an-object", []string{"component", "sign", "--key", priv, "--component", "localDNS", "--version", "1", "--config", writeFile(t, dir, "list.json", "[]"), "--valid-for", "30d", "--out", "-"}, exitUsage, "JSON object"},
		{"no-version", []string{"component", "sign", "--key", priv, "--component", "localDNS", "--config", cfg, "--valid-for", "30d", "--out", "-"}, exitUsage, "--version"},
		{"release-envelope", with("release", "publish", "--reason", "test", "--envelope", env), exitError, "wrong-type"},
		{"judged-plan", with("rollout", "plan", "--reason", "test", "localDNS@3", "--steps", "10:1h", "--margin", "0.1"), exitUsage, "timed"},
		{"bad-timed-step", with("rollout", "plan", "--reason", "test", "localDNS@3", "--steps", "10:1h:5"), exitUsage, "PERCENT:BAKE"},
	} {
		if _, errOut, code := lpsctl(t, tc.args...); code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, errOut, tc.code, tc.want)
		}
	}

	out = mustRun(t, with("component", "publish", "--envelope", env, "--reason", "new resolver")...)
	if !strings.Contains(out, "localDNS@3: draft at 0%") {
		t.Errorf("publish output: %q", out)
	}
	var doc configJSON
	out = mustRun(t, with("rollout", "set", "--reason", "test", "localDNS@3", "--percent", "100", "--deploy-envs", "Staging", "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("rollout set -o json: %v\n%s", err, out)
	}
	if doc.ID != "localDNS@3" || doc.State != "rolling" || doc.Percent != 100 || len(doc.DeployEnvs) != 1 || doc.DeployEnvs[0] != "staging" || !strings.Contains(string(doc.Config), "forward") {
		t.Errorf("rollout set -o json = %+v", doc)
	}
	srv.reload(t)
	out = mustRun(t, with("explain", "--component", "localDNS", "--deploy-env", "staging", "--vm-id", "6c8f2f4e-1b7a-4d3e-9a51-0f6d2c7b8e90", "--subscription", subA)...)
	if !strings.Contains(out, "localDNS@3: SERVED") {
		t.Errorf("explain (staging):\n%s", out)
	}
	out = mustRun(t, with("explain", "--component", "localDNS", "--deploy-env", "prod", "--vm-id", "6c8f2f4e-1b7a-4d3e-9a51-0f6d2c7b8e90", "--subscription", subA)...)
	if !strings.Contains(out, "FAIL  deploy-env-in-scope") || !strings.Contains(out, "NotFound") {
		t.Errorf("explain (prod):\n%s", out)
	}
	out = mustRun(t, with("rollout", "halt", "--reason", "test", "localDNS@3")...)
	if !strings.Contains(out, "localDNS@3: halted") {
		t.Errorf("halt: %q", out)
	}
	mustRun(t, with("revoke", "localDNS@3", "--reason", "bad corefile")...)
	var list struct {
		Configs []configJSON `json:"component_configs"`
	}
	out = mustRun(t, with("component", "list", "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Configs) != 1 || !list.Configs[0].Revoked {
		t.Errorf("component list -o json = %s (%v)", out, err)
	}
	out = mustRun(t, with("audit", "--target", "localDNS@3")...)
	for _, want := range []string{"publish", "rollout-set", "halt", "revoke"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit --target localDNS@3 lacks %s:\n%s", want, out)
		}
	}
}
