package duration

import (
	"testing"
	"time"
)

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "30m": 30 * time.Minute, "12h": 12 * time.Hour, "30d": 30 * 24 * time.Hour,
		"1d12h": 36 * time.Hour, "0d": 0, "1d30m": 24*time.Hour + 30*time.Minute,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got, _ := Parse(Format(want)); got != want {
			t.Errorf("Format(%v) = %q does not read back", want, Format(want))
		}
	}
	for _, bad := range []string{"", "d", "30", "30days", "-1h", "1d-1h", "1.5d", "d12h", "99999d", "1h2d"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, got)
		}
	}
	if got := Format(36*time.Hour + 30*time.Minute); got != "1d12h30m" {
		t.Errorf("Format = %q", got)
	}
}
