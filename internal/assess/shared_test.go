package assess

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/memstore"
)

// gated is a store whose reads of the reports are counted and, while a
// gate is set, wait for it to close after reading: a slow read a test
// holds open. fail fails the reads.
type gated struct {
	*memstore.Store
	reads   atomic.Int32
	started chan struct{} // a read began
	mu      sync.Mutex
	gate    chan struct{}
	fail    error
}

func newGated(t *testing.T) *gated {
	g := &gated{Store: memstore.New(), started: make(chan struct{}, 64), gate: make(chan struct{})}
	t.Cleanup(func() { g.Close() })
	return g
}

func (g *gated) Reports(ctx context.Context) ([]store.Report, error) {
	g.reads.Add(1)
	rs, err := g.Store.Reports(ctx) // what the store holds as the read begins
	g.started <- struct{}{}
	g.mu.Lock()
	gate, fail := g.gate, g.fail
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if fail != nil {
		return nil, fail
	}
	return rs, err
}

// open lets the held read and every later one through.
func (g *gated) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func report(t *testing.T, st store.Store, vm string) {
	t.Helper()
	if _, err := st.PutReports(t.Context(), []store.Report{{VMID: vm, Boot: "b", Base: "202604.01", HotfixVersion: "202604.01.1", AgentVersion: "202604.01.1", Agent: "hotfix"}}); err != nil {
		t.Fatal(err)
	}
}

var sharedRelease = rollout.Release{Version: "202604.01.1", Base: "202604.01", Rollout: rollout.Rollout{State: rollout.Complete, Percent: 100}}

// look is one assessment's count of ok nodes, or its error.
type look struct {
	ok  uint64
	err error
}

func assessOK(ctx context.Context, src Source) look {
	f, err := Assess(ctx, src, []rollout.Release{sharedRelease}, time.Now())
	return look{f.Releases[sharedRelease.Version].Counts.OK, err}
}

// waitFor polls until n callers wait for sh's next read (the test's own
// deadline bounds it).
func waitFor(t *testing.T, sh *Shared, n int) {
	t.Helper()
	for sh.waiting() < n {
		if t.Context().Err() != nil {
			t.Fatal("callers never queued")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSharedReadsOnceForThoseWaiting: callers that arrive while a read
// runs share the next one, so nine concurrent looks cost two reads; each
// sees every write that finished before it called, the one written while
// the first read ran included; a look alone reads afresh.
func TestSharedReadsOnceForThoseWaiting(t *testing.T) {
	t.Parallel()
	g := newGated(t)
	sh := NewShared(g)
	report(t, g, "vm-1")
	first := make(chan look, 1)
	go func() { first <- assessOK(t.Context(), sh) }()
	<-g.started // the first read runs, held open
	report(t, g, "vm-2")
	looks := make(chan look, 8)
	for range 8 {
		go func() { looks <- assessOK(t.Context(), sh) }()
	}
	waitFor(t, sh, 8)
	g.open()
	if l := <-first; l.err != nil || l.ok != 1 {
		t.Errorf("the first look: %+v, want the 1 written before it", l)
	}
	for range 8 {
		if l := <-looks; l.err != nil || l.ok != 2 {
			t.Errorf("a waiting look: %+v, want both: the second was written before it called", l)
		}
	}
	if n := g.reads.Load(); n != 2 {
		t.Errorf("%d reads for 9 looks, want 2: the one running and one for those who waited", n)
	}
	report(t, g, "vm-3")
	if l := assessOK(t.Context(), sh); l.err != nil || l.ok != 3 || g.reads.Load() != 3 {
		t.Errorf("a look alone after the third write: %+v after %d reads", l, g.reads.Load())
	}
}

// TestSharedCallerGivesUp: a caller whose context ends returns at once
// while the read goes on, and a later look is not held by it.
func TestSharedCallerGivesUp(t *testing.T) {
	t.Parallel()
	g := newGated(t)
	sh := NewShared(g)
	report(t, g, "vm-1")
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan look, 1)
	go func() { gaveUp <- assessOK(ctx, sh) }()
	<-g.started
	cancel()
	if l := <-gaveUp; !errors.Is(l.err, context.Canceled) {
		t.Errorf("a caller that gave up: %+v, want context.Canceled", l)
	}
	g.open()
	if l := assessOK(t.Context(), sh); l.err != nil || l.ok != 1 {
		t.Errorf("the next look: %+v", l)
	}
}

// TestSharedFailure: a read that fails fails every look that shared it,
// and the next look reads again.
func TestSharedFailure(t *testing.T) {
	t.Parallel()
	g := newGated(t)
	sh := NewShared(g)
	report(t, g, "vm-1")
	g.fail = errors.New("store down")
	looks := make(chan look, 4)
	go func() { looks <- assessOK(t.Context(), sh) }()
	<-g.started
	for range 3 {
		go func() { looks <- assessOK(t.Context(), sh) }()
	}
	waitFor(t, sh, 3)
	g.open()
	for range 4 {
		if l := <-looks; l.err == nil {
			t.Errorf("a look over a failing store: %+v, want its error", l)
		}
	}
	g.mu.Lock()
	g.fail = nil
	g.mu.Unlock()
	if l := assessOK(t.Context(), sh); l.err != nil || l.ok != 1 {
		t.Errorf("the look after the store came back: %+v", l)
	}
}

// BenchmarkConcurrentLooks: eight looks at once (an autopilot look,
// status, explain, dashboards) over 20,000 reports and as many served
// records in a bbolt file, each read alone and shared (Shared). The
// ratio of the two is what sharing saves a replica whose readers arrive
// together.
func BenchmarkConcurrentLooks(b *testing.B) {
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "lpsd.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	const n = 20000
	for i := 0; i < n; i += 1000 {
		var rs []store.Report
		var ss []store.Served
		for j := i; j < i+1000; j++ {
			vm := fmt.Sprintf("%08x-0000-4000-8000-%012x", j, j)
			rs = append(rs, store.Report{VMID: vm, Boot: "b", Base: "202604.01", SubscriptionID: fmt.Sprintf("sub-%d", j%50), HotfixVersion: sharedRelease.Version,
				AgentVersion: sharedRelease.Version, Agent: "hotfix", ExitCode: j % 50 / 49, Time: time.Now().Add(-time.Hour)})
			ss = append(ss, store.Served{Version: sharedRelease.Version, VMID: vm, Boot: "b", Base: "202604.01", SubscriptionID: fmt.Sprintf("sub-%d", j%50), Time: time.Now().Add(-2 * time.Hour)})
		}
		if _, err := st.PutReports(b.Context(), rs); err != nil {
			b.Fatal(err)
		}
		if err := st.PutServed(b.Context(), ss); err != nil {
			b.Fatal(err)
		}
	}
	for _, shared := range []bool{false, true} {
		name := "alone"
		var src Source = st
		if shared {
			name, src = "shared", NewShared(st)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						if l := assessOK(b.Context(), src); l.err != nil || l.ok == 0 {
							b.Errorf("look: %+v", l)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
