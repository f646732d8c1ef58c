package downloadhotfix

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
)

// buildBadAgent compiles testdata/badagent reporting target, misbehaving on
// "version" as mode says; pidFile receives the pid of a child it leaves
// running (mode "hang").
func buildBadAgent(t *testing.T, mode, pidFile string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "agent")
	ldflags := "-X main.version=" + target + " -X main.mode=" + mode + " -X main.pidFile=" + pidFile
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, "./testdata/badagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build bad agent: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mountOver mounts fstype with options data over dir until the test ends,
// or skips the test when this process may not mount (not root).
func mountOver(t *testing.T, dir, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := syscall.Mount(fstype, dir, fstype, flags, data); err != nil {
		t.Skipf("cannot mount %s over %s (needs root with CAP_SYS_ADMIN): %v", fstype, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// layDown writes what a node has in the staging directory before
// download-hotfix runs: the baked binary, release keys, a pointer to a
// signed release of f.body and an old hotfix binary.
func (f *fixture) layDown() {
	f.t.Helper()
	if err := os.WriteFile(f.root.BakedBinary(), []byte("baked"), 0o750); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chmod(f.root.BakedBinary(), 0o750); err != nil {
		f.t.Fatal(err)
	}
	f.signedPointer(f.body, f.srv.URL+"/agent")
	f.stageOld("old hotfix")
}

// TestRunSymlinksAreNeverFollowed plants symlinks to a victim file where
// download-hotfix writes or removes: the hotfix path (staged over, and
// removed when the pointer no longer applies) and a leftover temp name.
// Each link is replaced or removed; the victim never changes.
func TestRunSymlinksAreNeverFollowed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		link    func(f *fixture) string
		pointer func(f *fixture)
		want    Outcome
	}{
		{
			name:    "hotfix path, staging",
			link:    func(f *fixture) string { return f.root.HotfixBinary() },
			pointer: func(f *fixture) { f.signedPointer(f.body, f.srv.URL+"/agent") },
			want:    Staged,
		},
		{
			name: "hotfix path, removal",
			link: func(f *fixture) string { return f.root.HotfixBinary() },
			pointer: func(f *fixture) {
				f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202605.30": "202605.30.1"}})
			},
			want: NoHotfixForBase,
		},
		{
			name: "leftover temp name",
			link: func(f *fixture) string {
				return filepath.Join(f.root.Containers(), ".aks-node-controller-hotfix.tmp-planted")
			},
			pointer: func(f *fixture) { f.signedPointer(f.body, f.srv.URL+"/agent") },
			want:    Staged,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			victim := filepath.Join(t.TempDir(), "passwd")
			if err := os.WriteFile(victim, []byte("root:x:0:0::/root:/bin/bash\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(victim, 0o644); err != nil {
				t.Fatal(err)
			}
			link := tt.link(f)
			if err := os.Symlink(victim, link); err != nil {
				t.Fatal(err)
			}
			tt.pointer(f)
			if res := f.run(); res.Outcome != tt.want {
				t.Fatalf("Run = %+v, want %s", res, tt.want)
			}
			if data, err := os.ReadFile(victim); err != nil || string(data) != "root:x:0:0::/root:/bin/bash\n" {
				t.Errorf("victim = %q, %v; want it unchanged", data, err)
			}
			if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("victim stat = %v, %v; want mode 0644", fi, err)
			}
			fi, err := os.Lstat(link)
			switch {
			case link != f.root.HotfixBinary() || tt.want != Staged:
				if err == nil {
					t.Errorf("%s still exists (%v), want it removed", link, fi.Mode())
				}
			case err != nil || !fi.Mode().IsRegular():
				t.Errorf("hotfix path is %v, %v; want a regular file replacing the link", fi, err)
			}
			if tt.want == Staged {
				if s := f.finalState(nil); s != "new" {
					t.Errorf("hotfix path is %s, want new", s)
				}
			}
			f.noTemps()
		})
	}
}

// TestRunDiskFull stages onto a 256 KiB tmpfs, so writing the temp file
// fails with ENOSPC: the run fails open, removes the temp file and keeps the
// old binary.
func TestRunDiskFull(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mountOver(t, f.root.Containers(), "tmpfs", 0, "size=256k,mode=0755")
	f.layDown()
	res := f.run()
	if res.Outcome != Failed || !errors.Is(res.Err, syscall.ENOSPC) {
		t.Fatalf("Run on a full file system = %+v, want failed with ENOSPC", res)
	}
	// The old binary is not the target: it is removed even though the
	// replacement failed, so nothing but the target can ever run.
	if s := f.finalState([]byte("old hotfix")); s != "absent" {
		t.Errorf("hotfix path is %s, want it absent", s)
	}
	f.noTemps()
}

// TestRunReadOnlyStagingDir makes the staging directory read-only (a
// read-only bind mount as root, mode 0555 otherwise): nothing can be
// created, so the run applies nothing, reports why and exits 0 or 1 (the
// launcher ignores both), and the old binary stays.
func TestRunReadOnlyStagingDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.layDown()
	dir := f.root.Containers()
	if os.Geteuid() == 0 {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("cannot bind-mount %s: %v", dir, err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		})
		if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			t.Skipf("cannot remount %s read-only: %v", dir, err)
		}
	} else {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	}
	res := f.run()
	if res.Outcome != Failed || !(errors.Is(res.Err, syscall.EROFS) || errors.Is(res.Err, syscall.EACCES)) {
		t.Fatalf("Run with a read-only staging dir = %+v, want nothing applied and EROFS or EACCES", res)
	}
	if f.hits.Load() != 0 {
		t.Errorf("downloaded %d times into a directory that cannot hold the result", f.hits.Load())
	}
	// Not even the stale binary can be removed from a read-only directory;
	// it stays, and hotfix.Select refuses it (it is not the target).
	if s := f.finalState([]byte("old hotfix")); s != "old" {
		t.Errorf("hotfix path is %s, want the old binary", s)
	}
}

// TestRunNoexecStagingDir stages onto a noexec mount: the verified binary
// cannot run its version check, so it is never moved into place.
func TestRunNoexecStagingDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mountOver(t, f.root.Containers(), "tmpfs", syscall.MS_NOEXEC, "size=64m,mode=0755")
	f.layDown()
	res := f.run()
	if res.Outcome != Failed || !errors.Is(res.Err, syscall.EACCES) {
		t.Fatalf("Run on a noexec mount = %+v, want failed with EACCES", res)
	}
	// The old binary is not the target: it is removed even though the
	// replacement failed, so nothing but the target can ever run.
	if s := f.finalState([]byte("old hotfix")); s != "absent" {
		t.Errorf("hotfix path is %s, want it absent", s)
	}
	f.noTemps()
}

// TestRunVersionCheckFaults stages verified binaries that misbehave when
// asked for their version: one hangs with a child holding its stdout, one
// prints 100 MiB, one exits 1. Each is refused within the budget (the hung
// process group is killed, the output capped), the old binary stays and no
// temp file is left.
func TestRunVersionCheckFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode    string
		budget  time.Duration
		wantErr string
	}{
		{"hang", 3 * time.Second, "signal: killed"},
		{"spew", time.Minute, "stdout exceeds 256 bytes"},
		{"fail", time.Minute, "exit status 1"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			f.body = buildBadAgent(t, tt.mode, pidFile)
			f.layDown()
			start := time.Now()
			res := Run(within(t, tt.budget), Config{Root: f.root, Version: baked, ArtifactCAPEM: f.caPEM})
			took := time.Since(start)
			if res.Outcome != Failed || res.Err == nil || !strings.Contains(res.Err.Error(), tt.wantErr) {
				t.Fatalf("Run = %+v, want failed mentioning %q", res, tt.wantErr)
			}
			// WaitDelay adds at most a second to the budget.
			if limit := tt.budget + 3*time.Second; took > limit {
				t.Errorf("Run took %v, want at most %v", took, limit)
			}
			if s := f.finalState([]byte("old hotfix")); s != "absent" {
				t.Errorf("hotfix path is %s, want the stale binary removed", s)
			}
			f.noTemps()
			if tt.mode == "hang" {
				waitProcessGone(t, pidFile)
			}
		})
	}
}

// waitProcessGone reads a pid from pidFile and waits, bounded, until that
// process no longer exists (or is a zombie nobody reaped yet).
func waitProcessGone(t *testing.T, pidFile string) {
	t.Helper()
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the hung agent never reported its child: %v", err)
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		// The state follows the parenthesised command name.
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the hung agent's child %d survived its process group's kill", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunStagesDuringForkStorm stages while other goroutines fork and exec
// without pause, the setting in which a just-written binary can be briefly
// busy (ETXTBSY, golang/go#22315): every run must still stage.
func TestRunStagesDuringForkStorm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.layDown()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				exec.Command("/bin/true").Run()
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	for i := range 10 {
		f.stageOld("old hotfix")
		if res := f.run(); res.Outcome != Staged {
			t.Fatalf("run %d during a fork storm = %+v, want staged", i, res)
		}
	}
}

// TestRunSlowArtifactBoundedByBudget serves the artifact at a trickle that
// never stalls long enough for the stall timeout: only the run's budget ends
// it, and it ends on time with the old binary intact.
func TestRunSlowArtifactBoundedByBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv, _ := trickleServer(t, f.body, 1, 10*time.Millisecond)
	f.layDown()
	f.signedPointer(f.body, srv.URL+"/agent")
	const budget = 500 * time.Millisecond
	start := time.Now()
	res := Run(within(t, budget), Config{Root: f.root, Version: baked, ArtifactCAPEM: f.caPEM})
	if took := time.Since(start); took > budget+2*time.Second {
		t.Errorf("Run took %v with a %v budget", took, budget)
	}
	if res.Outcome != Failed || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("Run = %+v, want failed at the deadline", res)
	}
	// The old binary is not the target: it is removed even though the
	// replacement failed, so nothing but the target can ever run.
	if s := f.finalState([]byte("old hotfix")); s != "absent" {
		t.Errorf("hotfix path is %s, want it absent", s)
	}
	f.noTemps()
}

// TestRunRefusesUntrustedStagingDir: a staging directory others could write
// (or one that is a symlink, or owned by another user) is refused before
// anything is downloaded, locked or removed there.
func TestRunRefusesUntrustedStagingDir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, f *fixture)
		want    string
	}{
		{"group-writable", func(t *testing.T, f *fixture) { chmod(t, f.root.Containers(), 0o775) }, "writable by group or others (mode 0775)"},
		{"world-writable-sticky", func(t *testing.T, f *fixture) { chmod(t, f.root.Containers(), 0o777|fs.ModeSticky) }, "writable by group or others (mode 0777)"},
		{"symlink", func(t *testing.T, f *fixture) {
			dir := f.root.Containers()
			moved := dir + ".moved"
			if err := os.Rename(dir, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, dir); err != nil {
				t.Fatal(err)
			}
		}, "is a symlink"},
		{"other-owner", func(t *testing.T, f *fixture) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the directory to uid 1000")
			}
			if err := os.Chown(f.root.Containers(), 1000, -1); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 1000, not 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.layDown()
			tt.prepare(t, f)
			res := f.run()
			if res.Outcome != Failed || res.Err == nil || !strings.Contains(res.Err.Error(), tt.want) {
				t.Fatalf("Run = %+v, want failed with %q", res, tt.want)
			}
			if f.hits.Load() != 0 {
				t.Errorf("downloaded %d times into an untrusted directory", f.hits.Load())
			}
			if s := f.finalState([]byte("old hotfix")); s != "old" {
				t.Errorf("hotfix path is %s, want the old binary untouched", s)
			}
			if _, err := os.Lstat(f.root.HotfixLock()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("lock file created in the untrusted directory (Lstat: %v)", err)
			}
		})
	}
}

func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
