package typo

import "testing"

func TestClosest(t *testing.T) {
	t.Parallel()
	known := []string{"etcd-ca", "etcd-cert", "etcd-key", "percent", "json", "listen", "admin-listen"}
	tests := []struct{ name, in, want string }{
		{"exact", "json", "json"},
		{"missing-letter", "percnt", "percent"},
		{"swapped", "lsiten", "listen"},
		{"two-edits", "etcd-cat", "etcd-ca"},
		{"prefix-three-away", "admin-lis", "admin-listen"},
		{"tie-earlier", "etcd-c", "etcd-ca"},
		{"too-far", "store", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		if got := Closest(tt.in, known); got != tt.want {
			t.Errorf("%s: Closest(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func FuzzClosest(f *testing.F) {
	f.Add("percnt", "percent")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, name, k string) {
		got := Closest(name, []string{k})
		if got != "" && got != k {
			t.Fatalf("Closest(%q, [%q]) = %q, not a known name", name, k, got)
		}
		if name == k && got != k {
			t.Fatalf("Closest(%q, [%q]) = %q, want the exact match", name, k, got)
		}
	})
}
