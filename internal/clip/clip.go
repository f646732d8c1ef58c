// Package clip cuts untrusted or unbounded text to a byte limit on a UTF-8 rune boundary.
package clip

import "unicode/utf8"

// Bytes returns s cut to at most n bytes, never inside a UTF-8 sequence
// (it may return fewer than n bytes). n <= 0 gives "".
func Bytes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Ellipsis is Bytes with "…" appended when s was cut, for error messages
// that quote a caller's string.
func Ellipsis(s string, n int) string {
	c := Bytes(s, n)
	if len(c) < len(s) {
		return c + "…"
	}
	return c
}
