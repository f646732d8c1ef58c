package lpsd

import (
	"os"
	"path/filepath"
	"testing"
)

func fakeCgroup(t *testing.T, self string, files map[string]string) cgroupFiles {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "self")
	if err := os.WriteFile(p, []byte(self), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "cgroup")
	for name, data := range files {
		f := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cgroupFiles{self: p, root: root}
}

// a container on a cgroup v1 node without a cgroup namespace
// (Docker's default on v1, Kubernetes on v1 nodes): /proc/self/cgroup
// names the host path, and /sys/fs/cgroup/memory is the container's own
// cgroup mounted at its root. The limit is at
// /sys/fs/cgroup/memory/memory.limit_in_bytes; memoryLimit finds it by
// walking up from the host path it cannot see.
func TestCgroupV1ContainerView(t *testing.T) {
	t.Parallel()
	cg := fakeCgroup(t, "12:memory:/kubepods/burstable/pod1/c1\n0::/\n",
		map[string]string{"memory/memory.limit_in_bytes": "268435456\n"})
	got, path, err := cg.memoryLimit()
	if got != 268435456 {
		t.Errorf("memoryLimit = %d, %q, %v; want 268435456 (the container's mount root)", got, path, err)
	}
}

// v2 without a cgroup namespace (--cgroupns=host), same
// shape: /proc/self/cgroup says 0::/system.slice/docker-c1.scope and the
// container sees its own cgroup at /sys/fs/cgroup.
func TestCgroupV2HostNamespaceView(t *testing.T) {
	t.Parallel()
	cg := fakeCgroup(t, "0::/system.slice/docker-c1.scope\n",
		map[string]string{"memory.max": "268435456\n"})
	got, path, err := cg.memoryLimit()
	if got != 268435456 {
		t.Errorf("memoryLimit = %d, %q, %v; want 268435456", got, path, err)
	}
}

// nested cgroups: the effective limit is the smallest on the
// path to the root. lpsd.service under a slice with MemoryMax (or a
// container whose pod holds the limit) reads "max" at its leaf.
func TestCgroupV2AncestorLimit(t *testing.T) {
	t.Parallel()
	cg := fakeCgroup(t, "0::/lpsd.slice/lpsd.service\n", map[string]string{
		"lpsd.slice/memory.max":              "268435456\n",
		"lpsd.slice/lpsd.service/memory.max": "max\n",
	})
	got, _, err := cg.memoryLimit()
	if got != 268435456 {
		t.Errorf("memoryLimit = %d, %v; want the slice's 268435456", got, err)
	}
}
