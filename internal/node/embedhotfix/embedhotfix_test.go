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
// provision.sh of mode 0600 and an old provision_source.sh.
func nodeWith(t *testing.T, osRelease string) layout.Root {
	t.Helper()
	root := layout.Root(t.TempDir())
	for path, data := range map[string]string{"etc/os-release": osRelease, "opt/azure/containers/provision.sh": "old\n", "opt/azure/containers/provision_source.sh": "old source\n"} {
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

// on is an active payload directory holding data for platform.
func on(platform, data string) fstest.MapFS {
	return fstest.MapFS{"active": {Data: []byte("true\n")}, PayloadName(platform): {Data: []byte(data)}}
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
		{"ubuntu", "ID=ubuntu\nVERSION_ID=\"22.04\"\n", on("ubuntu", good), Applied, "ubuntu"},
		{"azure-linux", "ID=azurelinux\nVERSION_ID=3.0\n", on("mariner", good), Applied, "mariner"},
		{"mariner-2", "ID=mariner\n", on("mariner", good), Applied, "mariner"},
		{"container-linux-variant", "ID=azurelinux\nVARIANT_ID=azurecontainerlinux\n", on("acl", good), Applied, "acl"},
		{"container-linux-id", "ID=azurecontainerlinux\n", on("acl", good), Applied, "acl"},
		{"osguard", "ID=azurelinux\nVARIANT_ID=osguard\n", on("azlosguard", good), Applied, "azlosguard"},
		{"flatcar", "ID=flatcar\n", on("flatcar", good), Applied, "flatcar"},
		{"no-marker", "ID=ubuntu\n", fstest.MapFS{PayloadName("ubuntu"): {Data: []byte(good)}}, Inactive, ""},
		{"marker-false", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("false\n")}, PayloadName("ubuntu"): {Data: []byte(good)}}, Inactive, ""},
		{"marker-padded", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("  true \n\n")}, PayloadName("ubuntu"): {Data: []byte(good)}}, Applied, "ubuntu"},
		{"other-platform-only", "ID=ubuntu\n", on("mariner", good), NoPayload, "ubuntu"},
		{"earlier-layout-name", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, "nodecustomdata_ubuntu.yml": {Data: []byte(good)}}, NoPayload, "ubuntu"},
		{"unknown-distribution", "ID=debian\n", on("ubuntu", good), UnsupportedOS, "debian"},
		{"no-os-release", "", fstest.MapFS{"active": {Data: []byte("true")}}, Failed, ""},
		{"relative-path", "ID=ubuntu\n", on("ubuntu", good+"- path: ../etc/shadow\n  permissions: \"0644\"\n  content: x\n"), Failed, "ubuntu"},
		{"unknown-encoding", "ID=ubuntu\n", on("ubuntu", good+"- path: /etc/x\n  permissions: \"0644\"\n  encoding: rot13\n  content: x\n"), Failed, "ubuntu"},
		{"adds-a-file", "ID=ubuntu\n", on("ubuntu", good+"- path: /opt/azure/containers/new.sh\n  permissions: \"0744\"\n  content: x\n"), Failed, "ubuntu"},
		{"no-permissions", "ID=ubuntu\n", on("ubuntu", good+"- path: /opt/azure/containers/provision.sh\n  content: x\n"), Failed, "ubuntu"},
		{"unknown-key", "ID=ubuntu\n", on("ubuntu", strings.Replace(good, "owner: root", "owner: root\n  mode: x", 1)), Failed, "ubuntu"},
		{"not-yaml", "ID=ubuntu\n", on("ubuntu", "write_files: [\n"), Failed, "ubuntu"},
		{"oversized", "ID=ubuntu\n", fstest.MapFS{"active": {Data: []byte("true")}, PayloadName("ubuntu"): {Data: bytes.Repeat([]byte("#"), 5<<20)}}, Failed, "ubuntu"},
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
