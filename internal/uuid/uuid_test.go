package uuid

import "testing"

func TestCanonical(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"02AAB8A4-74EF-476E-8182-F6D2BA4166A6": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
		"00000000-0000-0000-0000-000000000000": "00000000-0000-0000-0000-000000000000",
		"02aab8a4-74ef-476e-8182-f6d2ba4166a":  "",
		"02aab8a4_74ef-476e-8182-f6d2ba4166a6": "",
		"urn:uuid:02aab8a4-74ef-476e-8182-f6d": "",
		" 2aab8a4-74ef-476e-8182-f6d2ba4166a6": "",
	} {
		got, ok := Canonical(in)
		if got != want || ok != (want != "") {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
