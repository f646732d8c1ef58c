// Package uuid checks the textual UUIDs the system takes from outside: a
// VM's and a subscription's IDs in an attested document, a node's boot ID
// in a report, a vmId in an emulator path.
package uuid

import "strings"

// Canonical reports whether s is a UUID in the 8-4-4-4-12 hex form, in
// either case, and returns it in lower case.
func Canonical(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return "", false
			}
		}
	}
	return strings.ToLower(s), true
}
