package release

import (
	"testing"
	"time"
)

func TestRequireKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{`{"a":1,"b":2}`, true},
		{`{"b":2,"a":1}`, true},
		{`{"a":1}`, false},
		{`{"a":1,"b":2,"c":3}`, false},
		{`{"a":1,"B":2}`, false},
	}
	for _, tt := range tests {
		if _, err := exactFields([]byte(tt.in), "a", "b"); (err == nil) != tt.ok {
			t.Errorf("exactFields(%s, a, b) = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}

func TestParseNotAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Time // zero: error
	}{
		{"2026-06-01T00:00:00Z", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)},
		{"9999-12-31T23:59:59Z", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)},
		{"2026-06-01T00:00:00z", time.Time{}},
		{"2026-06-01T00:00:00+00:00", time.Time{}},
		{"2026-06-01T02:00:00+02:00", time.Time{}},
		{"2026-06-01T00:00:00.0Z", time.Time{}},
		{"2026-06-01 00:00:00Z", time.Time{}},
		{"2026-06-01", time.Time{}},
		{" 2026-06-01T00:00:00Z", time.Time{}},
		{"", time.Time{}},
	}
	for _, tt := range tests {
		got, err := parseNotAfter(tt.in)
		if tt.want.IsZero() {
			if err == nil {
				t.Errorf("parseNotAfter(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseNotAfter(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestDecodeBase64(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"aGk=", true},
		{"", true},
		{"aGk", false},
		{"aGl=", false},
		{"aG\nk=", false},
		{"aG\rk=", false},
		{"aGk=aGk=", false},
		{"aG-_", false},
	}
	for _, tt := range tests {
		if _, err := decodeBase64(tt.in); (err == nil) != tt.ok {
			t.Errorf("decodeBase64(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}
