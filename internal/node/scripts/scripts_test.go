package scripts

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// indent base64-encodes b as the body of a YAML block scalar, wrapped at 76
// columns like cloud-config generators do.
func indent(b []byte) string {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	for len(s) > 0 {
		n := min(len(s), 76)
		out.WriteString("    " + s[:n] + "\n")
		s = s[n:]
	}
	return out.String()
}

const script = "#!/usr/bin/env bash\nset -euo pipefail\necho provision\n"

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []File
	}{
		{
			name: "plain",
			in: `#cloud-config
write_files:
- path: /opt/azure/containers/provision.sh
  permissions: "0744"
  owner: root
  content: |
    #!/usr/bin/env bash
    set -euo pipefail
    echo provision
bootcmd:
- echo ignored
`,
			want: []File{{Path: "/opt/azure/containers/provision.sh", Mode: 0o744, Content: []byte(script)}},
		},
		{
			name: "gzip-binary",
			in: "write_files:\n- path: /opt/azure/containers/provision.sh\n  permissions: \"0744\"\n  encoding: gzip\n  owner: root\n  content: !!binary |\n" +
				indent(gz(t, script)),
			want: []File{{Path: "/opt/azure/containers/provision.sh", Mode: 0o744, Content: []byte(script)}},
		},
		{
			name: "b64",
			in:   "write_files:\n- path: /etc/x.conf\n  encoding: b64\n  content: " + base64.StdEncoding.EncodeToString([]byte(script)) + "\n",
			want: []File{{Path: "/etc/x.conf", Mode: 0o644, Content: []byte(script)}},
		},
		{
			name: "base64-block",
			in:   "write_files:\n- path: /etc/x.conf\n  encoding: base64\n  content: |\n" + indent([]byte(strings.Repeat(script, 10))),
			want: []File{{Path: "/etc/x.conf", Mode: 0o644, Content: []byte(strings.Repeat(script, 10))}},
		},
		{
			name: "gz+b64",
			in:   "write_files:\n- path: /etc/x.conf\n  encoding: gz+b64\n  content: " + base64.StdEncoding.EncodeToString(gz(t, script)) + "\n",
			want: []File{{Path: "/etc/x.conf", Mode: 0o644, Content: []byte(script)}},
		},
		{
			name: "gzip+base64-upper",
			in:   "write_files:\n- path: /etc/x.conf\n  encoding: GZIP+BASE64\n  content: " + base64.StdEncoding.EncodeToString(gz(t, script)) + "\n",
			want: []File{{Path: "/etc/x.conf", Mode: 0o644, Content: []byte(script)}},
		},
		{
			name: "gz-alias",
			in:   "write_files:\n- path: /etc/x.conf\n  encoding: gz\n  content: !!binary " + base64.StdEncoding.EncodeToString(gz(t, "x")) + "\n",
			want: []File{{Path: "/etc/x.conf", Mode: 0o644, Content: []byte("x")}},
		},
		{
			name: "text-plain",
			in:   "write_files:\n- path: /etc/x\n  encoding: text/plain\n  content: hello\n",
			want: []File{{Path: "/etc/x", Mode: 0o644, Content: []byte("hello")}},
		},
		{
			name: "modes",
			in: `write_files:
- {path: /a, permissions: "0755"}
- {path: /b, permissions: 0600}
- {path: /c, permissions: "644"}
- {path: /d, permissions: "0o700"}
- {path: /e, owner: "root:root"}
`,
			want: []File{
				{Path: "/a", Mode: 0o755, Content: []byte{}},
				{Path: "/b", Mode: 0o600, Content: []byte{}},
				{Path: "/c", Mode: 0o644, Content: []byte{}},
				{Path: "/d", Mode: 0o700, Content: []byte{}},
				{Path: "/e", Mode: 0o644, Content: []byte{}},
			},
		},
		{
			name: "cleaned",
			in:   "write_files:\n- path: /opt//azure/./x.sh\n  content: x\n",
			want: []File{{Path: "/opt/azure/x.sh", Mode: 0o644, Content: []byte("x")}},
		},
		{name: "no-write-files", in: "#cloud-config\nbootcmd:\n- echo hi\n", want: []File{}},
		{name: "empty", in: "", want: []File{}},
		{name: "null-write-files", in: "write_files:\n", want: []File{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	bomb := gz(t, strings.Repeat("\x00", maxFileSize+1))
	tests := []struct {
		name string
		in   string
	}{
		{name: "no-path", in: "write_files:\n- content: x\n"},
		{name: "relative", in: "write_files:\n- path: opt/x\n"},
		{name: "dotdot", in: "write_files:\n- path: /opt/../etc/shadow\n"},
		{name: "dotdot-clean-looking", in: "write_files:\n- path: /../x\n"},
		{name: "root-dir", in: "write_files:\n- path: /\n"},
		{name: "dir", in: "write_files:\n- path: /opt/\n"},
		{name: "owner-user", in: "write_files:\n- path: /x\n  owner: azureuser\n"},
		{name: "owner-group", in: "write_files:\n- path: /x\n  owner: root:adm\n"},
		{name: "mode-garbage", in: "write_files:\n- path: /x\n  permissions: rwxr-xr-x\n"},
		{name: "mode-decimal-digit", in: "write_files:\n- path: /x\n  permissions: \"0789\"\n"},
		{name: "mode-too-big", in: "write_files:\n- path: /x\n  permissions: \"017777\"\n"},
		{name: "mode-setuid", in: "write_files:\n- path: /x\n  permissions: \"4755\"\n"},
		{name: "mode-negative", in: "write_files:\n- path: /x\n  permissions: \"-644\"\n"},
		{name: "encoding-unknown", in: "write_files:\n- path: /x\n  encoding: zstd\n  content: x\n"},
		{name: "bad-base64", in: "write_files:\n- path: /x\n  encoding: b64\n  content: '!!!'\n"},
		{name: "bad-gzip", in: "write_files:\n- path: /x\n  encoding: gzip\n  content: not gzip\n"},
		{name: "gzip-bomb", in: "write_files:\n- path: /x\n  encoding: gz+b64\n  content: " + base64.StdEncoding.EncodeToString(bomb) + "\n"},
		{name: "append", in: "write_files:\n- path: /x\n  append: true\n  content: x\n"},
		{name: "source", in: "write_files:\n- path: /x\n  source: {uri: 'https://example.com/x'}\n"},
		{name: "duplicate", in: "write_files:\n- path: /x\n- path: /./x\n"},
		{name: "content-map", in: "write_files:\n- path: /x\n  content: {a: b}\n"},
		{name: "write-files-scalar", in: "write_files: yes\n"},
		{name: "not-a-map", in: "- write_files\n"},
		{name: "bad-yaml", in: "write_files: [\n"},
		{name: "too-large", in: "#" + strings.Repeat("x", MaxInputSize)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := Parse([]byte(tt.in)); err == nil {
				t.Errorf("Parse = %d files, want an error", len(got))
			}
		})
	}
}

func TestParseTotalSizeCapped(t *testing.T) {
	t.Parallel()
	// Each file is under the per-file cap; together they exceed the total.
	part := base64.StdEncoding.EncodeToString(gz(t, strings.Repeat("a", maxFileSize)))
	var in strings.Builder
	in.WriteString("write_files:\n")
	for i := range maxTotalSize/maxFileSize + 1 {
		in.WriteString("- path: /f" + string(rune('a'+i)) + "\n  encoding: gz+b64\n  content: " + part + "\n")
	}
	if _, err := Parse([]byte(in.String())); err == nil {
		t.Error("Parse = nil, want an error past the total size cap")
	}
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got[rel] = fi.Mode().String() + " " + string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestApply(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	existing := filepath.Join(root, "opt/azure/containers/provision.sh")
	if err := os.MkdirAll(filepath.Dir(existing), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(existing, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := Parse([]byte(`write_files:
- path: /opt/azure/containers/provision.sh
  permissions: "0744"
  content: new
- path: /etc/new/dir/x.conf
  content: conf
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(root, files); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := map[string]string{
		"opt/azure/containers/provision.sh": "-rwxr--r-- new",
		"etc/new/dir/x.conf":                "-rw-r--r-- conf",
	}
	if diff := cmp.Diff(want, readTree(t, root)); diff != "" {
		t.Errorf("tree after Apply (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/new/dir"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("new parent dir: %v, %v; want mode 0755", fi, err)
	}
}

func TestApplySymlinkReplacedNotFollowed(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	victim := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(victim, []byte("root:x:0:0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(root, "x.sh")); err != nil {
		t.Fatal(err)
	}
	if err := Apply(root, []File{{Path: "/x.sh", Mode: 0o755, Content: []byte("new")}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0" {
		t.Errorf("symlink target = %q, want it unchanged", b)
	}
	if fi, err := os.Lstat(filepath.Join(root, "x.sh")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("x.sh = %v, %v; want a regular file", fi, err)
	}
}

func TestParseThenApplyBadEntryWritesNothing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	in := []byte(`write_files:
- path: /opt/azure/containers/a.sh
  content: a
- path: /opt/azure/containers/b.sh
  owner: azureuser
  content: b
- path: /opt/azure/containers/c.sh
  content: c
`)
	files, err := Parse(in)
	if err == nil {
		t.Fatalf("Parse = %d files, want an error for the non-root owner", len(files))
	}
	// The caller applies nothing on a parse error; Apply itself also checks
	// every path before writing.
	if err := Apply(root, []File{
		{Path: "/opt/azure/containers/a.sh", Mode: 0o644, Content: []byte("a")},
		{Path: "relative", Mode: 0o644},
	}); err == nil {
		t.Error("Apply with a relative path = nil, want an error")
	}
	if got := readTree(t, root); len(got) != 0 {
		t.Errorf("tree = %v, want nothing written", got)
	}
}

func TestApplyNoFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files, err := Parse([]byte("#cloud-config\nruncmd: [reboot]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(root, files); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := readTree(t, root); len(got) != 0 {
		t.Errorf("tree = %v, want empty", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("write_files:\n- path: /x\n  permissions: \"0744\"\n  content: hi\n"))
	f.Add([]byte("write_files:\n- path: /x\n  encoding: gzip\n  content: !!binary H4sIAAAAAAAA/8tIzcnJBwCGphA2BQAAAA==\n"))
	f.Add([]byte("write_files:\n- path: /x\n  encoding: gz+b64\n  content: H4sIAAAAAAAA/8tIzcnJBwCGphA2BQAAAA==\n"))
	f.Add([]byte("a: &a [*a, *a]\nwrite_files: *a\n"))
	f.Add([]byte("write_files:\n- {path: /../x, owner: root:root, permissions: 0o7777}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := Parse(data)
		if err != nil {
			return
		}
		total := 0
		for _, f := range files {
			if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path || hasDotDot(f.Path) {
				t.Errorf("Parse accepted path %q", f.Path)
			}
			if f.Mode&^0o777 != 0 {
				t.Errorf("Parse accepted mode %v", f.Mode)
			}
			if len(f.Content) > maxFileSize {
				t.Errorf("Parse returned %d bytes for %q", len(f.Content), f.Path)
			}
			total += len(f.Content)
		}
		if total > maxTotalSize {
			t.Errorf("Parse returned %d bytes in total", total)
		}
	})
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}
