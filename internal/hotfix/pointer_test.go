package hotfix

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParsePointer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    Pointer
		wantErr string
	}{
		{name: "empty", in: "", want: Pointer{}},
		{name: "blank", in: " \n\t ", want: Pointer{}},
		{name: "legacy version", in: `{"version":"202604.01.5"}`, want: Pointer{Version: "202604.01.5"}},
		{
			name: "map and scripts",
			in:   `{"scripts_version":"202604.01.6","hotfixes":{"202604.01":"202604.01.3","202605.30":"202605.30.1"}}`,
			want: Pointer{ScriptsVersion: "202604.01.6", Hotfixes: map[string]string{"202604.01": "202604.01.3", "202605.30": "202605.30.1"}},
		},
		{name: "surrounding whitespace", in: "\n {\"hotfixes\":{}}\n", want: Pointer{Hotfixes: map[string]string{}}},
		{name: "null hotfixes", in: `{"hotfixes":null}`, want: Pointer{}},
		{name: "revoked", in: `{"revoked":["202604.01.2"]}`, want: Pointer{Revoked: []string{"202604.01.2"}}},
		{name: "revoked-padded", in: `{"revoked":[" 202604.01.2 "]}`, want: Pointer{Revoked: []string{" 202604.01.2 "}}},
		// An entry that is not a version leaves the document and its other
		// revocations readable, and is kept apart.
		{name: "revoked-not-a-version", in: `{"revoked":["202604.01.2","garbage","202604.01.3"]}`,
			want: Pointer{Revoked: []string{"202604.01.2", "202604.01.3"}, RevokedUnreadable: rels(`"garbage"`)}},
		{name: "revoked-base-only", in: `{"revoked":["202604.01"]}`, want: Pointer{RevokedUnreadable: rels(`"202604.01"`)}},
		{name: "revoked-empty-entry", in: `{"revoked":[""]}`, want: Pointer{RevokedUnreadable: rels(`""`)}},
		{name: "revoked-not-strings", in: `{"revoked":[1,{"v":"202604.01.2"},null,"202604.01.2"]}`,
			want: Pointer{Revoked: []string{"202604.01.2"}, RevokedUnreadable: rels(`1`, `{"v":"202604.01.2"}`, `null`)}},
		// Not a list at all: written back as one, it would read as a
		// readable revocation.
		{name: "revoked-not-a-list", in: `{"hotfixes":{"202604.01":"202604.01.2"},"revoked":"202604.01.2"}`, wantErr: `key "revoked"`},
		{name: "revoked-null", in: `{"revoked":null}`, want: Pointer{}},
		{name: "invalid json", in: `{"hotfixes":`, wantErr: "parse hotfix pointer"},
		{name: "not an object", in: `["202604.01.1"]`, wantErr: "not a JSON object"},
		{name: "trailing garbage", in: `{"version":"202604.01.1"} x`, wantErr: "trailing data"},
		{name: "two objects", in: `{}{}`, wantErr: "trailing data"},
		{name: "duplicate top-level key", in: `{"version":"202604.01.1","version":"202604.01.2"}`, wantErr: "duplicate key"},
		{name: "duplicate base", in: `{"hotfixes":{"202604.01":"202604.01.1","202604.01":"202604.01.9"}}`, wantErr: "duplicate key"},
		{name: "wrong type", in: `{"hotfixes":{"202604.01":1}}`, wantErr: "202604.01"},
		{name: "version not a string", in: `{"version":5}`, wantErr: `key "version"`},
		{name: "oversized", in: `{"x":"` + strings.Repeat("a", MaxPointerSize) + `"}`, wantErr: "limit"},
		// At the cap but without hotfixes: the encoding adds "hotfixes":{},
		// so it could not be written back.
		{name: "encoding-over-cap", in: `{"x":"` + strings.Repeat("a", MaxPointerSize-8) + `"}`, wantErr: "encoding"},
		{name: "deep nesting", in: strings.Repeat("[", 10000), wantErr: "not a JSON object"},
	}
	for _, tt := range tests {
		got, err := ParsePointer([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: ParsePointer error = %v, want containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParsePointer error: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(Pointer{})); diff != "" {
			t.Errorf("%s: ParsePointer mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestPointerMarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Pointer
		want string
	}{
		{name: "zero keeps a stable hotfixes key", p: Pointer{}, want: `{"hotfixes":{}}`},
		{name: "map only", p: Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1", "202604.01": "202604.01.3"}},
			want: `{"hotfixes":{"202604.01":"202604.01.3","202605.30":"202605.30.1"}}`},
		{name: "reference order", p: Pointer{Version: "202604.01.5", ScriptsVersion: "202604.01.6", Hotfixes: map[string]string{}},
			want: `{"version":"202604.01.5","scripts_version":"202604.01.6","hotfixes":{}}`},
		{name: "our keys follow", p: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, Releases: []json.RawMessage{json.RawMessage(`{"a": 1}`)}, Revoked: []string{"202604.01.0"}},
			want: `{"hotfixes":{"202604.01":"202604.01.1"},"releases":[{"a":1}],"revoked":["202604.01.0"]}`},
		// Unreadable entries are written back where readers find them
		// again, after the versions.
		{name: "revoked-unreadable-last", p: Pointer{Revoked: []string{"202604.01.2"}, RevokedUnreadable: rels(`"garbage"`, `{"a": 1}`)},
			want: `{"hotfixes":{},"revoked":["202604.01.2","garbage",{"a":1}]}`},
		{name: "revoked-unreadable-only", p: Pointer{RevokedUnreadable: rels(`7`)}, want: `{"hotfixes":{},"revoked":[7]}`},
		{name: "html-not-escaped", p: Pointer{Version: "<&>", Hotfixes: map[string]string{"a&b": "<c>"}, Releases: []json.RawMessage{json.RawMessage(`{"url": "https://x/b?a=1&b=<2>"}`)},
			extra: map[string]json.RawMessage{"k<": json.RawMessage(`"&"`)}},
			want: `{"version":"<&>","hotfixes":{"a&b":"<c>"},"releases":[{"url":"https://x/b?a=1&b=<2>"}],"k<":"&"}`},
	}
	for _, tt := range tests {
		got, err := tt.p.MarshalJSON()
		if err != nil {
			t.Errorf("%s: Marshal error: %v", tt.name, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%s: Marshal = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestPointerUnknownKeysSurviveRewrite(t *testing.T) {
	t.Parallel()
	old := `{"version":"202604.01.5","future_key":{"nested":[1,2]},"scripts_version":"202604.01.6","artifacts":{"x":"y"},"hotfixes":{"202601.01":"202601.01.1"}}`
	p, err := ParsePointer([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	served := Pointer{Version: "202699.01.1", ScriptsVersion: "202699.01.1", Hotfixes: map[string]string{"202604.01": "202604.01.2"}}
	got, err := json.Marshal(p.WithServed(served))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":"202604.01.5","scripts_version":"202604.01.6","hotfixes":{"202601.01":"202601.01.1","202604.01":"202604.01.2"},"artifacts":{"x":"y"},"future_key":{"nested":[1,2]}}`
	if string(got) != want {
		t.Errorf("rewrite = %s\nwant      %s", got, want)
	}
}

func TestPointerResolve(t *testing.T) {
	t.Parallel()
	cur := MustParseVersion("202604.01.0")
	tests := []struct {
		name       string
		p          Pointer
		current    Version
		want       string
		wantSource Source
	}{
		{"empty map falls back to legacy version", Pointer{Version: " 202604.01.5 "}, cur, "202604.01.5", SourceLegacy},
		{"empty pointer resolves to nothing", Pointer{}, cur, "", SourceNone},
		{"map hit", Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.3"}}, cur, "202604.01.3", SourceMap},
		{"map takes precedence over legacy", Pointer{Version: "202604.01.9", Hotfixes: map[string]string{"202604.01": "202604.01.3"}}, cur, "202604.01.3", SourceMap},
		{"map miss and no legacy is default deny", Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}}, cur, "", SourceNone},
		{"map miss falls back to legacy", Pointer{Version: "202604.01.2", Hotfixes: map[string]string{"202605.30": "202605.30.1"}}, cur, "202604.01.2", SourceLegacy},
		{"leading-zero day matches literally", Pointer{Hotfixes: map[string]string{"202604.1": "202604.01.3"}}, cur, "", SourceNone},
		{"unparsable current resolves to nothing", Pointer{Version: "202604.01.3", Hotfixes: map[string]string{"202604.01": "202604.01.3"}}, Version{}, "", SourceNone},
	}
	for _, tt := range tests {
		got, src := tt.p.Resolve(tt.current)
		if got != tt.want || src != tt.wantSource {
			t.Errorf("%s: Resolve = %q, %q; want %q, %q", tt.name, got, src, tt.want, tt.wantSource)
		}
	}
}

func TestPointerIsRevoked(t *testing.T) {
	t.Parallel()
	p := Pointer{Revoked: []string{"garbage", " 202604.01.2 "}}
	if !p.IsRevoked(MustParseVersion("202604.01.2")) {
		t.Error("IsRevoked(202604.01.2) = false, want true")
	}
	if p.IsRevoked(MustParseVersion("202604.01.3")) {
		t.Error("IsRevoked(202604.01.3) = true, want false")
	}
}

// FuzzParsePointer checks that parsing never panics and that an accepted
// pointer encodes within MaxPointerSize (the input was within it) to a
// canonical document: one that parses to the same value and encodes to the
// same bytes again, so staging a staged pointer changes nothing.
func FuzzParsePointer(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"hotfixes":{"202604.01":"202604.01.1"}}`, `{"version":"202604.01.1","x":[1,{"y":null}]}`,
		`{"hotfixes":{"a":"b","a":"c"}}`, `{"releases":[{}],"revoked":["202604.01.1"]}`, `[`, `{"hotfixes":null}`,
		`{"releases":[{"u":"https://x/a?b=1&c=<2>"}],"k&":"\u0026"}`, "{\"version\":\"\u2028\xff\"}",
		`{"revoked":["garbage"]}`, `{"revoked":"202604.01.2"}`, `{"revoked":[1,"202604.01.2",["x"]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePointer(data)
		if err != nil {
			return
		}
		out, err := p.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON of accepted pointer: %v", err)
		}
		if len(data) <= MaxPointerSize && len(out) > MaxPointerSize {
			t.Fatalf("MarshalJSON of a %d-byte document = %d bytes, over the %d-byte limit", len(data), len(out), MaxPointerSize)
		}
		again, err := ParsePointer(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		// Empty and absent lists and maps encode alike, so compare them
		// alike; raw JSON compares by value (the comparer below).
		notRaw := cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() != reflect.TypeFor[json.RawMessage]() }, cmpopts.EquateEmpty())
		if diff := cmp.Diff(p, again, notRaw, cmp.AllowUnexported(Pointer{}), cmp.Comparer(func(a, b json.RawMessage) bool {
			if len(a) == 0 || len(b) == 0 {
				return len(a) == len(b)
			}
			var x, y any
			return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && cmp.Equal(x, y)
		})); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
		if out2, err := again.MarshalJSON(); err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("re-encoding = %s, %v; want the first encoding %s", out2, err, out)
		}
	})
}

// cmpPointer compares pointers including their preserved unknown keys.
var cmpPointer = cmp.AllowUnexported(Pointer{})

func rels(s ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(s))
	for i, r := range s {
		out[i] = json.RawMessage(r)
	}
	return out
}

func TestPointerWithServed(t *testing.T) {
	t.Parallel()
	const (
		r1  = `{"release":"202604.01.1"}`
		r7  = `{"release":"202604.01.7"}`
		r15 = `{"release":"202607.15.1"}`
	)
	extra := map[string]json.RawMessage{"artifacts": json.RawMessage(`{"k":"v"}`)}
	tests := []struct {
		name           string
		staged, served Pointer
		want           Pointer
	}{
		{
			name:   "served-wins-per-base",
			staged: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1", "202605.30": "202605.30.1"}},
			served: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.2"}},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.2", "202605.30": "202605.30.1"}},
		},
		{
			// The custom-data entry and its release survive a served map
			// for other bases.
			name:   "other-bases-keep-custom-data",
			staged: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.7"}, Releases: rels(r7)},
			served: Pointer{Hotfixes: map[string]string{"202607.15": "202607.15.1"}, Releases: rels(r15)},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.7", "202607.15": "202607.15.1"}, Releases: rels(r15, r7)},
		},
		{
			// Identity ignores insignificant whitespace, so a release
			// served pretty-printed is not staged twice.
			name:   "identical-releases-once",
			staged: Pointer{Releases: rels(r1, r7, r7)},
			served: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, Releases: rels(`{ "release": "202604.01.1" }`)},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, Releases: rels(`{ "release": "202604.01.1" }`, r7)},
		},
		{
			name:   "revoked-union",
			staged: Pointer{Revoked: []string{"202604.01.3", "202604.01.4"}},
			served: Pointer{Revoked: []string{"202604.01.5", " 202604.01.4", "202604.01.5"}},
			want:   Pointer{Revoked: []string{"202604.01.3", "202604.01.4", "202604.01.5"}},
		},
		{
			// A bad entry holds the node on the baked agent until the
			// service next answers: the served document's unreadable
			// entries replace the staged ones.
			name:   "unreadable-revoked-from-served",
			staged: Pointer{Revoked: []string{"202604.01.3"}, RevokedUnreadable: rels(`"old garbage"`)},
			served: Pointer{Revoked: []string{"202604.01.5"}, RevokedUnreadable: rels(`"new garbage"`)},
			want:   Pointer{Revoked: []string{"202604.01.3", "202604.01.5"}, RevokedUnreadable: rels(`"new garbage"`)},
		},
		{
			name:   "readable-served-clears-unreadable",
			staged: Pointer{Revoked: []string{"202604.01.3"}, RevokedUnreadable: rels(`"old garbage"`)},
			served: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.4"}},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.4"}, Revoked: []string{"202604.01.3"}},
		},
		{
			name:   "version-keys-from-staged",
			staged: Pointer{Version: "202604.01.5", ScriptsVersion: "202604.01.6", extra: extra},
			served: Pointer{Version: "202699.01.1", ScriptsVersion: "202699.01.1", Hotfixes: map[string]string{"202604.01": "202604.01.2"}},
			want:   Pointer{Version: "202604.01.5", ScriptsVersion: "202604.01.6", Hotfixes: map[string]string{"202604.01": "202604.01.2"}, extra: extra},
		},
		{
			name:   "empty-served-keeps-all",
			staged: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.7"}, Releases: rels(r7), Revoked: []string{"202604.01.3"}},
			served: Pointer{},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.7"}, Releases: rels(r7), Revoked: []string{"202604.01.3"}},
		},
		{
			name:   "nothing-staged",
			served: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, Releases: rels(r1), Revoked: []string{"202604.01.0"}},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, Releases: rels(r1), Revoked: []string{"202604.01.0"}},
		},
	}
	for _, tt := range tests {
		before := clonePointer(tt.staged)
		got := tt.staged.WithServed(tt.served)
		if diff := cmp.Diff(tt.want, got, cmpPointer, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: WithServed mismatch (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(before, tt.staged, cmpPointer); diff != "" {
			t.Errorf("%s: WithServed modified the staged pointer (-before +after):\n%s", tt.name, diff)
		}
	}
}

// clonePointer deep-copies p's maps and slices, so a test can tell whether
// a method wrote through shared storage.
func clonePointer(p Pointer) Pointer {
	data, err := p.MarshalJSON()
	if err != nil {
		panic(err)
	}
	q, err := ParsePointer(data)
	if err != nil {
		panic(err)
	}
	if p.Hotfixes == nil {
		q.Hotfixes = nil
	}
	return q
}

func TestPointerWithColdStart(t *testing.T) {
	t.Parallel()
	const r1 = `{"release":"202604.01.1"}`
	extra := map[string]json.RawMessage{"artifacts": json.RawMessage(`{"k":"v"}`)}
	// staged is what an earlier answer from the service left on the node.
	staged := Pointer{
		Version:  "202604.01.2",
		Hotfixes: map[string]string{"202604.01": "202604.01.1"},
		Releases: rels(r1),
		Revoked:  []string{"202604.01.7"},
		extra:    extra,
	}
	tests := []struct {
		name   string
		staged Pointer
		m      map[string]string
		want   Pointer
	}{
		{
			// The verified hotfix for this base stays; the cold-start
			// entry for another base is added; revocations stay.
			name:   "same-and-other-base",
			staged: staged,
			m:      map[string]string{"202604.01": "202604.01.7", "202605.30": "202605.30.2"},
			want: Pointer{
				Version:  "202604.01.2",
				Hotfixes: map[string]string{"202604.01": "202604.01.1", "202605.30": "202605.30.2"},
				Releases: rels(r1),
				Revoked:  []string{"202604.01.7"},
				extra:    extra,
			},
		},
		{name: "same-base-only", staged: staged, m: map[string]string{"202604.01": "202604.01.7"}, want: staged},
		{
			// An outage keeps the node on the baked agent too.
			name:   "unreadable-revoked-kept",
			staged: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}, RevokedUnreadable: rels(`"garbage"`)},
			m:      map[string]string{"202605.30": "202605.30.2"},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1", "202605.30": "202605.30.2"}, RevokedUnreadable: rels(`"garbage"`)},
		},
		{name: "empty-map", staged: staged, want: staged},
		{
			name: "nothing-staged",
			m:    map[string]string{"202604.01": "202604.01.7"},
			want: Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.7"}},
		},
		{
			// A blank staged entry is still the service's entry for the base.
			name:   "blank-staged-entry",
			staged: Pointer{Hotfixes: map[string]string{"202604.01": ""}},
			m:      map[string]string{"202604.01": "202604.01.7"},
			want:   Pointer{Hotfixes: map[string]string{"202604.01": ""}},
		},
	}
	for _, tt := range tests {
		before := clonePointer(tt.staged)
		got := tt.staged.WithColdStart(tt.m)
		if diff := cmp.Diff(tt.want, got, cmpPointer, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: WithColdStart mismatch (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(before, tt.staged, cmpPointer); diff != "" {
			t.Errorf("%s: WithColdStart modified the staged pointer (-before +after):\n%s", tt.name, diff)
		}
	}
}

// TestPointerTrustEvidence: keysets and log round-trip as the node stages
// them, a malformed log member voids the document as any mistyped known key
// does, and staging takes the served evidence when it has some and keeps
// the staged evidence when it has none.
func TestPointerTrustEvidence(t *testing.T) {
	doc := []byte(`{"hotfixes":{},"keysets":[{"a":1},{"b":2}],"log":{"checkpoint":"x"}}`)
	p, err := ParsePointer(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.KeySets) != 2 || string(p.Log) != `{"checkpoint":"x"}` {
		t.Fatalf("ParsePointer = %+v", p)
	}
	out, err := p.MarshalJSON()
	if err != nil || !bytes.Equal(out, doc) {
		t.Fatalf("MarshalJSON = %s, %v; want %s", out, err, doc)
	}
	for _, bad := range []string{`{"log":[1]}`, `{"log":"x"}`, `{"keysets":{}}`, `{"keysets":"x"}`} {
		if _, err := ParsePointer([]byte(bad)); err == nil {
			t.Errorf("ParsePointer(%s) = nil error", bad)
		}
	}
	if p, err := ParsePointer([]byte(`{"log":null}`)); err != nil || p.Log != nil {
		t.Errorf("ParsePointer(log null) = %+v, %v; want no log", p, err)
	}

	staged := Pointer{KeySets: []json.RawMessage{json.RawMessage(`{"old":1}`)}, Log: json.RawMessage(`{"old":1}`)}
	if got := staged.WithServed(Pointer{Hotfixes: map[string]string{"202604.01": "202604.01.1"}}); len(got.KeySets) != 1 || string(got.Log) != `{"old":1}` {
		t.Errorf("WithServed(no evidence) = %+v; want the staged evidence kept", got)
	}
	served := Pointer{KeySets: []json.RawMessage{json.RawMessage(`{"new":1}`), json.RawMessage(`{"new":2}`)}, Log: json.RawMessage(`{"new":1}`)}
	if got := staged.WithServed(served.Revocations()); len(got.KeySets) != 2 || string(got.Log) != `{"new":1}` {
		t.Errorf("WithServed(served evidence) = %+v; want the served evidence", got)
	}
}

// TestMarshalRawMembers: raw members come out compact whatever their
// spacing, byte for byte what json.Compact makes of them (a compact one
// copied as it is, spaces inside its strings kept), and a member that is
// not JSON is an error, never copied into the document.
func TestMarshalRawMembers(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"a":"x y","b":[1,2]}`,
		"{ \"a\" : \"x y\",\n\t\"b\" : [ 1 , 2 ] }\r\n",
		`{"a":"quote \" and \\ then space ","b":{}}`,
		`["  "," \" "]`,
	} {
		p := Pointer{Releases: []json.RawMessage{json.RawMessage(raw)}, KeySets: []json.RawMessage{json.RawMessage(raw), json.RawMessage(raw)}, Log: json.RawMessage(raw)}
		got, err := p.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON(%q): %v", raw, err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, []byte(raw)); err != nil {
			t.Fatal(err)
		}
		m := c.String()
		want := `{"hotfixes":{},"releases":[` + m + `],"keysets":[` + m + `,` + m + `],"log":` + m + `}`
		if string(got) != want {
			t.Errorf("MarshalJSON(%q) =\n%s\nwant\n%s", raw, got, want)
		}
	}
	for _, bad := range []string{`{"a":1`, `{"a":1}}`, `nope`, `{"a":"unterminated}`} {
		for _, p := range []Pointer{{Releases: []json.RawMessage{json.RawMessage(bad)}}, {KeySets: []json.RawMessage{json.RawMessage(bad)}}, {Log: json.RawMessage(bad)}} {
			if out, err := p.MarshalJSON(); err == nil {
				t.Errorf("MarshalJSON(member %q) = %s, want an error", bad, out)
			}
		}
	}
}
