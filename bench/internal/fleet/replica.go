package fleet

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"nodehotfix/internal/lps"
	"nodehotfix/internal/lpsd"
	"nodehotfix/test/harness"
)

// replica is one lpsd on the shared etcd cluster, in process but
// assembled by internal/lpsd from the flags the command takes, as cmd/lpsd
// runs it: its own store client, snapshot, verifier (so its own replay
// cache), autopilot, admin API and listeners, on a fixed node address
// across restarts. Its node listener is the simulator's, so that kill can
// drop every connection at once.
type replica struct {
	idx  int
	addr string
	// flags are lpsd's command line but for --listen.
	flags []string
	// log receives lpsd's log.
	log *slog.Logger

	mu     sync.Mutex
	server *lpsd.Server // nil while down
	down   []interval   // the last may be open (end zero)
	stop   func() (teardown func())
	// teardowns are killed instances still winding down.
	teardowns sync.WaitGroup
}

type interval struct{ start, end time.Time }

// replicaFlags is the command line of every replica: the cluster's store,
// TLS and admin token, the simulated fleet's document roots, and limits.
func replicaFlags(dir string, tlsFiles harness.TLSFiles, imdsRoots string, endpoints []string, cfg Config) ([]string, error) {
	tokens := filepath.Join(dir, "admin.tokens")
	if err := os.WriteFile(tokens, []byte("fleetsim:"+rand.Text()+"\n"), 0o600); err != nil {
		return nil, err
	}
	autopilot := time.Duration(0)
	if cfg.Loop != nil {
		autopilot = cfg.Loop.AutopilotInterval
	}
	return []string{
		"--store", "etcd:" + strings.Join(endpoints, ","),
		"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile,
		"--admin-token-file", tokens,
		"--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--imds-roots", imdsRoots, "--imds-no-aia",
		"--max-connections", strconv.Itoa(cfg.MaxConnections),
		"--max-handshakes", strconv.Itoa(cfg.handshakes()),
		// The simulated fleet all comes from loopback.
		"--max-handshakes-per-peer", "-1", "--max-connections-per-peer", "-1",
		"--autopilot-interval", autopilot.String(),
		"--dashboard=false",
		"--drain-delay", "0s",
	}, nil
}

// start assembles the replica (internal/lpsd.New), which opens its store,
// and serves; ctx bounds the replica's life, kill ends it earlier.
func (r *replica) start(ctx context.Context) error {
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	srv, err := lpsd.New(ctx, "fleetsim", append([]string{"--listen", addr}, r.flags...), r.log.With("replica", r.idx))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		return err
	}
	tl := &trackingListener{Listener: ln, conns: map[*trackedConn]struct{}{}}
	rctx, rcancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(rctx, lpsd.Listeners{Node: tl}) }()
	// Serving once the first snapshot is: lpsd's /readyz condition.
	for srv.Snapshot() == nil {
		select {
		case err := <-served:
			rcancel()
			srv.Close()
			if err == nil {
				err = errors.New("lpsd stopped before its first snapshot")
			}
			return err
		case <-ctx.Done():
			rcancel()
			<-served
			srv.Close()
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	r.mu.Lock()
	r.addr = ln.Addr().String()
	r.server = srv
	if n := len(r.down); n > 0 && r.down[n-1].end.IsZero() {
		r.down[n-1].end = time.Now()
	}
	r.stop = func() func() {
		tl.closeAll()
		rcancel()
		return func() {
			if err := <-served; err != nil {
				r.log.Info("killed replica's Serve returned", "replica", r.idx, "err", err)
			}
			srv.Close()
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
	r.server = nil
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
	s := r.server
	r.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Snapshot()
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
