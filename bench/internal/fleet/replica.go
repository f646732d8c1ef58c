package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/autopilot"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/store/etcdstore"
)

// replica is one lpsd node-facing service on the shared etcd cluster, in
// process: its own store client, snapshot, verifier (so its own replay
// cache) and TLS listener, on a fixed address across restarts.
type replica struct {
	idx       int
	addr      string
	cert      tls.Certificate
	roots     *x509.CertPool
	endpoints []string
	maxConns  int
	maxHands  int
	// autopilot, when positive, stores outcome reports and runs an
	// autopilot at this interval, as lpsd --autopilot-interval does.
	autopilot time.Duration

	mu    sync.Mutex
	snaps *lps.Snapshotter // nil while down
	down  []interval       // the last may be open (end zero)
	stop  func() (teardown func())
	// teardowns are killed instances still winding down.
	teardowns sync.WaitGroup
}

type interval struct{ start, end time.Time }

// start opens the store, loads the first snapshot and serves. ctx bounds
// the replica's life; kill ends it earlier.
func (r *replica) start(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := etcdstore.Open(octx, r.endpoints, etcdstore.Config{})
	cancel()
	if err != nil {
		return err
	}
	snaps := lps.NewSnapshotter(st, nil, nil)
	if err := snaps.Load(ctx); err != nil {
		st.Close()
		return err
	}
	v, err := attest.New(attest.Config{Roots: r.roots, DisableAIA: true})
	if err != nil {
		st.Close()
		return err
	}
	// No per-peer caps (-1): the simulated fleet all comes from loopback.
	scfg := lps.ServerConfig{Certificate: r.cert, MaxConnections: r.maxConns, MaxHandshakes: r.maxHands, MaxHandshakesPerPeer: -1, MaxConnectionsPerPeer: -1, Seats: st}
	if r.autopilot > 0 {
		scfg.Reports = st
	}
	srv, err := lps.NewServer(snaps, v, lps.NewMetrics(prometheus.NewRegistry()), scfg)
	if err != nil {
		st.Close()
		return err
	}
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		st.Close()
		return err
	}
	tl := &trackingListener{Listener: ln, conns: map[*trackedConn]struct{}{}}
	rctx, rcancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go snaps.Run(rctx)
	if r.autopilot > 0 {
		go autopilot.New(st, autopilot.Config{Interval: r.autopilot}).Run(rctx)
	}
	go func() {
		srv.Serve(rctx, tl)
		close(served)
	}()
	r.mu.Lock()
	r.addr = ln.Addr().String()
	r.snaps = snaps
	if n := len(r.down); n > 0 && r.down[n-1].end.IsZero() {
		r.down[n-1].end = time.Now()
	}
	r.stop = func() func() {
		tl.closeAll()
		rcancel()
		return func() {
			<-served
			st.Close()
		}
	}
	r.mu.Unlock()
	return nil
}

// kill stops the replica abruptly, as SIGKILL would: the listener and every
// connection close at once, calls in flight fail. The instance's goroutines
// and store client wind down in the background (grpc's graceful stop has
// nothing left to wait for, but takes its time on a loaded machine).
func (r *replica) kill() {
	r.mu.Lock()
	r.down = append(r.down, interval{start: time.Now()})
	r.snaps = nil
	stop := r.stop
	r.stop = nil
	r.mu.Unlock()
	if stop != nil {
		r.teardowns.Go(stop())
	}
}

// close stops the replica at the end of a run and waits for every instance
// to wind down.
func (r *replica) close() {
	r.mu.Lock()
	stop := r.stop
	r.stop = nil
	r.mu.Unlock()
	if stop != nil {
		stop()()
	}
	r.teardowns.Wait()
}

// current returns the replica's serving snapshot, nil while it is down.
func (r *replica) current() *lps.Snapshot {
	r.mu.Lock()
	s := r.snaps
	r.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Current()
}

// downDuring reports whether the replica was down at any moment of [a, b].
func (r *replica) downDuring(a, b time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.down {
		if !d.start.After(b) && (d.end.IsZero() || !d.end.Before(a)) {
			return true
		}
	}
	return false
}

// trackingListener remembers accepted connections so that kill can close
// them all.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *trackingListener) closeAll() {
	l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[*trackedConn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
