package lpsd

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// TestCgroupMemoryLimit reads a cgroup's memory limit as the kernel
// shows it: cgroup v2's memory.max (a byte count or "max"), v1's
// memory.limit_in_bytes (an unlimited one is the largest page-aligned
// int64), and neither.
func TestCgroupMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, self string
		files      map[string]string
		want       int64
		err        bool
	}{
		{"v2", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "268435456\n"}, 268435456, false},
		{"v2 namespaced", "0::/\n", map[string]string{"memory.max": "268435456\n"}, 268435456, false},
		{"v2 unlimited", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, false},
		{"v1", "4:memory:/docker/c1\n0::/\n", map[string]string{"memory/docker/c1/memory.limit_in_bytes": "536870912\n"}, 536870912, false},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"v1 among controllers", "3:cpu,memory:/x\n", map[string]string{"memory/x/memory.limit_in_bytes": "1048576\n"}, 1048576, false},
		{"garbage", "0::/\n", map[string]string{"memory.max": "lots\n"}, 0, true},
		{"no memory cgroup", "1:cpu:/\n", nil, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			self := filepath.Join(dir, "self")
			if err := os.WriteFile(self, []byte(tt.self), 0o644); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(dir, "cgroup")
			for name, data := range tt.files {
				p := filepath.Join(root, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, _, err := cgroupFiles{self: self, root: root}.memoryLimit()
			if got != tt.want || (err != nil) != tt.err {
				t.Errorf("memoryLimit = %d, %v; want %d, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}

// TestApplyMemoryLimit sets the runtime's soft limit to 90% of the
// cgroup's, and leaves it to GOMEMLIMIT when that is set.
func TestApplyMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	self := filepath.Join(dir, "self")
	os.WriteFile(self, []byte("0::/\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "memory.max"), []byte("1000000000\n"), 0o644)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv("GOMEMLIMIT", "") // empty: unset, as the runtime reads it
	if got := applyMemoryLimit(cgroupFiles{self: self, root: dir}, log); got != 900000000 || debug.SetMemoryLimit(-1) != 900000000 {
		t.Errorf("applyMemoryLimit = %d, runtime limit %d; want 900000000", got, debug.SetMemoryLimit(-1))
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := applyMemoryLimit(cgroupFiles{self: self, root: dir}, log); got != 0 {
		t.Errorf("with GOMEMLIMIT set, applyMemoryLimit = %d, want 0 (left to the runtime)", got)
	}
}
