package scripts

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// cloud-init loads custom data with PyYAML, whose YAML 1.1 resolver types a
// plain (unquoted) scalar, and then reads write_files permissions by type
// (util.decode_perms): an integer is the mode as it stands (420 is 0644, and
// 0644 is octal in YAML 1.1, so 420 too), a float is truncated to one, and
// anything else is converted to text and parsed as octal the way Python's
// int(text, 8) does. These patterns are the resolver's, so a payload means
// here what it means to cloud-init. They compile on first use: every agent
// command pays the package's init, and only the script paths match these.
var (
	yaml11Int   = lazyRegexp(`^[-+]?(?:0b[0-1_]+|0[0-7_]+|0|[1-9][0-9_]*|0x[0-9a-fA-F_]+)$`)
	yaml11Sexa  = lazyRegexp(`^[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+$`)
	yaml11Float = lazyRegexp(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	yaml11Bool  = lazyRegexp(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	yaml11Null  = lazyRegexp(`^(?:~|null|Null|NULL|)$`)
	yaml11Time  = lazyRegexp(`^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$`)
	// pythonOctal is what int(text, 8) accepts once it strips whitespace:
	// a sign, an optional 0o prefix, and octal digits with single
	// underscores between them.
	pythonOctal = lazyRegexp(`^[-+]?(?:0[oO]_?)?[0-7](?:_?[0-7])*$`)
)

// lazyRegexp returns a function that compiles expr on its first call and
// returns the same *regexp.Regexp thereafter.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// yaml11Text reports whether PyYAML would load scalar n as text: quoted,
// a block scalar, tagged !!str, or plain and none of YAML 1.1's other
// types. yaml.v3 resolves plain scalars by YAML 1.2, where yes, on and 0644
// mean other things.
func yaml11Text(n *yaml.Node) bool {
	if n.Style&yaml.TaggedStyle != 0 {
		return n.Tag == "!!str"
	}
	if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return true
	}
	for _, re := range []func() *regexp.Regexp{yaml11Null, yaml11Bool, yaml11Int, yaml11Sexa, yaml11Float, yaml11Time} {
		if re().MatchString(n.Value) {
			return false
		}
	}
	return true
}

// errNoPermissions is a permissions key that cloud-init reads as absent
// (null): it would apply its default.
var errNoPermissions = errors.New("permissions not set")

// parsePermissions reads a write_files permissions value as cloud-init does.
// Where cloud-init would log "Undecodable permissions" and fall back to its
// default, or would apply a mode no provisioning script needs (setuid,
// setgid, sticky, a negative number, a boolean read as 1 or 0), it is an
// error: a payload that does not say what it means is refused whole.
func parsePermissions(n *yaml.Node) (fs.FileMode, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, errors.New("permissions: not a scalar")
	}
	v := n.Value
	if n.Style&yaml.TaggedStyle != 0 {
		// An explicit tag decides the type, as it does for PyYAML, which
		// refuses the whole document for a tag it cannot construct.
		switch n.Tag {
		case "!!str":
			return octalText(v)
		case "!!null":
			return 0, errNoPermissions
		case "!!int":
			if !yaml11Int().MatchString(v) {
				return 0, fmt.Errorf("permissions !!int %s: not a YAML 1.1 integer", v)
			}
			return yaml11Integer(v)
		case "!!float":
			return yaml11Truncated(v)
		}
		return 0, fmt.Errorf("permissions %s %s: a tag cloud-init cannot read as a mode", n.Tag, v)
	}
	if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return octalText(v)
	}
	switch {
	case yaml11Null().MatchString(v):
		return 0, errNoPermissions
	case yaml11Bool().MatchString(v):
		return 0, fmt.Errorf("permissions %s: a boolean, not a mode", v)
	case yaml11Int().MatchString(v):
		return yaml11Integer(v)
	case yaml11Sexa().MatchString(v):
		return 0, fmt.Errorf("permissions %s: a base-60 number, not a mode", v)
	case yaml11Float().MatchString(v):
		return yaml11Truncated(v)
	}
	return octalText(v)
}

// yaml11Integer is the mode of a YAML 1.1 integer, as int(perm).
func yaml11Integer(v string) (fs.FileMode, error) {
	i, err := strconv.ParseInt(yaml11IntText(v), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("permissions %s: %w", v, err)
	}
	return checkMode(v, i)
}

// yaml11Truncated is the mode of a float, truncated as int(perm) does.
func yaml11Truncated(v string) (fs.FileMode, error) {
	f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("permissions %s: not a mode", v)
	}
	return checkMode(v, int64(f))
}

// yaml11IntText rewrites a YAML 1.1 integer for strconv's base prefixes:
// underscores go, and a leading 0 means octal ("0644" is 0o644).
func yaml11IntText(v string) string {
	v = strings.ReplaceAll(v, "_", "")
	sign := ""
	if v[0] == '+' || v[0] == '-' {
		sign, v = v[:1], v[1:]
	}
	if len(v) > 1 && v[0] == '0' && v[1] != 'x' && v[1] != 'b' {
		v = "0o" + v[1:]
	}
	return sign + v
}

// octalText is Python's int(text, 8), which cloud-init applies to any
// permissions value that is not a number.
func octalText(v string) (fs.FileMode, error) {
	t := strings.TrimSpace(v)
	if !pythonOctal().MatchString(t) {
		return 0, fmt.Errorf("permissions %q: not an octal mode", v)
	}
	sign := int64(1)
	switch t[0] {
	case '-':
		sign, t = -1, t[1:]
	case '+':
		t = t[1:]
	}
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0o"), "0O")
	u, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 8, 64)
	if err != nil {
		return 0, fmt.Errorf("permissions %q: %w", v, err)
	}
	return checkMode(v, sign*u)
}

// checkMode refuses what the agent will not apply: atomicfile applies only
// the permission bits, and refusing setuid, setgid and sticky beats
// silently dropping them.
func checkMode(v string, m int64) (fs.FileMode, error) {
	switch {
	case m < 0:
		return 0, fmt.Errorf("permissions %q: negative", v)
	case m > 0o7777:
		return 0, fmt.Errorf("permissions %q: out of range", v)
	case m > 0o777:
		return 0, fmt.Errorf("permissions %q (mode %#o): setuid, setgid and sticky bits are not supported", v, m)
	}
	return fs.FileMode(m), nil
}
