package nodeconfig

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAgentPool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := write("config.json", `{"kubeletConfig":{"kubeletNodeLabels":{"kubernetes.azure.com/agentpool":"np1"}}}`)
	noLabel := write("nolabel.json", `{"version":"v1"}`)
	nbc := write("nbc-cmd.sh", `KUBELET_NODE_LABELS="agentpool=np2,kubernetes.azure.com/agentpool=np2" /opt/azure/containers/provision_start.sh`)
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name, config, nbc, want string
		fails                   bool
	}{
		{"node-config", cfg, nbc, "np1", false},
		{"nbc-cmd-fallback", missing, nbc, "np2", false},
		{"config-without-label", noLabel, nbc, "", true},
		{"neither", missing, missing, "", true},
	} {
		got, err := AgentPool(tc.config, tc.nbc)
		if got != tc.want || (err != nil) != tc.fails {
			t.Errorf("%s: AgentPool() = %q, %v; want %q (fails %v)", tc.name, got, err, tc.want, tc.fails)
		}
	}
}
