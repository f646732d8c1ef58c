package osrelease

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    OSRelease
		wantErr bool
	}{
		{name: "ubuntu", in: "NAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nID=ubuntu\nID_LIKE=debian\n", want: OSRelease{ID: "ubuntu", VersionID: "22.04"}},
		{name: "azurelinux", in: "NAME=\"Microsoft Azure Linux\"\nVERSION=\"3.0.20250910\"\nID=azurelinux\nVERSION_ID=\"3.0\"\n", want: OSRelease{ID: "azurelinux", VersionID: "3.0"}},
		{name: "double-quoted", in: `ID="Ubuntu"`, want: OSRelease{ID: "ubuntu"}},
		{name: "single-quoted", in: `ID='azurelinux'`, want: OSRelease{ID: "azurelinux"}},
		{name: "variant", in: "ID=azurelinux\nVARIANT_ID=\"AzureContainerLinux\"\n", want: OSRelease{ID: "azurelinux", VariantID: "azurecontainerlinux"}},
		{name: "first-id-wins", in: "ID=ubuntu\nID=flatcar\n", want: OSRelease{ID: "ubuntu"}},
		{name: "crlf", in: "ID=mariner\r\n", want: OSRelease{ID: "mariner"}},
		{name: "comments", in: "# ID=flatcar\n\nID=mariner\n", want: OSRelease{ID: "mariner"}},
		{name: "id-like-ignored", in: "ID_LIKE=ubuntu\nID=debian\n", want: OSRelease{ID: "debian"}},
		{name: "missing-id", in: "NAME=Linux\nVERSION_ID=1\n", wantErr: true},
		{name: "empty-id", in: "ID=\"\"\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "long-line", in: "X=" + strings.Repeat("a", 70<<10) + "\nID=ubuntu\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string // path under root → content; "" content with a trailing "/" makes a directory
		want    OSRelease
		wantErr error // nil: success; errAny: any error
	}{
		{name: "etc", files: map[string]string{"etc/os-release": "ID=ubuntu\n"}, want: OSRelease{ID: "ubuntu"}},
		{name: "etc-preferred", files: map[string]string{"etc/os-release": "ID=ubuntu\n", "usr/lib/os-release": "ID=flatcar\n"}, want: OSRelease{ID: "ubuntu"}},
		{name: "usr-lib-fallback", files: map[string]string{"usr/lib/os-release": "ID=azurelinux\n"}, want: OSRelease{ID: "azurelinux"}},
		{name: "missing", files: nil, wantErr: fs.ErrNotExist},
		// A file that exists but cannot be read is an error, not a reason
		// to consult the fallback.
		{name: "unreadable", files: map[string]string{"etc/os-release/": "", "usr/lib/os-release": "ID=ubuntu\n"}, wantErr: errAny},
		{name: "no-id", files: map[string]string{"etc/os-release": "NAME=x\n"}, wantErr: errAny},
		{name: "too-large", files: map[string]string{"etc/os-release": "ID=ubuntu\n" + strings.Repeat("#\n", 40<<10)}, wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for p, content := range tt.files {
				if strings.HasSuffix(p, "/") {
					if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeFile(t, filepath.Join(root, p), content)
			}
			got, err := Read(root)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("ReadOSRelease = %v, want nil", err)
			case tt.wantErr == errAny && err == nil:
				t.Fatalf("ReadOSRelease = %+v, want an error", got)
			case tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("ReadOSRelease = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ReadOSRelease = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// errAny in a table means "some error".
var errAny = errors.New("any error")

func FuzzParse(f *testing.F) {
	f.Add([]byte("ID=ubuntu\nVERSION_ID=\"22.04\"\n"))
	f.Add([]byte("ID='AzureLinux'\r\nVARIANT_ID=azurecontainerlinux\n"))
	f.Add([]byte("ID=\"\n"))
	f.Add([]byte("ID=\"'\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		osr, err := Parse(data)
		if err != nil {
			return
		}
		if osr.ID == "" {
			t.Errorf("Parse(%q) = empty ID without error", data)
		}
		if osr.ID != strings.ToLower(osr.ID) || osr.VariantID != strings.ToLower(osr.VariantID) {
			t.Errorf("Parse(%q) = %+v, not lower-cased", data, osr)
		}
	})
}
