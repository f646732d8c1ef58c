package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"nodehotfix/internal/customdata"
	"nodehotfix/internal/node/nodeconfig"
)

const nodeConfig = `{
  "version": "v1",
  "api_server_config": {"api_server_name": "api.example.com"},
  "kubernetes_ca_cert": "Q0EK",
  "enabled_features": {"ENABLE_PROVISIONING_HOTFIX": "true"},
  "some_future_field": 1
}`

func TestCustomData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "config.json", nodeConfig)
	ptr := `{"hotfixes":{"202604.01":"202604.01.3"}}`
	ptrFile := writeFile(t, dir, "hotfix.json", ptr)
	nbcFile := writeFile(t, dir, "nbc-cmd.sh", "API_SERVER_NAME=api.example.com /opt/azure/bootstrap.sh")

	out := mustRun(t, "customdata", "--config", cfgFile, "--pointer", ptrFile, "--nbc-cmd", nbcFile)
	cfg, err := nodeconfig.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := customdata.Render(customdata.Input{Config: cfg, Pointer: []byte(ptr), NBCCmd: "API_SERVER_NAME=api.example.com /opt/azure/bootstrap.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal([]byte(out), want) {
		t.Errorf("customdata output differs from customdata.Render:\n%s", out)
	}
	for _, s := range []string{"#cloud-boothook", "aks-node-controller-hotfix.json", "enabled_features.sh", "aks-node-controller-nbc-cmd.sh"} {
		if !strings.Contains(out, s) {
			t.Errorf("customdata output lacks %q", s)
		}
	}

	badPtr := writeFile(t, dir, "bad.json", `{"hotfixes": 3}`)
	badCfg := writeFile(t, dir, "bad-config.json", `{"version": `)
	missing := filepath.Join(dir, "missing.json")
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--config", cfgFile, "--pointer", badPtr}, exitError, "--pointer " + badPtr},
		{[]string{"--config", badCfg}, exitError, "--config: parse node config " + badCfg},
		{[]string{"--config", missing}, exitError, "--config: open " + missing},
		{[]string{"--pointer", ptrFile}, exitUsage, "--config is required"},
	} {
		_, errOut, code := lpsctl(t, append([]string{"customdata"}, tt.args...)...)
		if code != tt.code || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("customdata %v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut, tt.code, tt.stderr)
		}
	}
}
