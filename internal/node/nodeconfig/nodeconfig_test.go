package nodeconfig

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

var testCAB64 = base64.StdEncoding.EncodeToString([]byte(testCA))

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveTarget(t *testing.T) {
	t.Parallel()
	nbc := `API_SERVER_NAME=nbc.example.com KUBE_CA_CRT="` + testCAB64 + `" /opt/azure/containers/provision_start.sh`
	tests := []struct {
		name    string
		config  string // "" = absent
		nbcCmd  string // "" = absent
		want    Target
		wantErr string
	}{
		{
			name:   "snake_case config",
			config: `{"version":"v1","api_server_config":{"api_server_name":"api.example.com"},"kubernetes_ca_cert":"` + testCAB64 + `"}`,
			nbcCmd: nbc,
			want:   Target{Host: "api.example.com", CAPEM: []byte(testCA), Source: SourceNodeConfig},
		},
		{
			name:   "camelCase config, port dropped, unknown fields ignored",
			config: `{"apiServerConfig":{"apiServerName":"api.example.com:6443"},"kubernetesCaCert":"` + testCAB64 + `","someFutureField":{"x":1}}`,
			want:   Target{Host: "api.example.com", CAPEM: []byte(testCA), Source: SourceNodeConfig},
		},
		{
			name:   "config without CA is not an error here",
			config: `{"api_server_config":{"api_server_name":"api.example.com"}}`,
			want:   Target{Host: "api.example.com", Source: SourceNodeConfig},
		},
		{
			name:    "config with bad CA base64",
			config:  `{"api_server_config":{"api_server_name":"api.example.com"},"kubernetes_ca_cert":"%%%"}`,
			wantErr: "kubernetes_ca_cert",
		},
		{
			name:   "missing config falls back to nbc-cmd",
			nbcCmd: nbc,
			want:   Target{Host: "nbc.example.com", CAPEM: []byte(testCA), Source: SourceNBCCmd},
		},
		{
			name:   "config without api server name falls back to nbc-cmd",
			config: `{"version":"v1","kubernetes_ca_cert":"` + testCAB64 + `"}`,
			nbcCmd: nbc,
			want:   Target{Host: "nbc.example.com", CAPEM: []byte(testCA), Source: SourceNBCCmd},
		},
		{
			name:   "unparsable config falls back to nbc-cmd",
			config: `{"api_server_config":`,
			nbcCmd: nbc,
			want:   Target{Host: "nbc.example.com", CAPEM: []byte(testCA), Source: SourceNBCCmd},
		},
		{
			name:    "config without name and no nbc-cmd",
			config:  `{"version":"v1"}`,
			wantErr: "api_server_name",
		},
		{
			name:    "neither file",
			wantErr: "no node config",
		},
		{
			name:    "nbc-cmd without API_SERVER_NAME",
			nbcCmd:  `KUBE_CA_CRT="` + testCAB64 + `" /bin/true`,
			wantErr: "API_SERVER_NAME not set",
		},
		{
			name:   "nbc-cmd CA is optional",
			nbcCmd: `API_SERVER_NAME=nbc.example.com /bin/true`,
			want:   Target{Host: "nbc.example.com", Source: SourceNBCCmd},
		},
		{
			name:    "nbc-cmd invalid CA",
			nbcCmd:  `API_SERVER_NAME=nbc.example.com KUBE_CA_CRT="not base64!" /bin/true`,
			wantErr: "KUBE_CA_CRT",
		},
		{
			name:   "nbc-cmd unquoted base64 with padding",
			nbcCmd: `API_SERVER_NAME=nbc.example.com KUBE_CA_CRT=` + testCAB64 + ` /bin/true`,
			want:   Target{Host: "nbc.example.com", CAPEM: []byte(testCA), Source: SourceNBCCmd},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg, nbcPath := filepath.Join(dir, "config.json"), filepath.Join(dir, "nbc-cmd.sh")
			if tt.config != "" {
				writeFile(t, dir, "config.json", tt.config)
			}
			if tt.nbcCmd != "" {
				writeFile(t, dir, "nbc-cmd.sh", tt.nbcCmd)
			}
			got, err := ResolveTarget(cfg, nbcPath)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ResolveTarget error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResolveTarget: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ResolveTarget mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseAssignments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want map[string]string
	}{
		{"unquoted", `A=1 B=two`, map[string]string{"A": "1", "B": "two"}},
		{"double quoted with spaces", `A="x y" B=z`, map[string]string{"A": "x y", "B": "z"}},
		{"single quoted literal", `A='$HOME "q"'`, map[string]string{"A": `$HOME "q"`}},
		{"concatenated segments", `A=a"b c"'d'e`, map[string]string{"A": "ab cde"}},
		{"unquoted base64 keeps padding", `KUBE_CA_CRT=abcK0= NEXT=1`, map[string]string{"KUBE_CA_CRT": "abcK0=", "NEXT": "1"}},
		{"upper-case NAME= inside a value is not split", `A=xB=y`, map[string]string{"A": "xB=y"}},
		{"semicolons and newlines delimit", "A=1;B=2\nC=3&&D=4|E=5", map[string]string{"A": "1", "B": "2", "C": "3", "D": "4", "E": "5"}},
		{"last wins", `A=1 A=2`, map[string]string{"A": "2"}},
		{"honoured after a command", `echo hi A=1`, map[string]string{"A": "1"}},
		{"quoted name is not an assignment", `"A"=1 'B=2'`, map[string]string{}},
		{"backslash escapes", `A=a\ b B="c\"d\$e\x"`, map[string]string{"A": "a b", "B": `c"d$e\x`}},
		{"line continuation", "A=a\\\nb", map[string]string{"A": "ab"}},
		{"expansions kept literal", "A=$(reboot) B=`id`", map[string]string{"A": "$", "B": "`id`"}},
		{"empty value", `A= B=""`, map[string]string{"A": "", "B": ""}},
		{"invalid names skipped", `1A=x -B=y A-B=z`, map[string]string{}},
		{"unterminated quote runs to end", `A="abc`, map[string]string{"A": "abc"}},
		{"lower-case names count", `api_server_name=x`, map[string]string{"api_server_name": "x"}},
	}
	for _, tt := range tests {
		got := ParseAssignments(tt.in)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: ParseAssignments(%q) mismatch (-want +got):\n%s", tt.name, tt.in, diff)
		}
	}
}

func TestColdStartHotfixes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	got, err := ColdStartHotfixes(filepath.Join(dir, "missing.json"))
	if got != nil || err != nil {
		t.Errorf("missing file: ColdStartHotfixes = %v, %v; want nil, nil", got, err)
	}
	p := writeFile(t, dir, "with.json", `{"version":"v1","hotfixes":{"202604.01":"202604.01.2"}}`)
	got, err = ColdStartHotfixes(p)
	if err != nil || !cmp.Equal(got, map[string]string{"202604.01": "202604.01.2"}) {
		t.Errorf("present: ColdStartHotfixes = %v, %v", got, err)
	}
	p = writeFile(t, dir, "without.json", `{"version":"v1"}`)
	if got, err := ColdStartHotfixes(p); got != nil || err != nil {
		t.Errorf("no hotfixes key: ColdStartHotfixes = %v, %v; want nil, nil", got, err)
	}
	p = writeFile(t, dir, "bad.json", `{"hotfixes":`)
	if _, err := ColdStartHotfixes(p); err == nil {
		t.Error("bad JSON: ColdStartHotfixes error = nil, want error")
	}
}

func TestLoadMissing(t *testing.T) {
	t.Parallel()
	if _, err := Load(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want fs.ErrNotExist", err)
	}
}

func FuzzParseAssignments(f *testing.F) {
	for _, s := range []string{`A=1 B="x y"`, `A='$(x)'`, `"A"=1`, "A=a\\\nb", `A="unterminated`, `\`, `'`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for k := range ParseAssignments(s) {
			if !isName(k) {
				t.Fatalf("ParseAssignments(%q) produced invalid name %q", s, k)
			}
		}
	})
}
