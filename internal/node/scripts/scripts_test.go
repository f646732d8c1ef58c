package scripts

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io/fs"
	"maps"
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
			got, err := Parse([]byte(tt.in), Options{})
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
			if got, err := Parse([]byte(tt.in), Options{}); err == nil {
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
	if _, err := Parse([]byte(in.String()), Options{}); err == nil {
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
		rel, _ := filepath.Rel(root, p)
		if d.Type()&fs.ModeSymlink != 0 {
			l, err := os.Readlink(p)
			got[rel] = "-> " + l
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
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(root, files, Options{}); err != nil {
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
	if err := Apply(root, []File{{Path: "/x.sh", Mode: 0o755, Content: []byte("new")}}, Options{}); err != nil {
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
	files, err := Parse(in, Options{})
	if err == nil {
		t.Fatalf("Parse = %d files, want an error for the non-root owner", len(files))
	}
	// The caller applies nothing on a parse error; Apply itself also checks
	// every path before writing.
	if err := Apply(root, []File{
		{Path: "/opt/azure/containers/a.sh", Mode: 0o644, Content: []byte("a")},
		{Path: "relative", Mode: 0o644},
	}, Options{}); err == nil {
		t.Error("Apply with a relative path = nil, want an error")
	}
	if got := readTree(t, root); len(got) != 0 {
		t.Errorf("tree = %v, want nothing written", got)
	}
}

func TestApplyNoFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files, err := Parse([]byte("#cloud-config\nruncmd: [reboot]\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(root, files, Options{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := readTree(t, root); len(got) != 0 {
		t.Errorf("tree = %v, want empty", got)
	}
}

// TestParsePermissionsAsCloudInit: permissions mean what cloud-init makes of
// them (PyYAML's YAML 1.1 types, then util.decode_perms), and what it could
// not decode, or decodes to a mode no script needs, is refused.
func TestParsePermissionsAsCloudInit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]fs.FileMode{
		`420`: 0o644, `0644`: 0o644, `"0644"`: 0o644, `'644'`: 0o644, `"0o755"`: 0o755, `0o755`: 0o755,
		`0x1ed`: 0o755, `0b111101101`: 0o755, `493.9`: 0o755, `0_644`: 0o644, `" 0644 "`: 0o644, `!!str 0600`: 0o600,
		`"6_4_4"`: 0o644, `"+644"`: 0o644, `0`: 0, `"0"`: 0, `'0o_755'`: 0o755, `!!int 0644`: 0o644, `!!float 420`: 0o644,
	} {
		files, err := Parse([]byte("write_files:\n- path: /x\n  permissions: "+in+"\n"), Options{})
		if err != nil || len(files) != 1 || files[0].Mode != want {
			t.Errorf("permissions %s = %v, %v; want %#o", in, files, err, want)
		}
	}
	for _, in := range []string{
		`644`,       // decimal 644 is 0o1204: the sticky bit
		`"0789"`,    // int('0789', 8) fails: cloud-init would fall back to its default
		`rwxr-xr-x`, // likewise
		`true`,      // a bool is an int to Python: mode 1
		`"-644"`, `-420`, `1:30`, `.inf`, `1e3`, `"0x1ed"`, `"6__44"`, `[644]`, `{a: 1}`, `"4755"`, `017777`,
		`_755`, `'_755'`, `'+_755'`, // int('_755', 8) fails
		`!!float 0644`, `!!float '0755'`, // floats 644.0 and 755.0: special bits
		`!!bool 0755`, `!!timestamp 0755`, `!foo 0755`, `!!int 0o7x`, // PyYAML cannot construct these
		`2001-01-01`,
	} {
		if files, err := Parse([]byte("write_files:\n- path: /x\n  permissions: "+in+"\n"), Options{}); err == nil {
			t.Errorf("permissions %s = %v, want an error", in, files)
		}
	}
	// Null is cloud-init's "not set": the default, unless permissions are
	// required.
	for _, in := range []string{"~", "null", "", "!!null 0755"} {
		doc := "write_files:\n- path: /x\n  content: x\n  permissions: " + in + "\n"
		if files, err := Parse([]byte(doc), Options{}); err != nil || files[0].Mode != 0o644 {
			t.Errorf("permissions %q = %v, %v; want the default", in, files, err)
		}
		if _, err := Parse([]byte(doc), Embedded); err == nil {
			t.Errorf("permissions %q accepted where they are required", in)
		}
	}
}

// TestParseRefusesNonTextContent: content that YAML types as a number, a
// boolean or a date is an error in cloud-init, not its digits written out.
func TestParseRefusesNonTextContent(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"0755", "yes", "2001-01-01", "1.5"} {
		if files, err := Parse([]byte("write_files:\n- path: /x\n  content: "+in+"\n"), Options{}); err == nil {
			t.Errorf("content %s = %v, want an error", in, files)
		}
	}
	for in, want := range map[string]string{`"0755"`: "0755", "~": "", "text": "text"} {
		if files, err := Parse([]byte("write_files:\n- path: /x\n  content: "+in+"\n"), Options{}); err != nil || string(files[0].Content) != want {
			t.Errorf("content %s = %v, %v; want %q", in, files, err, want)
		}
	}
}

// TestParseEmbeddedOptions: the reference's checks for embedded payloads.
func TestParseEmbeddedOptions(t *testing.T) {
	t.Parallel()
	ok := "write_files:\n- path: /opt/azure/containers/x.sh\n  permissions: \"0744\"\n  content: hi\n"
	if _, err := Parse([]byte(ok), Embedded); err != nil {
		t.Fatalf("a good payload: %v", err)
	}
	for name, in := range map[string]string{
		"unknown-key":    "write_files:\n- path: /x\n  permissions: \"0744\"\n  content: hi\n  mode: 1\n",
		"defer":          "write_files:\n- path: /x\n  permissions: \"0744\"\n  content: hi\n  defer: true\n",
		"no-permissions": "write_files:\n- path: /x\n  content: hi\n",
		"empty-content":  "write_files:\n- path: /x\n  permissions: \"0744\"\n  content: \"\"\n",
		"no-content":     "write_files:\n- path: /x\n  permissions: \"0744\"\n",
	} {
		if _, err := Parse([]byte(in), Embedded); err == nil {
			t.Errorf("%s: accepted under Embedded", name)
		}
		if name != "unknown-key" && name != "defer" {
			if _, err := Parse([]byte(in), Options{}); err != nil {
				t.Errorf("%s: refused without the option: %v", name, err)
			}
		}
	}
}

// TestApplyAllOrNothing: a write that fails part way puts back every file
// written before it, new ones removed, a replaced symlink restored.
func TestApplyAllOrNothing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "opt/azure/containers")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "a.sh"), []byte("old a"), 0o700)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	before := readTree(t, root)
	err := Apply(root, []File{
		{Path: "/opt/azure/containers/a.sh", Mode: 0o755, Content: []byte("new a")},
		{Path: "/opt/azure/containers/b.sh", Mode: 0o755, Content: []byte("new b")},
		{Path: "/opt/azure/containers/link", Mode: 0o644, Content: []byte("not a link")},
		{Path: "/opt/azure/containers/d", Mode: 0o644, Content: []byte("d")},
		// d is a file by now: this write fails, after four others.
		{Path: "/opt/azure/containers/d/x", Mode: 0o644, Content: []byte("x")},
	}, Options{})
	if err == nil || !strings.Contains(err.Error(), "restored") {
		t.Fatalf("Apply = %v, want the failure and the restore", err)
	}
	if after := readTree(t, root); !maps.Equal(after, before) {
		t.Errorf("tree after a failed apply = %v, want %v", after, before)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a.sh")); fi.Mode().Perm() != 0o700 {
		t.Errorf("a.sh mode = %v, want its old 0700", fi.Mode())
	}
	if l, err := os.Readlink(filepath.Join(dir, "link")); err != nil || l != "/etc/passwd" {
		t.Errorf("link = %q, %v; want the old symlink back", l, err)
	}
}

// TestApplyReplaceOnlyAndUnsafePaths: under Embedded a payload only replaces
// regular files that exist, never through a symlinked directory, and a
// refusal writes nothing.
func TestApplyReplaceOnlyAndUnsafePaths(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "opt/azure/containers")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "a.sh"), []byte("old"), 0o644)
	elsewhere := t.TempDir()
	os.WriteFile(filepath.Join(elsewhere, "b.sh"), []byte("outside"), 0o644)
	os.Symlink(elsewhere, filepath.Join(dir, "linkdir"))
	os.Symlink(filepath.Join(dir, "a.sh"), filepath.Join(dir, "alink.sh"))
	good := File{Path: "/opt/azure/containers/a.sh", Mode: 0o755, Content: []byte("new")}
	for name, bad := range map[string]File{
		"missing":        {Path: "/opt/azure/containers/new.sh", Mode: 0o755, Content: []byte("x")},
		"through-a-link": {Path: "/opt/azure/containers/linkdir/b.sh", Mode: 0o755, Content: []byte("x")},
		"onto-a-link":    {Path: "/opt/azure/containers/alink.sh", Mode: 0o755, Content: []byte("x")},
		"onto-a-dir":     {Path: "/opt/azure", Mode: 0o755, Content: []byte("x")},
	} {
		before := readTree(t, root)
		if err := Apply(root, []File{good, bad}, Embedded); err == nil {
			t.Errorf("%s: Apply = nil, want a refusal", name)
		}
		if after := readTree(t, root); !maps.Equal(after, before) {
			t.Errorf("%s: a refused apply changed the tree", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(elsewhere, "b.sh")); string(b) != "outside" {
		t.Errorf("wrote through a symlinked directory: %q", b)
	}
	if err := Apply(root, []File{good}, Embedded); err != nil {
		t.Fatalf("replacing an existing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("write_files:\n- path: /x\n  permissions: \"0744\"\n  content: hi\n"))
	f.Add([]byte("write_files:\n- path: /x\n  encoding: gzip\n  content: !!binary H4sIAAAAAAAA/8tIzcnJBwCGphA2BQAAAA==\n"))
	f.Add([]byte("write_files:\n- path: /x\n  encoding: gz+b64\n  content: H4sIAAAAAAAA/8tIzcnJBwCGphA2BQAAAA==\n"))
	f.Add([]byte("a: &a [*a, *a]\nwrite_files: *a\n"))
	f.Add([]byte("write_files:\n- {path: /../x, owner: root:root, permissions: 0o7777}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := Parse(data, Options{})
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
