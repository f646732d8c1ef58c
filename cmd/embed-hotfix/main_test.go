package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodehotfix/internal/node/embedhotfix"
	"nodehotfix/internal/node/layout"
)

const good = `#cloud-config
write_files:
- path: /opt/azure/containers/provision.sh
  permissions: "0744"
  content: |
    echo fixed
`

// TestEmbedThenApply: the build step copies checked payloads and marks them
// active, and the agent applies what it copied; a bad payload or a stray
// file is refused with nothing copied; -clear leaves the agent without any.
func TestEmbedThenApply(t *testing.T) {
	t.Parallel()
	from, to := t.TempDir(), t.TempDir()
	// The reference's generated directory as it is.
	os.WriteFile(filepath.Join(from, "rendered_nodecustomdata_ubuntu.yml"), []byte(good), 0o600)
	os.WriteFile(filepath.Join(from, "rendered_nodecustomdata_flatcar.yml"), []byte(good), 0o600)
	os.WriteFile(filepath.Join(from, "active"), []byte("true\n"), 0o600)
	os.WriteFile(filepath.Join(from, ".gitkeep"), nil, 0o600)
	os.WriteFile(filepath.Join(from, "README"), []byte("generated\n"), 0o600)
	var out, errOut bytes.Buffer
	if code := run([]string{"-from", from, "-to", to}, &out, &errOut); code != 0 {
		t.Fatalf("embed = %d: %s", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(to, "rendered_nodecustomdata_flatcar.yml")); err != nil {
		t.Errorf("flatcar payload not copied: %v", err)
	}
	root := layout.Root(t.TempDir())
	os.MkdirAll(filepath.Join(string(root), "etc"), 0o755)
	os.MkdirAll(filepath.Join(string(root), "opt/azure/containers"), 0o755)
	os.WriteFile(filepath.Join(string(root), "etc/os-release"), []byte("ID=ubuntu\n"), 0o644)
	os.WriteFile(filepath.Join(string(root), "opt/azure/containers/provision.sh"), []byte("old\n"), 0o755)
	if res := embedhotfix.Apply(root, os.DirFS(to)); res.Outcome != embedhotfix.Applied {
		t.Fatalf("Apply of the embedded payloads = %s", res.Message())
	}
	if data, _ := os.ReadFile(filepath.Join(string(root), "opt/azure/containers/provision.sh")); string(data) != "echo fixed\n" {
		t.Errorf("provision.sh = %q", data)
	}

	// Rendered payloads without their marker are inactive to the reference:
	// refused, not activated.
	inactive := t.TempDir()
	os.WriteFile(filepath.Join(inactive, "rendered_nodecustomdata_ubuntu.yml"), []byte(good), 0o600)
	if code := run([]string{"-from", inactive, "-to", t.TempDir()}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "would not apply them") {
		t.Errorf("embed without the marker = %d: %s", code, errOut.String())
	}

	// This project's earlier layout is taken under the reference's names.
	earlier := t.TempDir()
	os.WriteFile(filepath.Join(earlier, "nodecustomdata_mariner.yml"), []byte(good), 0o600)
	if code := run([]string{"-from", earlier, "-to", to}, &out, &errOut); code != 0 {
		t.Fatalf("embed of the earlier layout = %d: %s", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(to, "rendered_nodecustomdata_mariner.yml")); err != nil {
		t.Errorf("earlier layout not renamed: %v", err)
	}

	for name, content := range map[string]string{
		"rendered_nodecustomdata_ubuntu.yml":  "write_files:\n- path: relative/x\n  content: x\n",
		"rendered_nodecustomdata_windows.yml": good,
		"rendered_nodecustomdata_mariner.yml": "#cloud-config\nbootcmd: []\n",
		"rendered_nodecustomdata_acl.yml":     "write_files:\n- path: /x\n  content: no permissions\n",
		"active":                              "false\n",
	} {
		bad := t.TempDir()
		os.WriteFile(filepath.Join(bad, name), []byte(content), 0o600)
		before, _ := os.ReadDir(to)
		if code := run([]string{"-from", bad, "-to", to}, &out, &errOut); code != 1 {
			t.Errorf("embed of a bad %s = %d, want 1", name, code)
		}
		if after, _ := os.ReadDir(to); len(after) != len(before) {
			t.Errorf("a refused embed changed %s", to)
		}
	}
	if code := run([]string{"-clear", "-to", to}, &out, &errOut); code != 0 {
		t.Fatal(errOut.String())
	}
	if res := embedhotfix.Apply(root, os.DirFS(to)); res.Outcome != embedhotfix.Inactive {
		t.Errorf("after -clear: %s, want inactive", res.Message())
	}
	errOut.Reset()
	if code := run(nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "want -from DIR or -clear") {
		t.Errorf("no flags: %d %q", code, errOut.String())
	}
}
