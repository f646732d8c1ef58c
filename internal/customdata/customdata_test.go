package customdata

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	nodeconfigv1 "nodehotfix/internal/gen/nodeconfig/v1"
)

func config(features map[string]string) *nodeconfigv1.Configuration {
	return &nodeconfigv1.Configuration{
		Version:          "v1",
		ApiServerConfig:  &nodeconfigv1.ApiServerConfig{ApiServerName: "api.example.com"},
		KubernetesCaCert: "Q0EK",
		EnabledFeatures:  features,
	}
}

func TestRenderWithoutFeaturesIsByteIdentical(t *testing.T) {
	t.Parallel()
	base, err := Render(Input{Config: config(nil)})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := Render(Input{Config: config(map[string]string{})})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(empty, base) {
		t.Error("custom data for an empty feature map differs from the nil-map output")
	}
	invalid, err := Render(Input{Config: config(map[string]string{"BAD KEY": "x", "A": "multi\nline"})})
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string][]byte{"nil map": base, "only invalid entries": invalid} {
		if bytes.Contains(out, []byte("enabled_features.sh")) {
			t.Errorf("%s: custom data writes enabled_features.sh", name)
		}
	}
}

func TestRenderWritesFilesBeforeStartingTheLauncher(t *testing.T) {
	t.Parallel()
	out, err := Render(Input{Config: config(map[string]string{"ENABLE_PROVISIONING_HOTFIX": "true"}), Pointer: []byte(`{"hotfixes":{}}`)})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.HasPrefix(s, "#cloud-boothook\n#!/bin/bash\n") {
		t.Errorf("custom data does not start with a boothook header:\n%s", s)
	}
	order := []string{"provision.complete", "aks-node-controller-config.json", "aks-node-controller-hotfix.json", "enabled_features.sh", "aks-node-controller-launcher.sh"}
	last := -1
	for _, want := range order {
		i := strings.Index(s, want)
		if i <= last {
			t.Errorf("%s appears out of order", want)
		}
		last = i
	}
	if n := strings.Count(s, "chmod 0600"); n != 3 {
		t.Errorf("%d chmod 0600 lines, want 3", n)
	}
}

func TestRenderRejects(t *testing.T) {
	t.Parallel()
	if _, err := Render(Input{}); err == nil {
		t.Error("Render without a config succeeded")
	}
	if _, err := Render(Input{Config: config(nil), Pointer: []byte(`{"hotfixes":`)}); err == nil {
		t.Error("Render with an invalid pointer succeeded")
	}
	if _, err := Render(Input{Config: config(nil), Pointer: []byte(`{"hotfixes":{},"revoked":["202604.01.1","202604.01"]}`)}); err == nil || !strings.Contains(err.Error(), "not versions") {
		t.Errorf("Render with a revoked entry that is not a version: %v", err)
	}
	if _, err := Render(Input{Config: config(nil), NBCCmd: strings.Repeat("x", MaxSize)}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Render over the size limit: %v", err)
	}
}

// TestRenderRunsUnderBash executes the boothook against a temp root (with
// no launcher, so it takes the systemctl branch via a fake on PATH) and
// checks every file it lays down.
func TestRenderRunsUnderBash(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	feats := map[string]string{"ENABLE_PROVISIONING_HOTFIX": "true", "Z": "it's \"quoted\" $(x)"}
	pointer := `{"hotfixes":{"202604.01":"202604.01.1"}}`
	out, err := Render(Input{Config: config(feats), Pointer: []byte(pointer), NBCCmd: "API_SERVER_NAME=x /bin/true", Root: root})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "boothook.sh")
	if err := os.WriteFile(script, out, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, name := range []string{"systemctl", "logger"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\necho \"$0 $*\" >> "+filepath.Join(root, "calls")+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("/bin/bash", script)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("boothook: %v\n%s", err, b)
	}
	dir := filepath.Join(root, "opt/azure/containers")
	want := map[string]string{
		"aks-node-controller-hotfix.json": pointer,
		"enabled_features.sh":             "ENABLE_PROVISIONING_HOTFIX=true\nZ=it's \"quoted\" $(x)\n",
		"aks-node-controller-nbc-cmd.sh":  "API_SERVER_NAME=x /bin/true",
	}
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != content {
			t.Errorf("%s = %q, %v; want %q", name, got, err, content)
		}
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", name, fi.Mode().Perm())
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "aks-node-controller-config.json"))
	if !strings.Contains(string(cfg), "\"api_server_name\": \"api.example.com\"") {
		t.Errorf("config.json = %s", cfg)
	}
	calls, _ := os.ReadFile(filepath.Join(root, "calls"))
	if !strings.Contains(string(calls), "systemctl start --no-block aks-node-controller.service") {
		t.Errorf("calls = %q, want the service start", calls)
	}

	// Re-running after provisioning completed does nothing.
	os.Remove(filepath.Join(root, "calls"))
	os.WriteFile(filepath.Join(dir, "provision.complete"), nil, 0o600)
	if b, err := exec.Command("/bin/bash", script).CombinedOutput(); err != nil {
		t.Fatalf("second boothook run: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(root, "calls")); err == nil {
		t.Error("boothook ran again after provision.complete")
	}
}

func TestRenderIsShellcheckClean(t *testing.T) {
	t.Parallel()
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Fatal("shellcheck is required (apt-get install shellcheck; .ci/run installs it)")
	}
	out, err := Render(Input{Config: config(map[string]string{"ENABLE_PROVISIONING_HOTFIX": "true"}), Pointer: []byte(`{}`), NBCCmd: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// Drop the cloud-init header line so shellcheck sees the shebang.
	body := bytes.TrimPrefix(out, []byte("#cloud-boothook\n"))
	cmd := exec.Command(sc, "-")
	cmd.Stdin = bytes.NewReader(body)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, b)
	}
}
