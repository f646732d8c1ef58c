package lpsd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of its cgroup's memory limit lpsd gives the
// Go runtime as its soft limit: the rest is for what the runtime does not
// count (the bbolt file's mapped pages, thread stacks, the kernel's
// buffers for its sockets).
const memoryLimitShare = 0.9

// cgroupFiles are where a process's cgroup is read: its membership (the
// kernel's /proc/self/cgroup) and the cgroup file system's mount.
type cgroupFiles struct {
	self, root string
}

var systemCgroup = cgroupFiles{self: "/proc/self/cgroup", root: "/sys/fs/cgroup"}

// applyMemoryLimit sets the Go runtime's soft memory limit to
// memoryLimitShare of the memory limit of lpsd's cgroup (cgroup v2
// memory.max, or v1 memory.limit_in_bytes), unless GOMEMLIMIT sets one:
// without it the collector lets the heap grow to twice what is live before
// collecting, and the kernel kills a process at its cgroup's limit (the
// Kubernetes manifest's 256 MiB) when a look's garbage would have been
// collectable. It returns the limit set, 0 for none, and logs what it did.
// A cgroup it cannot read leaves the runtime as it is.
func applyMemoryLimit(cg cgroupFiles, log *slog.Logger) int64 {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	limit, path, err := cg.memoryLimit()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.Debug("no cgroup memory limit to follow", "err", err)
		return 0
	case err != nil:
		log.Warn("the cgroup's memory limit could not be read; the Go runtime keeps its default", "err", err)
		return 0
	case limit <= 0:
		return 0 // no limit
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Go runtime memory limit set from the cgroup's", "cgroupLimitBytes", limit, "softLimitBytes", soft, "file", path)
	return soft
}

// noLimit is the least cgroup v1 limit that means none: the kernel shows
// an unlimited cgroup as the largest page-aligned int64.
const noLimit = 1 << 62

// memoryLimit returns the memory limit of the process's cgroup, 0 for
// none, and the file it was read from: cgroup v2's memory.max (the "0::"
// line), or else v1's memory.limit_in_bytes (the "memory" controller's
// line). The limit in force is the smallest on the way from the process's
// cgroup to the mount's root (a slice or a pod may hold it, the leaf
// reading "max"); in a container without a cgroup namespace the membership
// names the host's path, which the container's mount does not hold, and
// the mount's root is the container's own cgroup, which the walk ends at.
func (cg cgroupFiles) memoryLimit() (int64, string, error) {
	self, err := os.ReadFile(cg.self)
	if err != nil {
		return 0, "", err
	}
	var v2, v1 string
	found2, found1 := false, false
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		id, rest, _ := strings.Cut(sc.Text(), ":")
		controllers, dir, ok := strings.Cut(rest, ":")
		switch {
		case !ok:
		case id == "0" && controllers == "":
			v2, found2 = dir, true
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			v1, found1 = dir, true
		}
	}
	if found2 {
		if n, path, err := smallestLimit(cg.root, v2, "memory.max"); !errors.Is(err, fs.ErrNotExist) {
			return n, path, err
		}
	}
	if found1 {
		return smallestLimit(filepath.Join(cg.root, "memory"), v1, "memory.limit_in_bytes")
	}
	return 0, "", fmt.Errorf("%s: no memory cgroup: %w", cg.self, fs.ErrNotExist)
}

// smallestLimit reads file in dir (under mount) and each directory above it
// up to mount, and returns the smallest limit among them (0: none) and
// where it was read; fs.ErrNotExist when none of them has the file.
func smallestLimit(mount, dir, file string) (int64, string, error) {
	var best int64
	where, seen := "", false
	for d := filepath.Join(mount, filepath.Clean("/"+dir)); ; d = filepath.Dir(d) {
		path := filepath.Join(d, file)
		n, err := readLimit(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return 0, path, err
		default:
			if !seen {
				where = path
			}
			seen = true
			if n > 0 && (best == 0 || n < best) {
				best, where = n, path
			}
		}
		if d == mount || len(d) < len(mount) {
			break
		}
	}
	if !seen {
		return 0, "", fmt.Errorf("%s under %s: %w", file, mount, fs.ErrNotExist)
	}
	return best, where, nil
}

// readLimit reads one limit file: a byte count, or "max" (0: none).
func readLimit(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v := strings.TrimSpace(string(data))
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil || n < 0:
		return 0, fmt.Errorf("%s: %q is not a byte count or max", path, v)
	case n >= noLimit:
		return 0, nil
	}
	return n, nil
}
