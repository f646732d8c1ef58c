package downloadhotfix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/release"
)

// helperEnv turns the test binary into one download-hotfix process (see
// TestMain). Its value is a JSON helperSpec.
const helperEnv = "DOWNLOADHOTFIX_TEST_HELPER"

// helperSpec configures a helper process.
type helperSpec struct {
	Root    string
	Version string
	CAPEM   []byte
	Budget  time.Duration
	// FileSizeLimit, when set, is the RLIMIT_FSIZE soft limit in bytes the
	// process stages under.
	FileSizeLimit uint64
}

// helperResult is what a helper process prints on stdout.
type helperResult struct {
	Outcome Outcome
	Err     string
}

func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(helperMain(spec))
	}
	os.Exit(m.Run())
}

// helperMain runs the real Run in this process, as the download-hotfix
// command does, and prints its result.
func helperMain(spec string) int {
	var s helperSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "helper spec:", err)
		return 2
	}
	if s.FileSizeLimit > 0 {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, "getrlimit:", err)
			return 2
		}
		lim.Cur = s.FileSizeLimit
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			return 2
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Budget)
	defer cancel()
	res := Run(ctx, Config{Root: layout.Root(s.Root), Version: s.Version, ArtifactCAPEM: s.CAPEM})
	out := helperResult{Outcome: res.Outcome}
	if res.Err != nil {
		out.Err = res.Err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 2
	}
	return 0
}

// helperProc is a running helper process.
type helperProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error // Wait's error, set before done is closed
}

func startHelper(t *testing.T, s helperSpec) *helperProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	p := &helperProc{done: make(chan struct{})}
	p.cmd = exec.Command(exe, "-test.run=^$")
	// The race runtime sleeps a second at exit by default; that would
	// dominate every run and the kill window.
	p.cmd.Env = append(os.Environ(), helperEnv+"="+string(spec), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		<-p.done
	})
	return p
}

// kill sends SIGKILL; it is a no-op once the process has exited.
func (p *helperProc) kill() { p.cmd.Process.Signal(syscall.SIGKILL) }

// result waits (bounded) for a process that must finish on its own and
// returns what it printed.
func (p *helperProc) result(t *testing.T) helperResult {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.kill()
		<-p.done
		t.Fatalf("helper did not finish within a minute; stderr:\n%s", p.stderr.String())
	}
	if p.err != nil {
		t.Fatalf("helper: %v; stderr:\n%s", p.err, p.stderr.String())
	}
	var r helperResult
	if err := json.Unmarshal(p.stdout.Bytes(), &r); err != nil {
		t.Fatalf("helper output %q: %v; stderr:\n%s", p.stdout.String(), err, p.stderr.String())
	}
	return r
}

// trickleServer serves body over TLS, chunk bytes every interval, and counts
// requests. It shares httptest's certificate, so fixture.caPEM trusts it.
func trickleServer(t *testing.T, body []byte, chunk int, interval time.Duration) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		rc := http.NewResponseController(w)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for off := 0; off < len(body); off += chunk {
			if _, err := w.Write(body[off:min(off+chunk, len(body))]); err != nil {
				return
			}
			rc.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}))
	// Killed clients abort handshakes; that is the point, not news.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &hits
}

// signedPointer trusts a fresh release key and writes a pointer whose
// release, signed by it, names body at url.
func (f *fixture) signedPointer(body []byte, url string) {
	f.t.Helper()
	pubLine, sign := f.keys()
	f.installKeys(pubLine)
	rel := f.release(body, func(r *release.Release) {
		p := release.Platform(runtime.GOOS, runtime.GOARCH)
		a := r.Artifacts[p]
		a.URL = url
		r.Artifacts[p] = a
	})
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{sign(rel)}})
}

func (f *fixture) spec() helperSpec {
	return helperSpec{Root: string(f.root), Version: f.version, CAPEM: f.caPEM, Budget: time.Minute}
}

// finalState classifies the hotfix path: "absent", "old" (content old),
// "new" (exactly the verified artifact with the baked binary's mode), or a
// description of anything else.
func (f *fixture) finalState(old []byte) string {
	f.t.Helper()
	fi, err := os.Lstat(f.root.HotfixBinary())
	if errors.Is(err, fs.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if !fi.Mode().IsRegular() {
		return "not a regular file: " + fi.Mode().String()
	}
	data, err := os.ReadFile(f.root.HotfixBinary())
	switch {
	case err != nil:
		return "unreadable: " + err.Error()
	case bytes.Equal(data, old):
		return "old"
	case bytes.Equal(data, f.body) && fi.Mode().Perm() == 0o750:
		return "new"
	case bytes.Equal(data, f.body):
		return fmt.Sprintf("new content with mode %v", fi.Mode().Perm())
	}
	return fmt.Sprintf("foreign or partial content (%d bytes, artifact has %d)", len(data), len(f.body))
}

// temps lists temp files of the hotfix binary in the staging directory.
func (f *fixture) temps() []string {
	m, _ := filepath.Glob(filepath.Join(f.root.Containers(), ".aks-node-controller-hotfix.tmp-*"))
	return m
}

// TestIntegrationStagingCrashLoop kills download-hotfix processes with
// SIGKILL at random points of a signed-release staging run (process start,
// lock, download of a trickled artifact, fsync, the version check, rename,
// directory fsync, event) 100 times. After every kill the hotfix path must be
// what it was before the run (absent or the old binary) or the complete
// verified new binary with its final mode, never a partial file; a later run
// must remove every temp file the killed ones left.
//
// SIGKILL loses no page-cache data, so this checks atomicity against process
// death; durability across power loss rests on atomicfile's fsync order.
func TestIntegrationStagingCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills 100 download-hotfix processes")
	}
	f := newFixture(t)
	srv, _ := trickleServer(t, f.body, 64<<10, time.Millisecond)
	f.signedPointer(f.body, srv.URL+"/agent")
	spec := f.spec()
	old := []byte("old hotfix")

	// The fastest of three uninterrupted runs sizes the kill window, so one
	// run slowed by a busy machine does not put most kills after the end.
	full := time.Duration(1<<63 - 1)
	for range 3 {
		if err := os.Remove(f.root.HotfixBinary()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		start := time.Now()
		if res := startHelper(t, spec).result(t); res.Outcome != Staged {
			t.Fatalf("uninterrupted run = %+v, want staged", res)
		}
		full = min(full, time.Since(start))
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	window := full * 5 / 4
	t.Logf("uninterrupted run takes %v; kill delays are uniform in [0, %v); seed %d", full, window, seed)

	// At least 100 kills; on a machine busy enough that the runs under
	// test are slower than the sizing ones, the window widens every 100
	// kills that missed one side of the rename, up to 400 kills.
	const minKills, maxKills = 100, 400
	states := map[string]int{}
	leftTemps := 0
	kills := 0
	for i := 0; i < maxKills && (i < minKills || states["new"] == 0 || leftTemps == 0); i++ {
		if i > 0 && i%minKills == 0 {
			window *= 2
			t.Logf("after %d kills one side of the rename was never hit (states %v, %d with temps): window now %v", i, states, leftTemps, window)
		}
		kills++
		before := "absent"
		if i%2 == 0 {
			before = "old"
			f.stageOld(string(old))
		} else if err := os.Remove(f.root.HotfixBinary()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		delay := time.Duration(rng.Int64N(int64(window)))
		p := startHelper(t, spec)
		select {
		case <-p.done:
		case <-time.After(delay): // the fault: SIGKILL at a random point
		}
		p.kill()
		<-p.done
		got := f.finalState(old)
		// A stale binary may already have been removed when the kill came.
		if got != before && got != "new" && got != "absent" {
			t.Fatalf("kill %d after %v: hotfix path is %s, want %s, absent or the complete new binary (seed %d)", i, delay, got, before, seed)
		}
		states[got]++
		if len(f.temps()) > 0 {
			leftTemps++
		}
	}
	t.Logf("after %d kills: hotfix path states %v; temp files left behind after %d", kills, states, leftTemps)
	// Both sides of the rename must have been hit, or the loop proved little.
	if states["new"] == 0 || leftTemps == 0 {
		t.Errorf("kills never landed both mid-staging and after the rename (states %v, %d with temps); seed %d", states, leftTemps, seed)
	}

	// The next run removes every leftover, including a planted one, and stages.
	f.stageOld(string(old))
	planted := filepath.Join(f.root.Containers(), ".aks-node-controller-hotfix.tmp-planted")
	if err := os.WriteFile(planted, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := startHelper(t, spec).result(t); res.Outcome != Staged {
		t.Fatalf("run after the kills = %+v, want staged", res)
	}
	if got := f.finalState(old); got != "new" {
		t.Errorf("hotfix path after the final run is %s, want new", got)
	}
	if left := f.temps(); len(left) > 0 {
		t.Errorf("temp files survived the next run: %v", left)
	}
}

// TestIntegrationConcurrentRunsDoNotInterleave starts three download-hotfix
// processes at once (a restarted unit, a cloud-init re-run): the flock lets
// one stage while the others wait, then find the verified binary in place.
func TestIntegrationConcurrentRunsDoNotInterleave(t *testing.T) {
	if testing.Short() {
		t.Skip("runs download-hotfix processes")
	}
	f := newFixture(t)
	srv, hits := trickleServer(t, f.body, 64<<10, 2*time.Millisecond)
	f.signedPointer(f.body, srv.URL+"/agent")
	f.stageOld("old hotfix")
	const n = 3
	procs := make([]*helperProc, n)
	for i := range procs {
		procs[i] = startHelper(t, f.spec())
	}
	got := map[Outcome]int{}
	for _, p := range procs {
		got[p.result(t).Outcome]++
	}
	if diff := cmp.Diff(map[Outcome]int{Staged: 1, AlreadyStaged: n - 1}, got); diff != "" {
		t.Errorf("outcomes of %d concurrent runs (-want +got):\n%s", n, diff)
	}
	if h := hits.Load(); h != 1 {
		t.Errorf("artifact downloaded %d times, want 1", h)
	}
	if s := f.finalState([]byte("old hotfix")); s != "new" {
		t.Errorf("hotfix path is %s, want new", s)
	}
	f.noTemps()
}

// TestIntegrationStagingFileSizeLimit stages under RLIMIT_FSIZE, so writing
// the temp file fails with EFBIG part way (a full disk at write time): the
// run fails open, removes its temp file and keeps the old binary.
func TestIntegrationStagingFileSizeLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a download-hotfix process")
	}
	t.Parallel()
	f := newFixture(t)
	f.signedPointer(f.body, f.srv.URL+"/agent")
	f.stageOld("old hotfix")
	spec := f.spec()
	spec.FileSizeLimit = 256 << 10
	res := startHelper(t, spec).result(t)
	if res.Outcome != Failed || !strings.Contains(res.Err, syscall.EFBIG.Error()) {
		t.Fatalf("run under RLIMIT_FSIZE = %+v, want failed with %q", res, syscall.EFBIG.Error())
	}
	if got := f.finalState([]byte("old hotfix")); got != "absent" {
		t.Errorf("hotfix path is %s, want the stale binary removed", got)
	}
	f.noTemps()
}
