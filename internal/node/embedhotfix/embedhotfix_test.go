package embedhotfix

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"nodehotfix/internal/node/layout"
)

const script = "#!/usr/bin/env bash\necho fixed provision\n"

// payload is a rendered nodecustomdata document as the reference's
// generator writes one: gzip, base64, a !!binary block.
func payload(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(script))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return `#cloud-config
write_files:
- path: /opt/azure/containers/provision.sh
  permissions: "0744"
  encoding: gzip
  owner: root
  content: !!binary |
    ` + base64.StdEncoding.EncodeToString(buf.Bytes()) + `
- path: /opt/azure/containers/provision_source.sh
  permissions: "0744"
  content: |
    echo sourced
`
}

// nodeWith returns a node root whose os-release says osRelease, with an old
// provision.sh of mode 0600.
func nodeWith(t *testing.T, osRelease string) layout.Root {
	t.Helper()
	root := layout.Root(t.TempDir())
	for path, data := range map[string]string{"etc/os-release": osRelease, "opt/azure/containers/provision.sh": "old\n"} {
		p := filepath.Join(string(root), path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestApply(t *testing.T) {
	t.Parallel()
	good := payload(t)
	tests := []struct {
		name      string
		osRelease string
		files     fstest.MapFS
		want      Outcome
		platform  string
	}{
		{"ubuntu", "ID=ubuntu\nVERSION_ID=\"22.04\"\n", fstest.MapFS{"active": {Data: []byte("true\n")}, "nodecustomdata_ubuntu.yml": {Data: []byte(good)}}, Applied, "ubuntu"},
		{"azure-linux", "ID=azurelinux\nVERSION_ID=3.0\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_mariner.yml": {Data: []byte(good)}}, Applied, "mariner"},
		{"no-marker", "ID=ubuntu\n", fstest.MapFS{"nodecustomdata_ubuntu.yml": {Data: []byte(good)}}, Inactive, ""},
		{"marker-false", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("false\n")}, "nodecustomdata_ubuntu.yml": {Data: []byte(good)}}, Inactive, ""},
		{"other-platform-only", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_mariner.yml": {Data: []byte(good)}}, NoPayload, "ubuntu"},
		{"container-linux", "ID=azurelinux\nVARIANT_ID=azurecontainerlinux\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_mariner.yml": {Data: []byte(good)}}, UnsupportedOS, "azurelinux"},
		{"osguard", "ID=azurelinux\nVARIANT_ID=osguard\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_mariner.yml": {Data: []byte(good)}}, UnsupportedOS, "azurelinux"},
		{"mariner-2", "ID=mariner\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_mariner.yml": {Data: []byte(good)}}, UnsupportedOS, "mariner"},
		{"flatcar", "ID=flatcar\n", fstest.MapFS{"active": {Data: []byte("true")}}, UnsupportedOS, "flatcar"},
		{"no-os-release", "", fstest.MapFS{"active": {Data: []byte("true")}}, Failed, ""},
		{"relative-path", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_ubuntu.yml": {Data: []byte(good + "- path: ../etc/shadow\n  content: x\n")}}, Failed, "ubuntu"},
		{"unknown-encoding", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_ubuntu.yml": {Data: []byte(good + "- path: /etc/x\n  encoding: rot13\n  content: x\n")}}, Failed, "ubuntu"},
		{"not-yaml", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_ubuntu.yml": {Data: []byte("write_files: [\n")}}, Failed, "ubuntu"},
		{"oversized", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_ubuntu.yml": {Data: bytes.Repeat([]byte("#"), 5<<20)}}, Failed, "ubuntu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := nodeWith(t, tt.osRelease)
			if tt.osRelease == "" {
				os.Remove(filepath.Join(string(root), "etc/os-release"))
			}
			res := Apply(root, tt.files)
			if res.Outcome != tt.want || res.Platform != tt.platform {
				t.Fatalf("Apply = %+v (%s), want %s on %q", res, res.Message(), tt.want, tt.platform)
			}
			provision, err := os.ReadFile(filepath.Join(string(root), "opt/azure/containers/provision.sh"))
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(string(root), "opt/azure/containers/provision.sh"))
			if err != nil {
				t.Fatal(err)
			}
			_, written := os.Stat(root.EmbeddedNodeCustomData())
			if tt.want != Applied {
				if string(provision) != "old\n" || written == nil {
					t.Errorf("%s changed the node: provision.sh %q, payload copy written %v", tt.want, provision, written == nil)
				}
				return
			}
			if string(provision) != script || fi.Mode().Perm() != 0o744 || res.Files != 2 {
				t.Errorf("provision.sh %q mode %v, %d files; want the payload's script at 0744 and 2 files", provision, fi.Mode().Perm(), res.Files)
			}
			copyFI, err := os.Stat(root.EmbeddedNodeCustomData())
			if err != nil || copyFI.Mode().Perm() != 0o600 {
				t.Errorf("the payload copy at %s: %v, mode %v; want it at 0600", root.EmbeddedNodeCustomData(), err, copyFI)
			}
			if !strings.Contains(res.Message(), "outcome=applied platform="+tt.platform+" files=2") {
				t.Errorf("message %q", res.Message())
			}
		})
	}
}

// TestShippedPayloadsDoNothing: the agent as built carries no payload, so
// a reference launcher's apply-embedded-hotfix changes nothing and
// succeeds.
func TestShippedPayloadsDoNothing(t *testing.T) {
	t.Parallel()
	root := nodeWith(t, "ID=ubuntu\n")
	if res := Apply(root, Payloads()); res.Outcome != Inactive {
		t.Errorf("Apply with the shipped payloads = %s, want inactive", res.Message())
	}
}
