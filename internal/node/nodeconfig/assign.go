package nodeconfig

import "strings"

// ParseAssignments extracts NAME=value assignments from a bash command line
// such as nbc-cmd.sh, without executing or expanding anything. It follows
// bash word splitting closely enough for the generated file:
//
//   - words are separated by unquoted blanks, newlines and the operators
//     ; & | ( ) < >;
//   - a word is an assignment when it starts with [A-Za-z_][A-Za-z0-9_]*=;
//     other words are skipped;
//   - a value concatenates unquoted text, '…' (literal) and "…" segments; a
//     backslash escapes the next character outside single quotes (inside
//     double quotes only before $ ` " \ and newline, as bash does);
//   - "$…" and backticks are kept literally, never expanded;
//   - the last assignment of a name wins.
//
// Unlike the reference scanner, an unquoted value is not cut where an
// upper-case "NAME=" appears inside it, so unquoted base64 with '=' padding
// survives intact.
func ParseAssignments(s string) map[string]string {
	env := make(map[string]string)
	for _, w := range splitWords(s) {
		name, val, ok := strings.Cut(w, "=")
		if !ok || !isName(name) {
			continue
		}
		env[name] = val
	}
	return env
}

// splitWords performs quote removal and word splitting. A word's name part
// is never quoted in an assignment, so removing quotes before recognising
// assignments is safe: a quoted "NAME=x" word is not an assignment in bash,
// and quoting is tracked to keep it from being recognised here.
func splitWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quotedPrefix := false, false
	flush := func() {
		if inWord && !quotedPrefix {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord, quotedPrefix = false, false
	}
	// markQuoted records that a quote appeared before the first '=', which
	// makes the word a plain argument rather than an assignment.
	markQuoted := func() {
		if !strings.Contains(cur.String(), "=") {
			quotedPrefix = true
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || strings.IndexByte(";&|()<>", c) >= 0:
			flush()
		case c == '\\':
			inWord = true
			if i+1 < len(s) {
				i++
				if s[i] != '\n' { // backslash-newline is a line continuation
					markQuoted()
					cur.WriteByte(s[i])
				}
			}
		case c == '\'':
			inWord = true
			markQuoted()
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				cur.WriteString(s[i+1:])
				i = len(s)
				break
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			inWord = true
			markQuoted()
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	flush()
	return words
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
