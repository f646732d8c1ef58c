package hotfix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
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
	// Revoked lists hotfix versions that must never run, even if staged.
	Revoked []string

	extra map[string]json.RawMessage
}

// ParsePointer decodes a pointer document. Empty or whitespace-only input is
// the zero Pointer (no hotfix). Unknown top-level keys are kept. The document
// must be a single JSON object no larger than MaxPointerSize, with no
// duplicate keys at the top level or in hotfixes (an ambiguous document is
// rejected rather than resolved by "last one wins"), and with well-typed
// known keys.
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
			err = json.Unmarshal(f.Value, &p.Revoked)
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
	return p, nil
}

// MarshalJSON encodes the pointer compactly: version, scripts_version and
// hotfixes in the reference's order (hotfixes always present, {} when empty;
// the version keys only when set), then releases and revoked when set, then
// preserved unknown keys in sorted order.
func (p Pointer) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	put := func(key string, v any) error {
		val, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode %q: %w", key, err)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		return json.Compact(&b, val)
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
		{keyRevoked, p.Revoked, len(p.Revoked) == 0},
	}
	for _, s := range steps {
		if s.omit {
			continue
		}
		if err := put(s.key, s.val); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(p.extra))
	for k := range p.extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := put(k, p.extra[k]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// WithServed returns the result of staging a served pointer over p: the
// served hotfixes, releases and revoked lists replace p's, while p's
// version, scripts_version and unknown keys are kept. The served document's
// own version keys are ignored: the service can never set them.
func (p Pointer) WithServed(served Pointer) Pointer {
	out := p
	out.Hotfixes = served.Hotfixes
	out.Releases = served.Releases
	out.Revoked = served.Revoked
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
