package hotfix

import (
	"errors"
	"testing"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		wantBase  string
		wantPatch int
		wantErr   bool
	}{
		{in: "202604.01.1", wantBase: "202604.01", wantPatch: 1},
		{in: "202604.01.0", wantBase: "202604.01", wantPatch: 0},
		{in: "202605.30.2", wantBase: "202605.30", wantPatch: 2},
		{in: "  202604.01.12\n", wantBase: "202604.01", wantPatch: 12},
		{in: "202612.31.2147483647", wantBase: "202612.31", wantPatch: 2147483647},
		{in: "dev", wantErr: true},
		{in: "", wantErr: true},
		{in: "202604.01", wantErr: true},
		{in: "202604.01.", wantErr: true},
		{in: "202604.1.2", wantErr: true},
		{in: "20260.01.2", wantErr: true},
		{in: "202613.01.2", wantErr: true},
		{in: "202600.01.2", wantErr: true},
		{in: "202604.00.2", wantErr: true},
		{in: "202604.32.2", wantErr: true},
		{in: "202604.01.01", wantErr: true},
		{in: "202604.01.1-1", wantErr: true},
		{in: "202604.01.+1", wantErr: true},
		{in: "202604.01.-1", wantErr: true},
		{in: "202604.01.2.5", wantErr: true},
		{in: "v202604.01.1", wantErr: true},
		{in: "\ufeff202604.01.1", wantErr: true},
		{in: "202604.01.2147483648", wantErr: true},
		{in: "２０２６０４.01.1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseVersion(%q) = %v, want error", tt.in, got)
			} else if !errors.Is(err, ErrMalformedVersion) {
				t.Errorf("ParseVersion(%q) error %v does not wrap ErrMalformedVersion", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseVersion(%q) error: %v", tt.in, err)
			continue
		}
		if got.Base() != tt.wantBase || got.Patch() != tt.wantPatch {
			t.Errorf("ParseVersion(%q) = %s/%d, want %s/%d", tt.in, got.Base(), got.Patch(), tt.wantBase, tt.wantPatch)
		}
	}
}

// TestIsUpgrade ports the reference's shouldUpgrade table and adds the cases
// where it was lenient: a prerelease suffix is malformed here, not "newer".
func TestIsUpgrade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, current, candidate string
		want                     bool
	}{
		{"base .0 -> hotfix .1", "202604.01.0", "202604.01.1", true},
		{"base .0 -> hotfix .2", "202604.01.0", "202604.01.2", true},
		{"hotfix .1 -> hotfix .2", "202604.01.1", "202604.01.2", true},
		{"patch 9 -> 10 is numeric", "202604.01.9", "202604.01.10", true},
		{"same version .0", "202604.01.0", "202604.01.0", false},
		{"same version .1", "202604.01.1", "202604.01.1", false},
		{"different month", "202604.01.0", "202603.01.1", false},
		{"newer month", "202604.01.0", "202605.01.1", false},
		{"different day", "202604.01.0", "202604.02.1", false},
		{"current patch higher", "202604.01.3", "202604.01.2", false},
		{"prerelease is malformed", "202604.01.0", "202604.01.1-1", false},
		{"dev current", "dev", "202604.01.1", false},
		{"dev hotfix", "202604.01.0", "dev", false},
		{"both dev", "dev", "dev", false},
		{"empty current", "", "202604.01.1", false},
		{"empty hotfix", "202604.01.0", "", false},
	}
	for _, tt := range tests {
		cur, _ := ParseVersion(tt.current)
		cand, _ := ParseVersion(tt.candidate)
		if got := IsUpgrade(cur, cand); got != tt.want {
			t.Errorf("%s: IsUpgrade(%q, %q) = %v, want %v", tt.name, tt.current, tt.candidate, got, tt.want)
		}
	}
}

func TestVersionString(t *testing.T) {
	t.Parallel()
	if got := MustParseVersion(" 202604.01.7 ").String(); got != "202604.01.7" {
		t.Errorf("String() = %q, want %q", got, "202604.01.7")
	}
	if got := (Version{}).String(); got != "" {
		t.Errorf("zero String() = %q, want empty", got)
	}
}

// FuzzParseVersion checks that accepted versions round-trip through String
// and that the gate is irreflexive and asymmetric on them.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"202604.01.1", "dev", "202604.01.1-1", "202604.01.", "1.2.3", "202604.01.01", " 202612.31.0\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if !v.IsZero() {
				t.Fatalf("ParseVersion(%q) returned %v with error %v", s, v, err)
			}
			return
		}
		again, err := ParseVersion(v.String())
		if err != nil || again != v {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
		if IsUpgrade(v, v) {
			t.Fatalf("IsUpgrade(%v, %v) = true", v, v)
		}
		next := Version{base: v.base, patch: v.patch + 1}
		if !IsUpgrade(v, next) || IsUpgrade(next, v) {
			t.Fatalf("gate not strict between %v and %v", v, next)
		}
	})
}
