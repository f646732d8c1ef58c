package jsonobj

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMembers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []Member
		wantErr string
	}{
		{in: ` {"b":1, "a":[1,{"a":2}]} `, want: []Member{{"b", []byte("1")}, {"a", []byte(`[1,{"a":2}]`)}}},
		{in: `{}`, want: nil},
		{in: `{"a":1,"A":2}`, want: []Member{{"a", []byte("1")}, {"A", []byte("2")}}},
		{in: `{"a":1,"a":2}`, wantErr: "duplicate key"},
		{in: `{"a":1}{}`, wantErr: "trailing data"},
		{in: `{"a":1} x`, wantErr: "trailing data"},
		{in: `[1]`, wantErr: "not a JSON object"},
		{in: `{"a":`, wantErr: "EOF"},
		{in: ``, wantErr: "EOF"},
	}
	for _, tt := range tests {
		got, err := Members([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Members(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Members(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Members(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
	if _, err := Members([]byte(`{"x":1,"x":1}`)); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("duplicate error %v does not wrap ErrDuplicateKey", err)
	}
}

func FuzzMembers(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := Members(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if seen[m.Key] {
				t.Fatalf("duplicate %q accepted", m.Key)
			}
			seen[m.Key] = true
		}
	})
}

// FuzzMembersMatchesDecoder: Members accepts exactly what the decoder
// accepts, with the same keys and values.
func FuzzMembersMatchesDecoder(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, ` {"b" : "x\"}" , "c":[{"d":"]"},2,null] ,"e":{"f":{}}} `,
		`{"\u0061":1,"a":2}`, `{"k\\":"v\\"}`, "{\"\xff\":1,\"\xfe\":2}", `{"n":-1.5e+3,"t":true,"f":false}`,
		`{"a":1}{}`, `{"a":`, `[1]`, `"s"`, `{"a" 1}`, `{,}`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Members(data)
		want, werr := decode(data)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Members(%q) error %v, decoder's %v", data, err, werr)
		}
		if err != nil {
			return
		}
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Members(%q) mismatch (-decoder +scanner):\n%s", data, diff)
		}
	})
}

func BenchmarkMembers(b *testing.B) {
	data := []byte(`{"payloadType":"application/vnd.nodehotfix.keyset.v1+json","payload":"` + strings.Repeat("QUJD", 200) +
		`","signatures":[{"keyid":"0123456789abcdef","sig":"` + strings.Repeat("c2ln", 22) + `"},{"keyid":"fedcba9876543210","sig":"` + strings.Repeat("c2ln", 22) + `"}]}`)
	b.Run("scanner", func(b *testing.B) {
		for b.Loop() {
			if _, err := Members(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		for b.Loop() {
			if _, err := decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
