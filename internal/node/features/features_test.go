package features

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRender(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   map[string]string
		want string
	}{
		{"nil map renders nothing", nil, ""},
		{"empty map renders nothing", map[string]string{}, ""},
		{"sorted, verbatim", map[string]string{"ZED": "1", HotfixKey: "true", "a_b": `"q" x=y`}, "ENABLE_PROVISIONING_HOTFIX=true\nZED=1\na_b=\"q\" x=y\n"},
		{"invalid keys skipped", map[string]string{"1A": "x", "A-B": "x", "": "x", "OK": "1"}, "OK=1\n"},
		{"values with newlines skipped", map[string]string{"A": "x\ny", "B": "x\r", "C": "x\x00", "D": "ok"}, "D=ok\n"},
		{"nothing survives", map[string]string{"A B": "x"}, ""},
	}
	for _, tt := range tests {
		if got := string(Render(tt.in)); got != tt.want {
			t.Errorf("%s: Render = %q, want %q", tt.name, got, tt.want)
		}
	}
}

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
		{name: "final line without newline", in: "A=1\nB=2", want: map[string]string{"A": "1", "B": "2"}},
		{name: "value verbatim", in: "A=a=b=\nB=\"true\"\nC=true # c\nD= x", want: map[string]string{"A": "a=b=", "B": `"true"`, "C": "true # c", "D": " x"}},
		{name: "skipped lines", in: "# comment\n\n export A=1\nexport B=2\nC\n C=3\n1X=y", want: map[string]string{}},
		{name: "expansion is not performed", in: "A=$(reboot)\nB=`id`", want: map[string]string{"A": "$(reboot)", "B": "`id`"}},
		{name: "CRLF invalidates the file", in: "A=1\nENABLE_PROVISIONING_HOTFIX=true\r\n", wantErr: "CR at line 2"},
		{name: "NUL invalidates", in: "A=\x00", wantErr: "NUL at line 1"},
		{name: "duplicate invalidates", in: "A=1\nA=2\n", wantErr: "set twice"},
		{name: "too many lines", in: strings.Repeat("#\n", MaxLines+1), wantErr: "lines"},
		{name: "too large", in: strings.Repeat("a", MaxSize+1), wantErr: "exceeds"},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.in))
		if tt.wantErr != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: Parse error = %v, want %q", tt.name, err, tt.wantErr)
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

func TestHotfixEnabled(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"true": true, "1": false, "TRUE": false, `"true"`: false, "true ": false, "": false} {
		if got := HotfixEnabled(map[string]string{HotfixKey: v}); got != want {
			t.Errorf("HotfixEnabled(%q) = %v, want %v", v, got, want)
		}
	}
}

// FuzzRenderParse checks that whatever a producer renders, the parser reads
// back exactly the entries the producer kept.
func FuzzRenderParse(f *testing.F) {
	f.Add("ENABLE_PROVISIONING_HOTFIX", "true", "B", "x=y")
	f.Add("A", "a\nb", "A B", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		data := Render(in)
		got, err := Parse(data)
		if len(data) > MaxSize {
			return
		}
		if err != nil {
			t.Fatalf("Parse(Render(%q)) error: %v", in, err)
		}
		for k, v := range got {
			if in[k] != v {
				t.Fatalf("Parse(Render(%q)) has %s=%q", in, k, v)
			}
		}
		if kept := strings.Count(string(data), "\n"); len(got) != kept {
			t.Fatalf("Parse(Render(%q)) read %d entries, rendered %d", in, len(got), kept)
		}
	})
}

// FuzzParse checks that parsing arbitrary input never panics and only
// yields identifier keys with single-line values.
func FuzzParse(f *testing.F) {
	f.Add([]byte("A=1\n"))
	f.Add([]byte("A=1\r\n"))
	f.Add([]byte("\n\n=\n#x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		for k, v := range m {
			if !ValidKey(k) || strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("Parse(%q) produced %q=%q", data, k, v)
			}
		}
	})
}
