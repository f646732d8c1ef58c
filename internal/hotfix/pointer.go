package hotfix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"nodehotfix/internal/jsonobj"
)

// MaxPointerSize caps a pointer document, on disk or from the service. Real
// pointers are a few hundred bytes; the cap bounds parsing work on hostile
// input before any allocation proportional to it.
const MaxPointerSize = 64 << 10

// Keys of the pointer document. The first three are the reference contract;
// releases and revoked are ours and ignored by reference readers.
const (
	keyVersion        = "version"
	keyScriptsVersion = "scripts_version"
	keyHotfixes       = "hotfixes"
	keyReleases       = "releases"
	keyRevoked        = "revoked"
	keyKeySets        = "keysets"
	keyLog            = "log"
)

// Pointer is the hotfix pointer document
// (aks-node-controller-hotfix.json), also the body the live-patching service
// serves. Every field is optional.
//
// A Pointer remembers top-level keys it does not know, so a read-modify-write
// never drops fields that newer producers add.
type Pointer struct {
	// Version is the legacy single binary-hotfix version from custom data.
	Version string
	// ScriptsVersion gates the scripts hotfix (nodecustomdata.yml write_files).
	ScriptsVersion string
	// Hotfixes maps an image base "YYYYMM.DD" to a hotfix version of that base.
	Hotfixes map[string]string
	// Releases holds signed release envelopes, verified by internal/release;
	// this package treats them as opaque JSON.
	Releases []json.RawMessage
	// Revoked lists hotfix versions that must never run, even if staged:
	// the entries of the document's revoked list that are versions
	// (ParseVersion, surrounding spaces allowed), verbatim.
	Revoked []string
	// RevokedUnreadable holds the other entries of the revoked list (not a
	// string, or not a version), as JSON. The document cannot say what they
	// revoke, so while any is present Select runs no hotfix. MarshalJSON
	// writes them after Revoked, in the same list, where a reader finds them
	// unreadable again.
	RevokedUnreadable []json.RawMessage
	// KeySets holds signed key-set documents, the links of the release
	// keys' rotation chain after the version the node declared; opaque
	// here, walked by internal/release.
	KeySets []json.RawMessage
	// Log is the transparency log's proof bundle (a signed checkpoint and
	// inclusion proofs of the releases); opaque here, verified by
	// internal/translog. nil when absent.
	Log json.RawMessage

	extra map[string]json.RawMessage
}

// ParsePointer decodes a pointer document. Empty or whitespace-only input is
// the zero Pointer (no hotfix). Unknown top-level keys are kept. The document
// must be a single JSON object no larger than MaxPointerSize, with no
// duplicate keys at the top level or in hotfixes (an ambiguous document is
// rejected rather than resolved by "last one wins") and with well-typed
// known keys (revoked is a list, or null). The entries of revoked are the
// exception: one that is not a version does not void the document, whose
// readable revocations must take effect; it goes to RevokedUnreadable.
//
// A document whose encoding by MarshalJSON would exceed MaxPointerSize is
// rejected too, so whatever ParsePointer accepts can be staged and read
// back. That is possible only near the cap: the encoding adds a missing
// hotfixes key and escapes U+2028 and U+2029.
func ParsePointer(data []byte) (Pointer, error) {
	if len(data) > MaxPointerSize {
		return Pointer{}, fmt.Errorf("parse hotfix pointer: %d bytes exceeds the %d-byte limit", len(data), MaxPointerSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return Pointer{}, nil
	}
	fields, err := jsonobj.Members(data)
	if err != nil {
		return Pointer{}, fmt.Errorf("parse hotfix pointer: %w", err)
	}
	var p Pointer
	for _, f := range fields {
		var err error
		switch f.Key {
		case keyVersion:
			err = json.Unmarshal(f.Value, &p.Version)
		case keyScriptsVersion:
			err = json.Unmarshal(f.Value, &p.ScriptsVersion)
		case keyHotfixes:
			p.Hotfixes, err = decodeHotfixes(f.Value)
		case keyReleases:
			err = json.Unmarshal(f.Value, &p.Releases)
		case keyRevoked:
			p.Revoked, p.RevokedUnreadable, err = decodeRevoked(f.Value)
		case keyKeySets:
			err = json.Unmarshal(f.Value, &p.KeySets)
		case keyLog:
			p.Log, err = decodeLog(f.Value)
		default:
			if p.extra == nil {
				p.extra = make(map[string]json.RawMessage)
			}
			p.extra[f.Key] = f.Value
		}
		if err != nil {
			return Pointer{}, fmt.Errorf("parse hotfix pointer: key %q: %w", f.Key, err)
		}
	}
	out, err := p.MarshalJSON()
	if err != nil {
		return Pointer{}, fmt.Errorf("parse hotfix pointer: %w", err)
	}
	if len(out) > MaxPointerSize {
		return Pointer{}, fmt.Errorf("parse hotfix pointer: its encoding of %d bytes exceeds the %d-byte limit", len(out), MaxPointerSize)
	}
	return p, nil
}

// MarshalJSON encodes the pointer compactly: version, scripts_version and
// hotfixes in the reference's order (hotfixes always present, {} when empty;
// the version keys only when set), then releases, revoked, keysets and log
// when set, then preserved unknown keys in sorted order.
//
// Nothing is HTML-escaped: signed URLs in releases are dense in '&', which
// escaping would grow sixfold past what readers accept. json.Marshal(p)
// escapes the result again, so writers call MarshalJSON directly, or encode
// with a json.Encoder after SetEscapeHTML(false).
func (p Pointer) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	// The raw members are most of the document: one allocation for them.
	n := 256 + len(p.Log)
	for _, rs := range [][]json.RawMessage{p.Releases, p.KeySets} {
		for _, r := range rs {
			n += len(r) + 1
		}
	}
	b.Grow(n)
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// encode appends v's compact encoding; Encode ends each value with a
	// newline, which is dropped.
	encode := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1)
		return nil
	}
	b.WriteByte('{')
	first := true
	put := func(key string, v any) error {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if err := encode(key); err != nil {
			return fmt.Errorf("encode key %q: %w", key, err)
		}
		b.WriteByte(':')
		var err error
		switch v := v.(type) {
		case json.RawMessage:
			err = appendRaw(&b, v)
		case []json.RawMessage:
			b.WriteByte('[')
			for i, r := range v {
				if i > 0 {
					b.WriteByte(',')
				}
				if err = appendRaw(&b, r); err != nil {
					break
				}
			}
			b.WriteByte(']')
		default:
			err = encode(v)
		}
		if err != nil {
			return fmt.Errorf("encode %q: %w", key, err)
		}
		return nil
	}
	hotfixes := p.Hotfixes
	if hotfixes == nil {
		hotfixes = map[string]string{}
	}
	steps := []struct {
		key  string
		val  any
		omit bool
	}{
		{keyVersion, p.Version, p.Version == ""},
		{keyScriptsVersion, p.ScriptsVersion, p.ScriptsVersion == ""},
		{keyHotfixes, hotfixes, false},
		{keyReleases, p.Releases, len(p.Releases) == 0},
		{keyRevoked, p.revokedList(), len(p.Revoked) == 0 && len(p.RevokedUnreadable) == 0},
		{keyKeySets, p.KeySets, len(p.KeySets) == 0},
		{keyLog, p.Log, p.Log == nil},
	}
	for _, s := range steps {
		if s.omit {
			continue
		}
		if err := put(s.key, s.val); err != nil {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.extra)) {
		if err := put(k, p.extra[k]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// WithServed returns the result of staging a served pointer over p, which
// is not modified:
//
//   - hotfixes: served entries win per base; a base the served map lacks
//     keeps p's entry, so a served map for other bases cannot drop this
//     node's custom-data entry. The service withdraws a base by revoking
//     its version, not by omitting the base.
//   - releases: the served ones, then p's that are not identical to a served
//     one (insignificant whitespace aside), so a release for a kept entry
//     survives with it.
//   - revoked: the union, p's entries first, without duplicates. The
//     unreadable entries are the served document's alone: a bad entry keeps
//     the node on the baked agent until the service next serves hotfixes
//     or a revoked list (check-hotfix stages nothing for a NotFound or an
//     empty document), not for good (the union would never drop it).
//   - keysets and log: the served document's when it has them, else p's.
//     They are evidence the node checks, never trust: a longer chain or a
//     newer checkpoint is all they can bring, and the node's own kept state
//     (internal/node/trust) refuses anything older.
//   - version, scripts_version and unknown keys: p's. The served document's
//     own version keys are ignored: the service can never set them.
func (p Pointer) WithServed(served Pointer) Pointer {
	out := p
	out.Hotfixes = maps.Clone(p.Hotfixes)
	if out.Hotfixes == nil && len(served.Hotfixes) > 0 {
		out.Hotfixes = make(map[string]string, len(served.Hotfixes))
	}
	maps.Copy(out.Hotfixes, served.Hotfixes)
	out.Releases = mergeReleases(served.Releases, p.Releases)
	out.Revoked = mergeRevoked(p.Revoked, served.Revoked)
	out.RevokedUnreadable = served.RevokedUnreadable
	if len(served.KeySets) > 0 {
		out.KeySets = served.KeySets
	}
	if served.Log != nil {
		out.Log = served.Log
	}
	return out
}

// WithRevoked returns p with vs added to its revoked list, each version
// once: what a node kept as revoked (internal/node/trust) revokes whatever
// the document says.
func (p Pointer) WithRevoked(vs []string) Pointer {
	out := p
	out.Revoked = mergeRevoked(p.Revoked, vs)
	return out
}

// Revocations returns a pointer holding only p's revoked list, the
// unreadable entries included, and its trust evidence (keysets, log):
// what a served document that names no hotfix contributes when staged
// with WithServed.
func (p Pointer) Revocations() Pointer {
	return Pointer{Revoked: p.Revoked, RevokedUnreadable: p.RevokedUnreadable, KeySets: p.KeySets, Log: p.Log}
}

// WithColdStart returns the result of staging the node config's cold-start
// map m over p, which is not modified: m's entries are added only for bases
// p has no entry for, and everything else (releases, revoked and its
// unreadable entries, the version keys, unknown keys) is kept. Cold start
// runs when the service is unreachable, so an outage never removes a
// staged, verifiable hotfix or a revocation.
func (p Pointer) WithColdStart(m map[string]string) Pointer {
	out := p
	out.Hotfixes = maps.Clone(p.Hotfixes)
	for base, v := range m {
		if _, ok := out.Hotfixes[base]; ok {
			continue
		}
		if out.Hotfixes == nil {
			out.Hotfixes = make(map[string]string, len(m))
		}
		out.Hotfixes[base] = v
	}
	return out
}

// mergeReleases returns first, then the releases of then that are not
// identical to one already taken.
func mergeReleases(first, then []json.RawMessage) []json.RawMessage {
	if len(then) == 0 {
		return first
	}
	seen := make(map[string]bool, len(first)+len(then))
	out := make([]json.RawMessage, 0, len(first)+len(then))
	for _, r := range first {
		seen[releaseKey(r)] = true
		out = append(out, r)
	}
	for _, r := range then {
		if k := releaseKey(r); !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// appendRaw appends the JSON value raw to b compactly, as the encoder
// would. Served members are large (envelopes, key-set links, the log
// bundle) and already compact (lpsd compacts envelopes at publish, and
// encodes the bundle itself), so one that holds no whitespace outside its
// strings is copied once json.Valid accepts it, rather than rewritten.
func appendRaw(b *bytes.Buffer, raw json.RawMessage) error {
	if raw == nil {
		b.WriteString("null")
		return nil
	}
	if !compact(raw) {
		return json.Compact(b, raw)
	}
	if !json.Valid(raw) {
		return fmt.Errorf("invalid JSON value %.40q", raw)
	}
	b.Write(raw)
	return nil
}

// compact reports whether raw holds no whitespace outside its strings.
func compact(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// releaseKey identifies a release by its compact text: the file holds
// compacted releases, the service may send them with whitespace.
func releaseKey(r json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, r); err != nil {
		return string(r)
	}
	return b.String()
}

// mergeRevoked returns the entries of a, then of b, each version once.
func mergeRevoked(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, r := range slices.Concat(a, b) {
		// ParseVersion ignores surrounding whitespace and is otherwise
		// strict, so the trimmed text identifies the version.
		if k := strings.TrimSpace(r); !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// IsEmpty reports whether the pointer names no binary hotfix at all: no
// hotfixes map entries and no legacy version.
func (p Pointer) IsEmpty() bool {
	return len(p.Hotfixes) == 0 && strings.TrimSpace(p.Version) == ""
}

// IsRevoked reports whether v appears in the revoked list.
func (p Pointer) IsRevoked(v Version) bool {
	for _, r := range p.Revoked {
		if rv, err := ParseVersion(r); err == nil && rv == v {
			return true
		}
	}
	return false
}

// Source says where Resolve found a hotfix version.
type Source string

// Sources of a resolved version.
const (
	SourceNone   Source = ""         // nothing for this base
	SourceMap    Source = "hotfixes" // the base→version map
	SourceLegacy Source = "version"  // the legacy single version
)

// Resolve returns the hotfix version the pointer requests for current's base
// and where it came from. The map entry for the base wins; when the map has no
// entry for it the legacy version applies, so a served map for other image
// streams cannot silently disable a custom-data hotfix (a reference gap).
// Resolve does not gate: the caller checks IsUpgrade and IsRevoked on the
// parsed result. An invalid current version resolves to nothing.
func (p Pointer) Resolve(current Version) (string, Source) {
	if current.IsZero() {
		return "", SourceNone
	}
	if v := strings.TrimSpace(p.Hotfixes[current.base]); v != "" {
		return v, SourceMap
	}
	if v := strings.TrimSpace(p.Version); v != "" {
		return v, SourceLegacy
	}
	return "", SourceNone
}

// decodeRevoked splits a revoked list into its versions and the entries
// that are not (see Pointer.RevokedUnreadable); null is no list. A value
// that is not a list is an error: staged as a list it could read as one.
// decodeLog keeps the log member if it is a JSON object; null is absent.
// What it holds is internal/translog's to check.
func decodeLog(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return nil, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("not an object")
	}
	return raw, nil
}

func decodeRevoked(raw json.RawMessage) (versions []string, unreadable []json.RawMessage, err error) {
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		var v string
		if json.Unmarshal(e, &v) == nil {
			if _, err := ParseVersion(v); err == nil {
				versions = append(versions, v)
				continue
			}
		}
		unreadable = append(unreadable, e)
	}
	return versions, unreadable, nil
}

// revokedList is the revoked list as MarshalJSON writes it: the versions,
// then the unreadable entries.
func (p Pointer) revokedList() []any {
	out := make([]any, 0, len(p.Revoked)+len(p.RevokedUnreadable))
	for _, v := range p.Revoked {
		out = append(out, v)
	}
	for _, e := range p.RevokedUnreadable {
		out = append(out, e)
	}
	return out
}

func decodeHotfixes(raw json.RawMessage) (map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	fields, err := jsonobj.Members(raw)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(fields))
	for _, f := range fields {
		var v string
		if err := json.Unmarshal(f.Value, &v); err != nil {
			return nil, fmt.Errorf("entry %q: %w", f.Key, err)
		}
		m[f.Key] = v
	}
	return m, nil
}
