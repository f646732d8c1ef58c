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
