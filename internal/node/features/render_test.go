package features

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRender(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   map[string]string
		want string
	}{
		{"nil", nil, ""},
		{"empty", map[string]string{}, ""},
		{"sorted-verbatim", map[string]string{"ZED": "1", HotfixKey: "true", "a_b": `"q" x=y`}, "ENABLE_PROVISIONING_HOTFIX=true\nZED=1\na_b=\"q\" x=y\n"},
		{"invalid-keys", map[string]string{"1A": "x", "A-B": "x", "": "x", "OK": "1"}, "OK=1\n"},
		{"multiline-values", map[string]string{"A": "x\ny", "B": "x\r", "C": "x\x00", "D": "ok"}, "D=ok\n"},
		{"reserved-kept", map[string]string{"PATH": "/x", "OK": "1"}, "OK=1\nPATH=/x\n"},
		{"nothing-survives", map[string]string{"A B": "x"}, ""},
	}
	for _, tt := range tests {
		if got := string(Render(tt.in)); got != tt.want {
			t.Errorf("%s: Render(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// TestRenderReadRoundTrip checks that what a producer renders reaches the
// node: every pair in Values, every unreserved pair in Env.
func TestRenderReadRoundTrip(t *testing.T) {
	t.Parallel()
	in := map[string]string{
		HotfixKey:    "true",
		"MY_FLAG":    ` a "b" $(c) # d=`,
		"empty":      "",
		"FUNCNEST":   "1",
		"LD_PRELOAD": "/x.so",
		"_X":         "1",
	}
	path := writeFile(t, secureDir(t), "enabled_features.sh", string(Render(in)), 0o600)
	got, err := Read(path)
	if err != nil {
		t.Fatalf("Read(Render(%q)): %v", in, err)
	}
	if diff := cmp.Diff(in, got.Values); diff != "" {
		t.Errorf("Read(Render).Values mismatch (-want +got):\n%s", diff)
	}
	want := []string{"ENABLE_PROVISIONING_HOTFIX=true", `MY_FLAG= a "b" $(c) # d=`, "empty="}
	if diff := cmp.Diff(want, got.Env()); diff != "" {
		t.Errorf("Read(Render).Env() mismatch (-want +got):\n%s", diff)
	}
	if !got.HotfixEnabled() {
		t.Error("Read(Render).HotfixEnabled() = false, want true")
	}
}

// FuzzRenderParse checks that whatever a producer renders, the node reads
// back exactly the entries the producer kept, and hands every unreserved one
// to children, in the rendered (sorted) order.
func FuzzRenderParse(f *testing.F) {
	f.Add("ENABLE_PROVISIONING_HOTFIX", "true", "B", "x=y")
	f.Add("A", "a\nb", "A B", "")
	f.Add("PATH", "/x", "FUNCNEST", "1")
	f.Add("_X", "1", "MY_FLAG", " # x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		data := Render(in)
		if len(data) > MaxSize {
			return
		}
		got, err := parse(data)
		if err != nil {
			t.Fatalf("parse(Render(%q)): %v", in, err)
		}
		kept := map[string]string{}
		for k, v := range in {
			if ValidKey(k) && !strings.ContainsAny(v, "\r\n\x00") {
				kept[k] = v
			}
		}
		if diff := cmp.Diff(kept, got.Values); diff != "" {
			t.Fatalf("parse(Render(%q)).Values mismatch (-want +got):\n%s", in, diff)
		}
		var keys []string
		for k := range kept {
			if _, reserved := Reserved(k); !reserved {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		wantEnv := []string{}
		for _, k := range keys {
			wantEnv = append(wantEnv, k+"="+kept[k])
		}
		if diff := cmp.Diff(wantEnv, got.Env()); diff != "" {
			t.Fatalf("parse(Render(%q)).Env() mismatch (-want +got):\n%s", in, diff)
		}
	})
}

// secureDir returns a new directory Read trusts: owned by the test's user,
// mode 0700 whatever the umask.
func secureDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "containers")
	mustMkdir(t, dir, 0o700)
	return dir
}
