package hotfix

import (
	"encoding/json"
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
		{name: "invalid json", in: `{"hotfixes":`, wantErr: "parse hotfix pointer"},
		{name: "not an object", in: `["202604.01.1"]`, wantErr: "not a JSON object"},
		{name: "trailing garbage", in: `{"version":"202604.01.1"} x`, wantErr: "trailing data"},
		{name: "two objects", in: `{}{}`, wantErr: "trailing data"},
		{name: "duplicate top-level key", in: `{"version":"202604.01.1","version":"202604.01.2"}`, wantErr: "duplicate key"},
		{name: "duplicate base", in: `{"hotfixes":{"202604.01":"202604.01.1","202604.01":"202604.01.9"}}`, wantErr: "duplicate key"},
		{name: "wrong type", in: `{"hotfixes":{"202604.01":1}}`, wantErr: "202604.01"},
		{name: "version not a string", in: `{"version":5}`, wantErr: `key "version"`},
		{name: "oversized", in: `{"x":"` + strings.Repeat("a", MaxPointerSize) + `"}`, wantErr: "limit"},
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
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.p)
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
	want := `{"version":"202604.01.5","scripts_version":"202604.01.6","hotfixes":{"202604.01":"202604.01.2"},"artifacts":{"x":"y"},"future_key":{"nested":[1,2]}}`
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
// pointer re-encodes to a document that parses to the same value.
func FuzzParsePointer(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"hotfixes":{"202604.01":"202604.01.1"}}`, `{"version":"202604.01.1","x":[1,{"y":null}]}`,
		`{"hotfixes":{"a":"b","a":"c"}}`, `{"releases":[{}],"revoked":["1"]}`, `[`, `{"hotfixes":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePointer(data)
		if err != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal of accepted pointer: %v", err)
		}
		again, err := ParsePointer(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		// Empty and absent lists and maps encode alike, so compare them alike.
		if diff := cmp.Diff(p, again, cmpopts.EquateEmpty(), cmp.AllowUnexported(Pointer{}), cmp.Comparer(func(a, b json.RawMessage) bool {
			var x, y any
			return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && cmp.Equal(x, y)
		})); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
	})
}
