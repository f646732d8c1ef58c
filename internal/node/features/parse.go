package features

import (
	"bytes"
	"fmt"
	"strings"
)

// maxNoteKey bounds how much of an invalid key a Note quotes, so one bad
// line cannot turn into a 64 KiB log line.
const maxNoteKey = 64

// Parse applies Read's content rules to data, the content of a features
// file, and returns every pair with a valid key, reserved keys included. A
// file over MaxSize bytes or MaxLines lines, with a CR or NUL anywhere, or
// setting a key twice, is void: the error wraps ErrInvalid. Blank lines,
// '#' lines and malformed lines are skipped. Values are verbatim: no quote
// removal, trimming, comment stripping or expansion.
func Parse(data []byte) (map[string]string, error) {
	f, err := parse(data)
	if err != nil {
		return nil, err
	}
	return f.Values, nil
}

// parse is Parse, keeping what a reader needs besides the values.
func parse(data []byte) (File, error) {
	if len(data) > MaxSize {
		return File{}, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxSize)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return File{}, fmt.Errorf("%w: contains a NUL byte at line %d", ErrInvalid, lineOf(data, i))
	}
	if i := bytes.IndexByte(data, '\r'); i >= 0 {
		return File{}, fmt.Errorf("%w: contains a carriage return at line %d (CRLF line endings?)", ErrInvalid, lineOf(data, i))
	}
	var lines []string
	if len(data) > 0 {
		lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	}
	if len(lines) > MaxLines {
		return File{}, fmt.Errorf("%w: more than %d lines", ErrInvalid, MaxLines)
	}
	f := File{Values: make(map[string]string)}
	firstLine := make(map[string]int)
	for i, line := range lines {
		n := i + 1
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			f.Notes = append(f.Notes, Note{Line: n, Reason: "not KEY=VALUE"})
			continue
		}
		if !ValidKey(k) {
			f.Notes = append(f.Notes, Note{Line: n, Reason: "invalid key " + quoteKey(k)})
			continue
		}
		if first, dup := firstLine[k]; dup {
			return File{}, fmt.Errorf("%w: key %s set twice (lines %d and %d)", ErrInvalid, k, first, n)
		}
		firstLine[k] = n
		f.Values[k] = v
		if why, reserved := Reserved(k); reserved {
			f.Notes = append(f.Notes, Note{Line: n, Reason: fmt.Sprintf("reserved key %s (%s)", k, why)})
			continue
		}
		f.Accepted = append(f.Accepted, Pair{Key: k, Value: v})
	}
	return f, nil
}

// lineOf returns the 1-based line of data[i].
func lineOf(data []byte, i int) int { return bytes.Count(data[:i], []byte("\n")) + 1 }

// quoteKey quotes k for a Note, escaping control bytes and eliding all but
// its first maxNoteKey bytes.
func quoteKey(k string) string {
	if len(k) > maxNoteKey {
		return fmt.Sprintf("%q...", k[:maxNoteKey])
	}
	return fmt.Sprintf("%q", k)
}
