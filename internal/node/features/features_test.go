package features

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidKey(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]bool{
		"A": true, "_": true, "a_B9": true, HotfixKey: true,
		"": false, "1A": false, "A-B": false, "A B": false, " A": false, "é": false, "A=": false,
	} {
		if got := ValidKey(k); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestHotfixEnabled(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"true": true, "1": false, "TRUE": false, `"true"`: false, "true ": false, " true": false, "true\r": false, "": false} {
		m := map[string]string{HotfixKey: v}
		if got := HotfixEnabled(m); got != want {
			t.Errorf("HotfixEnabled(%q) = %v, want %v", v, got, want)
		}
		if got := (File{Values: m}).HotfixEnabled(); got != want {
			t.Errorf("File{%s=%q}.HotfixEnabled() = %v, want %v", HotfixKey, v, got, want)
		}
	}
	if (File{}).HotfixEnabled() {
		t.Error("File{}.HotfixEnabled() = true, want false")
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	f := File{
		Values:   map[string]string{"B": "2", "A": "x=y ", "PATH": "/x"},
		Accepted: []Pair{{Key: "B", Value: "2"}, {Key: "A", Value: "x=y "}},
	}
	if diff := cmp.Diff([]string{"B=2", "A=x=y "}, f.Env()); diff != "" {
		t.Errorf("Env() mismatch (-want +got):\n%s", diff)
	}
	if got := (File{}).Env(); len(got) != 0 {
		t.Errorf("File{}.Env() = %q, want empty", got)
	}
}
