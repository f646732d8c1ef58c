package features

import (
	"bytes"
	"sort"
	"strings"
)

// Render produces the file for m: one KEY=VALUE line per entry whose key is
// an identifier and whose value has no CR, LF or NUL, sorted by key, values
// verbatim. Reserved keys are rendered too; Read refuses them on the node.
// It returns nil when no entry survives: then no file is written and custom
// data is byte-identical to a node without features.
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
