package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"empty", "", 4, ""},
		{"under", "abc", 4, "abc"},
		{"exact", "abcd", 4, "abcd"},
		{"over", "abcdef", 4, "abcd"},
		{"zero", "abc", 0, ""},
		{"negative", "abc", -1, ""},
		{"before a rune", "ab€", 2, "ab"},
		{"inside a rune", "ab€", 3, "ab"},
		{"inside a rune by two", "ab€", 4, "ab"},
		{"after a rune", "ab€c", 5, "ab€"},
		{"four-byte rune", "😀x", 3, ""},
		{"invalid bytes", "a\xff\xfeb", 2, "a\xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Bytes(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("Bytes(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if tc.n > 0 && len(got) > tc.n {
				t.Errorf("Bytes(%q, %d) is %d bytes", tc.s, tc.n, len(got))
			}
			if utf8.ValidString(tc.s) && !utf8.ValidString(got) {
				t.Errorf("Bytes(%q, %d) = %q, not valid UTF-8", tc.s, tc.n, got)
			}
		})
	}
}

func TestEllipsis(t *testing.T) {
	if got := Ellipsis("abc", 3); got != "abc" {
		t.Errorf("Ellipsis(abc, 3) = %q, want abc", got)
	}
	if got := Ellipsis("abcd", 3); got != "abc…" {
		t.Errorf("Ellipsis(abcd, 3) = %q, want abc…", got)
	}
	long := strings.Repeat("é", 40)
	if got := Ellipsis(long, 63); got != strings.Repeat("é", 31)+"…" {
		t.Errorf("Ellipsis(40×é, 63) = %q", got)
	}
}
