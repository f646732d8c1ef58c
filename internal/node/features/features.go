// Package features renders and parses enabled_features.sh, the per-node
// KEY=VALUE flag file the launcher reads as data.
//
// Render is the producer side (custom data); Parse applies the launcher's
// file-level rules so Go tools (explain, tests) read a file exactly as the
// launcher would, except for the launcher's reserved-name denylist, which
// only matters to a shell.
package features

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// HotfixKey turns the provisioning-hotfix path on when set to exactly "true".
const HotfixKey = "ENABLE_PROVISIONING_HOTFIX"

// Limits shared with the launcher.
const (
	MaxSize  = 64 << 10
	MaxLines = 256
)

// ValidKey reports whether k is an ASCII shell identifier.
func ValidKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

// Render produces the file for m: one KEY=VALUE line per entry whose key is
// an identifier and whose value has no CR, LF or NUL, sorted by key, values
// verbatim. It returns nil when no entry survives: then no file is written
// and custom data is byte-identical to a node without features.
func Render(m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if ValidKey(k) && !strings.ContainsAny(v, "\r\n\x00") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m[k])
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ErrInvalid is returned (wrapped) for a file the launcher ignores as a
// whole: every feature is then off.
var ErrInvalid = errors.New("invalid features file")

// Parse reads a features file as the launcher does. A file that is too
// large, has too many lines, contains CR or NUL, or sets a key twice is
// invalid as a whole. Blank lines, comments and malformed lines are skipped.
// Values are verbatim: no quote removal, trimming or expansion.
func Parse(data []byte) (map[string]string, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrInvalid, len(data), MaxSize)
	}
	if i := bytes.IndexByte(data, '\r'); i >= 0 {
		return nil, fmt.Errorf("%w: CR at line %d", ErrInvalid, bytes.Count(data[:i], []byte("\n"))+1)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, fmt.Errorf("%w: NUL at line %d", ErrInvalid, bytes.Count(data[:i], []byte("\n"))+1)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(data) == 0 {
		lines = nil
	}
	if len(lines) > MaxLines {
		return nil, fmt.Errorf("%w: %d lines exceeds %d", ErrInvalid, len(lines), MaxLines)
	}
	out := make(map[string]string)
	for i, line := range lines {
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !ValidKey(k) {
			continue
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: key %s set twice (line %d)", ErrInvalid, k, i+1)
		}
		out[k] = v
	}
	return out, nil
}

// HotfixEnabled reports whether m turns the hotfix path on.
func HotfixEnabled(m map[string]string) bool { return m[HotfixKey] == "true" }
