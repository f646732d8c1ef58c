// Package quote renders untrusted strings for operator-facing text.
package quote

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s unchanged when it is valid UTF-8 and every rune is printable
// (unicode.IsPrint, whose only space is U+0020), and strconv.Quote(s)
// otherwise. Control characters (tab, CR, ESC and the terminal sequences it
// starts), format characters such as bidi overrides, and invalid bytes thus
// show as escapes and are never interpreted by a terminal. Text is safe for
// concurrent use.
func Text(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, notPrint) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func notPrint(r rune) bool { return !unicode.IsPrint(r) }
