package features

import "errors"

// HotfixKey turns the provisioning-hotfix path on when set to exactly "true".
const HotfixKey = "ENABLE_PROVISIONING_HOTFIX"

// Limits of a features file; a file over either is void. Producers write a
// few short lines, so either limit means the file is not theirs.
const (
	MaxSize  = 64 << 10 // bytes
	MaxLines = 256
)

// ErrInvalid is returned, wrapped with the reason, for a file that is void
// as a whole: every feature is then off.
var ErrInvalid = errors.New("invalid features file")

// ValidKey reports whether k is an ASCII shell identifier,
// [A-Za-z_][A-Za-z0-9_]*.
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

// HotfixEnabled reports whether m turns the hotfix path on: only the exact
// value "true" does.
func HotfixEnabled(m map[string]string) bool { return m[HotfixKey] == "true" }

// File is the content of a features file that is not void. The zero File
// has no features.
type File struct {
	// Values holds every pair with a valid key, reserved keys included. It
	// is what the file says, for decisions such as HotfixEnabled; it is
	// never an environment.
	Values map[string]string
	// Accepted holds, in file order, the pairs whose key is not Reserved:
	// the only pairs a child's environment may receive (see Env).
	Accepted []Pair
	// Notes says, in file order, why a line was skipped or refused.
	Notes []Note
}

// Pair is one KEY=VALUE line.
type Pair struct {
	Key, Value string
}

// Note says why a line contributes nothing to a child's environment.
type Note struct {
	Line   int    // 1-based
	Reason string // e.g. "not KEY=VALUE", "reserved key PATH (shell variable)"
}

// HotfixEnabled reports whether f turns the hotfix path on: only the exact
// value "true" does.
func (f File) HotfixEnabled() bool { return HotfixEnabled(f.Values) }

// Env returns the accepted pairs as "KEY=VALUE" strings in file order, for
// the environment of a child that consumes the flags (append it to the
// child's exec.Cmd.Env). The slice is new on every call.
func (f File) Env() []string {
	env := make([]string, 0, len(f.Accepted))
	for _, p := range f.Accepted {
		env = append(env, p.Key+"="+p.Value)
	}
	return env
}
