package quote

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"plain", "202604.01.0", "202604.01.0"},
		{"space", "hello world", "hello world"},
		{"empty", "", ""},
		{"unicode", "héllo wörld 日本", "héllo wörld 日本"},
		{"quote-char", `say "hi"`, `say "hi"`},
		{"replacement-char", "a\uFFFDb", "a\uFFFDb"},
		{"escape", "\x1b[31mred", `"\x1b[31mred"`},
		{"carriage-return", "a\rb", `"a\rb"`},
		{"newline", "a\nb", `"a\nb"`},
		{"tab", "tab\there", `"tab\there"`},
		{"nul", "a\x00b", `"a\x00b"`},
		{"invalid-utf8", "\xff", `"\xff"`},
		{"bidi-override", "abc\u202edef", `"abc\u202edef"`},
		{"no-break-space", "a\u00a0b", `"a\u00a0b"`},
		{"c1-control", "a\u009bb", `"a\u009bb"`},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func FuzzText(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[31mred", "a\rb", "\xff", "tab\there"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if got == s {
			if strings.ContainsFunc(s, unicode.IsControl) || !utf8.ValidString(s) {
				t.Errorf("Text(%q) returned it unchanged", s)
			}
			return
		}
		back, err := strconv.Unquote(got)
		if err != nil || back != s {
			t.Errorf("Text(%q) = %s, which unquotes to %q, %v", s, got, back, err)
		}
	})
}
