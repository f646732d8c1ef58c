package hotfix

import (
	"fmt"
	"strings"
	"testing"
	"testing/quick"
)

// TestParsePointerNestingIsBounded feeds deeply nested JSON inside an
// accepted top-level object: past the size cap it is refused before
// decoding; under the cap the decoder's depth limit refuses it. Neither
// path may exhaust the stack.
func TestParsePointerNestingIsBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantErr string
	}{
		{"100k-brackets-over-cap", `{"x":` + strings.Repeat("[", 100_000), "limit"},
		{"60k-brackets-under-cap", `{"x":` + strings.Repeat("[", 60_000), "exceeded max depth"},
		{"deep-hotfixes-value", `{"hotfixes":{"202604.01":` + strings.Repeat(`{"a":`, 12_000), "exceeded max depth"},
		{"deep-releases", `{"releases":` + strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000) + `}`, "exceeded max depth"},
	}
	for _, tt := range tests {
		if _, err := ParsePointer([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: ParsePointer error = %v, want containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestUnparsableBaseNeverMatches checks that a baked version that is not
// YYYYMM.DD.PATCH resolves to no hotfix and never counts as older than a
// hotfix, whatever the pointer says: a dev build is not patched.
func TestUnparsableBaseNeverMatches(t *testing.T) {
	t.Parallel()
	p := Pointer{Version: "202604.01.1", Hotfixes: map[string]string{"202604.01": "202604.01.1", "": "202604.01.1"}}
	hotfix := MustParseVersion("202604.01.1")
	for _, in := range []string{
		"dev", "", "1.2.3", "202604.01.0-rc1", "202604.01.1-hotfix.1", "v202604.01.0", "\ufeff202604.01.0",
		"202604.01\n.0", "202604.01.0\n1", "202604.01.0\x00", "202604.01.0+build",
	} {
		v, err := ParseVersion(in)
		if err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", in, v)
			continue
		}
		if got, src := p.Resolve(v); got != "" || src != SourceNone {
			t.Errorf("Resolve for unparsable %q = %q from %q, want nothing", in, got, src)
		}
		if IsUpgrade(v, hotfix) {
			t.Errorf("IsUpgrade(unparsable %q, %v) = true", in, hotfix)
		}
	}
}

// TestIsUpgradeIsAStrictOrder checks, over generated versions of a few
// bases, that the gate is irreflexive, asymmetric and transitive, and that
// it is exactly "same base, higher patch": patches compare as integers
// (10 > 9), never as text.
func TestIsUpgradeIsAStrictOrder(t *testing.T) {
	t.Parallel()
	bases := []string{"202604.01", "202604.02", "202605.01"}
	mk := func(b uint8, p uint32) Version {
		return Version{base: bases[int(b)%len(bases)], patch: int(p % (maxPatch + 1))}
	}
	prop := func(b1, b2, b3 uint8, p1, p2, p3 uint32) bool {
		x, y, z := mk(b1, p1), mk(b2, p2), mk(b3, p3)
		if IsUpgrade(x, x) || (IsUpgrade(x, y) && IsUpgrade(y, x)) {
			return false
		}
		if IsUpgrade(x, y) && IsUpgrade(y, z) && !IsUpgrade(x, z) {
			return false
		}
		return IsUpgrade(x, y) == (x.Base() == y.Base() && y.Patch() > x.Patch())
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 20_000}); err != nil {
		t.Error(err)
	}
	// Small patches make chains within one base likely; the random ones
	// above rarely share a base and ordered patches three times over.
	small := func(b1, b2, b3 uint8, p1, p2, p3 uint8) bool {
		return prop(b1, b2, b3, uint32(p1%12), uint32(p2%12), uint32(p3%12))
	}
	if err := quick.Check(small, &quick.Config{MaxCount: 20_000}); err != nil {
		t.Error(err)
	}
}

// servedWithSignedURLs returns a canonical served pointer of about n bytes
// whose releases carry SAS-style URLs, dense in '&' and with '<' and '>' in
// an opaque field: the characters json.Marshal would expand sixfold.
func servedWithSignedURLs(n int) string {
	var rels []string
	for size := 0; size < n; {
		r := fmt.Sprintf(`{"url":"https://store.example/agent/%d?sv=2026-01-01&ss=b&srt=o&sp=r&se=2026-12-31&st=2026-01-01&spr=https&sig=a%%2Bb&x=1&y=2&z=3","note":"<signed & sealed>"}`, len(rels))
		rels = append(rels, r)
		size += len(r) + 1
	}
	return `{"hotfixes":{"202604.01":"202604.01.1"},"releases":[` + strings.Join(rels, ",") + `],"revoked":["202604.01.0"]}`
}

// TestPointerEncodingKeepsSize checks that staging what the service served
// does not grow it: a document full of '&', '<' and '>' re-encodes to the
// same bytes (canonical input) or fewer (with whitespace), never past what
// download-hotfix reads.
func TestPointerEncodingKeepsSize(t *testing.T) {
	t.Parallel()
	signed := servedWithSignedURLs(12_700)
	if strings.Count(signed, "&") < 500 {
		t.Fatalf("fixture has %d '&', want a dense one", strings.Count(signed, "&"))
	}
	tests := []struct {
		name, in string
		same     bool // canonical input: the encoding is byte-identical
	}{
		{"signed-urls", signed, true},
		{"near-cap", servedWithSignedURLs(MaxPointerSize - 300), true},
		{"html-everywhere", `{"version":"<a&b>","scripts_version":"&","hotfixes":{"<&>":"<&>"},"releases":[{"u":"&<>"}],"k&":["<"]}`, true},
		{"whitespace", `{ "hotfixes" : { "202604.01" : "202604.01.1" } , "releases" : [ { "u" : "a&b" } ] }`, false},
	}
	for _, tt := range tests {
		p, err := ParsePointer([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: ParsePointer: %v", tt.name, err)
			continue
		}
		out, err := p.MarshalJSON()
		if err != nil {
			t.Errorf("%s: MarshalJSON: %v", tt.name, err)
			continue
		}
		if tt.same && string(out) != tt.in {
			t.Errorf("%s: MarshalJSON changed %d bytes into %d bytes", tt.name, len(tt.in), len(out))
		}
		if len(out) > len(tt.in) || len(out) > MaxPointerSize {
			t.Errorf("%s: MarshalJSON = %d bytes from %d, want at most the input and %d", tt.name, len(out), len(tt.in), MaxPointerSize)
		}
	}
}
