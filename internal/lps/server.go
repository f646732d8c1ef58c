package lps

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/store"
)

// DefaultMaxConnections is the default cap on open node connections.
const DefaultMaxConnections = 4096

// Limits of the node-facing server. A node dials, makes one small call and
// closes; anything long-lived or large is not a node.
const (
	// maxRecvMsgSize caps a request message: it holds a component name.
	maxRecvMsgSize = 16 << 10
	// maxHeaderListSize caps a call's metadata. It fits a token somewhat
	// over attest.MaxTokenSize, so an oversized token reaches the verifier
	// and is rejected and counted as too-large rather than reset by the
	// transport; grpc-go's default is 16 MiB.
	maxHeaderListSize = 64 << 10
	// maxConcurrentStreams per connection: a node uses one.
	maxConcurrentStreams = 16
	// handshakeTimeout bounds the TLS and HTTP/2 handshake (grpc-go's
	// default is 120 s), so stalled connections free their slot quickly;
	// nodes give up after 3 s.
	handshakeTimeout = 5 * time.Second
	// maxConnectionIdle closes connections without a call for this long:
	// nodes close theirs after one call, so only an idle hoarder (holding
	// the connection cap) is cut off.
	maxConnectionIdle = 5 * time.Second
	// maxConnectionAge, with its grace for calls in flight, bounds any
	// connection: a node's one call takes at most its 3 s budget, so a
	// connection older than this is a hoarder (calls opened and never
	// sent, which the idle limit does not see). It also recycles
	// connections across replicas behind an L4 balancer.
	maxConnectionAge      = 30 * time.Second
	maxConnectionAgeGrace = 5 * time.Second
	// keepaliveTime and keepaliveTimeout probe a connection with a call in
	// flight whose peer went silent (a VM that vanished).
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	// minClientPingInterval: clients pinging more often, or without a call
	// in flight, are disconnected. The reference client sends no pings.
	minClientPingInterval = time.Minute
	// shutdownTimeout bounds the graceful stop; calls still running then
	// are cancelled.
	shutdownTimeout = 10 * time.Second
	// maxHealthWatches caps the health Watch streams open at once. A
	// replica has a few watchers (a balancer's checkers, a sidecar); a
	// watch needs no attested document and keeps its connection for up to
	// maxConnectionAge where an idle one is closed after 5 s, so an
	// anonymous client must not hold many.
	maxHealthWatches = 32
	// maxHealthWatchesPerPeer keeps one address from taking every watch
	// (a balancer's checkers come from a few); off with the per-peer
	// connection cap, as behind a balancer that hides node addresses.
	maxHealthWatchesPerPeer = 4
	// healthWatchPoll is how often a watch looks for the first snapshot;
	// a drain is sent at once.
	healthWatchPoll = time.Second
)

// ServerConfig configures NewServer. Only Certificate is required.
type ServerConfig struct {
	// Certificate is presented to every node, whatever SNI it sends (nodes
	// send the API server's name). Required; its leaf must be valid for
	// ServerName.
	Certificate tls.Certificate
	// ServerName is the name nodes verify the certificate for.
	// "": DefaultServerName.
	ServerName string
	// Region is this instance's region label, matched against rollout
	// regions. "": no label, so only releases without a region scope apply.
	Region string
	// DeployEnv is this instance's deploy-environment label, matched
	// against rollout deploy environments as Region is against regions.
	DeployEnv string
	// ReplicaID names this instance among the replicas of a shared store,
	// in the served records it writes. "": none.
	ReplicaID string
	// MaxConnections caps open connections, handshaking ones included;
	// further connections wait in the listen backlog.
	// 0: DefaultMaxConnections.
	MaxConnections int
	// MaxHandshakes caps concurrent TLS handshakes; a connection that finds
	// no free slot within 2 s is closed (lpsd_connections_shed_total), so
	// the node fails open at once. 0: DefaultMaxHandshakes().
	MaxHandshakes int
	// MaxHandshakesPerPeer caps the handshakes in flight from one peer
	// (an IPv4 address, an IPv6 /64); further connections from it are
	// closed at once. 0: DefaultHandshakesPerPeer; -1: no cap (behind a
	// balancer or NAT that hides the nodes' addresses).
	MaxHandshakesPerPeer int
	// MaxConnectionsPerPeer caps one peer's open connections; further
	// ones are closed at accept. 0: DefaultConnectionsPerPeer; -1: no cap.
	MaxConnectionsPerPeer int
	// Log receives rejections (with reasons), panics and, at debug level,
	// every answer. nil: discard.
	Log *slog.Logger
	// Reports stores nodes' outcome reports (the store's PutReports); nil
	// serves no ReportService, so nodes' reports fail (open) Unimplemented.
	Reports reportWriter
	// Seats keeps releases' canary seats (the store's TakeSeat and Seats);
	// nil hands out none, so a release at a canary step reaches no node.
	Seats seatStore
	// Served records which boot of a reporting node was served which
	// release (the store's PutServed), so a node that never reports counts
	// as silent; nil records nothing, and such nodes go unseen.
	Served servedWriter
	// Beats marks, every beatInterval while Serve runs, that this replica
	// is up (the store's PutBeat), so silence is counted in lpsd's uptime
	// (internal/tally); nil marks nothing, and silence is wall-clock time.
	Beats beatWriter
}

// beatWriter is the store method marking a replica up.
type beatWriter interface {
	PutBeat(ctx context.Context, t time.Time) error
}

// beatInterval is how often a serving replica marks itself up: three
// times a minute, so a minute it was up for is marked even if one write
// fails or is late.
const beatInterval = 20 * time.Second

// Server is the node-facing gRPC server: the LivePatchingService behind
// panic recovery and attested-document authentication, over TLS that
// selects h2 for the ALPN list nodes offer ([aks-live-patching h2]), plus
// an HTTP handler for metrics and probes.
type Server struct {
	grpc     *grpc.Server
	snaps    snapshots
	m        *Metrics
	maxConns int
	perPeer  *peerCount
	draining atomic.Bool
	// drained is closed when draining is set, waking health watches.
	drained   chan struct{}
	drainOnce sync.Once
	// watches holds a token per health Watch stream open, watchPeers
	// counts them per address.
	watches    chan struct{}
	watchPeers *peerCount
	reports    *batcher[store.Report] // nil without a report store
	served     *batcher[store.Served] // nil without a served store
	beats      beatWriter             // nil: no beats
	log        *slog.Logger
	// certs is the certificate nodes are served, which SetCertificate
	// replaces; serverName is what it must cover.
	certs      *CertSource
	serverName string
}

// SetCertificate replaces the certificate presented to nodes (a reload);
// connections keep the one they were made with. It refuses one that does
// not cover the server name, keeping the current one.
func (s *Server) SetCertificate(c tls.Certificate) error {
	if err := checkCertificate(c, s.serverName); err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	s.certs.Set(c)
	return nil
}

// NewServer returns a Server answering from snaps (a *Snapshotter),
// admitting callers v (an *attest.Verifier) accepts, and counting into m.
// It registers snapshot gauges on m's registry, so it may be called once
// per Metrics. It fails if the certificate does not cover the server name.
func NewServer(snaps snapshots, v verifier, m *Metrics, cfg ServerConfig) (*Server, error) {
	if cfg.ServerName == "" {
		cfg.ServerName = DefaultServerName
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxConnections < 0 {
		return nil, fmt.Errorf("new live-patching server: negative MaxConnections %d", cfg.MaxConnections)
	}
	if cfg.MaxHandshakes == 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes()
	}
	if cfg.MaxHandshakesPerPeer == 0 {
		cfg.MaxHandshakesPerPeer = DefaultHandshakesPerPeer
	}
	if cfg.MaxConnectionsPerPeer == 0 {
		cfg.MaxConnectionsPerPeer = DefaultConnectionsPerPeer
	}
	if cfg.MaxHandshakes < 0 || cfg.MaxHandshakesPerPeer < noPeerLimit || cfg.MaxConnectionsPerPeer < noPeerLimit {
		return nil, fmt.Errorf("new live-patching server: negative limit (handshakes %d, per peer %d, connections per peer %d)", cfg.MaxHandshakes, cfg.MaxHandshakesPerPeer, cfg.MaxConnectionsPerPeer)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := checkCertificate(cfg.Certificate, cfg.ServerName); err != nil {
		return nil, fmt.Errorf("new live-patching server: %w", err)
	}
	certs := NewCertSource(cfg.Certificate)
	tlsCfg := &tls.Config{
		GetCertificate: certs.Get,
		MinVersion:     tls.VersionTLS12,
		// gRPC needs h2. A client offering only other protocols fails the
		// handshake; the reference offers h2 second, after the routing value.
		NextProtos: []string{"h2"},
	}
	gs := grpc.NewServer(
		grpc.Creds(newGatedCreds(credentials.NewTLS(tlsCfg), cfg.MaxHandshakes, cfg.MaxHandshakesPerPeer, m)),
		grpc.ChainUnaryInterceptor(recoverPanics(m, cfg.Log), authenticate(v, m, cfg.Log)),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     maxConnectionIdle,
			MaxConnectionAge:      maxConnectionAge,
			MaxConnectionAgeGrace: maxConnectionAgeGrace,
			Time:                  keepaliveTime,
			Timeout:               keepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minClientPingInterval}),
	)
	var seats *Seats
	if cfg.Seats != nil {
		seats = NewSeats(cfg.Seats, m.seatResult)
	}
	svc := NewService(snaps, seats, m, cfg.Region, cfg.Log)
	var served *batcher[store.Served]
	if cfg.Served != nil {
		served = newServedBatcher(cfg.Served)
		svc.served = served
	}
	svc.SetDeployEnv(cfg.DeployEnv)
	svc.replica = cfg.ReplicaID
	lpsv1.RegisterLivePatchingServiceServer(gs, svc)
	var batch *batcher[store.Report]
	if cfg.Reports != nil {
		batch = newReportBatcher(cfg.Reports)
		nodev1.RegisterReportServiceServer(gs, &reportService{
			snaps: snaps, seats: seats, region: cfg.Region, m: m, log: cfg.Log, batch: batch, boots: newBootLimit(), now: time.Now, replica: cfg.ReplicaID,
		})
	}
	m.registerSnapshots(snaps, time.Now)
	srv := &Server{grpc: gs, snaps: snaps, m: m, maxConns: cfg.MaxConnections, perPeer: newPeerCount(cfg.MaxConnectionsPerPeer), reports: batch, served: served, beats: cfg.Beats, log: cfg.Log, certs: certs, serverName: cfg.ServerName,
		drained: make(chan struct{}), watches: make(chan struct{}, maxHealthWatches), watchPeers: newPeerCount(maxHealthWatchesPerPeer)}
	if cfg.MaxConnectionsPerPeer == noPeerLimit {
		srv.watchPeers = newPeerCount(noPeerLimit)
	}
	healthpb.RegisterHealthServer(gs, health{srv})
	return srv, nil
}

// checkCertificate fails unless c has a leaf valid for name.
func checkCertificate(c tls.Certificate, name string) error {
	if len(c.Certificate) == 0 || c.PrivateKey == nil {
		return errors.New("no certificate or key")
	}
	leaf := c.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return fmt.Errorf("parse certificate: %w", err)
		}
	}
	if err := leaf.VerifyHostname(name); err != nil {
		return fmt.Errorf("certificate is not for the server name: %w", err)
	}
	return nil
}

// Serve accepts node connections on ln (plain TCP: Server does the TLS)
// until ctx is done, then stops gracefully, waiting up to 10 s for calls in
// flight before cancelling them, and returns nil. It returns an error if
// accepting fails first. Call it once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = &perPeerListener{Listener: netutil.LimitListener(ln, s.maxConns), peers: s.perPeer, m: s.m}
	// The batchers outlive the listener: they write what is pending once
	// the calls that queued it have drained.
	for _, run := range []func(context.Context){runner(s.reports), runner(s.served)} {
		if run == nil {
			continue
		}
		batchCtx, stopBatch := context.WithCancel(context.WithoutCancel(ctx))
		batchDone := make(chan struct{})
		go func() { run(batchCtx); close(batchDone) }()
		defer func() { stopBatch(); <-batchDone }()
	}
	if s.beats != nil {
		beatCtx, stopBeats := context.WithCancel(ctx)
		beatDone := make(chan struct{})
		go func() { s.beat(beatCtx); close(beatDone) }()
		defer func() { stopBeats(); <-beatDone }()
	}
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve live-patching: %w", err)
	case <-ctx.Done():
	}
	// Draining first ends the health watches, which GracefulStop would
	// otherwise wait for.
	s.Drain()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(shutdownTimeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.grpc.Stop()
		<-stopped
	}
	<-served
	return nil
}

// beat marks this replica up now and every beatInterval until ctx ends. A
// failed mark is logged: a minute left unmarked only counts as lpsd's
// outage, stretching silence, never shortening it.
func (s *Server) beat(ctx context.Context) {
	t := time.NewTicker(beatInterval)
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, beatInterval)
		if err := s.beats.PutBeat(bctx, time.Now()); err != nil && ctx.Err() == nil {
			s.log.Warn("mark this replica up", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runner is b's Run, or nil for no batcher.
func runner[T any](b *batcher[T]) func(context.Context) {
	if b == nil {
		return nil
	}
	return b.Run
}

// health is the gRPC health service (grpc.health.v1) for probes and
// balancers that speak it: SERVING exactly when /readyz answers 200, for
// the whole server ("") and for the live-patching service by name.
type health struct{ s *Server }

// Check implements healthpb.HealthServer.
func (h health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !knownHealthService(req.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: h.status()}, nil
}

func knownHealthService(name string) bool {
	return name == "" || name == lpsv1.LivePatchingService_ServiceDesc.ServiceName
}

func (h health) status() healthpb.HealthCheckResponse_ServingStatus {
	if h.s.draining.Load() || h.s.snaps.Current() == nil {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// List implements healthpb.HealthServer.
func (h health) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	resp, _ := h.Check(ctx, &healthpb.HealthCheckRequest{})
	return &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{
		"": resp, lpsv1.LivePatchingService_ServiceDesc.ServiceName: resp,
	}}, nil
}

// Watch implements healthpb.HealthServer: it sends the status Check
// would answer, then each change, as the health protocol asks (an unknown
// service gets SERVICE_UNKNOWN and the stream stays open). A drain sends
// NOT_SERVING and ends the stream, so the graceful stop does not wait for
// it; a watcher then finds the replica gone or, reconnecting, draining.
// At most maxHealthWatches are open at once: more are ResourceExhausted.
func (h health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	select {
	case h.s.watches <- struct{}{}:
		defer func() { <-h.s.watches }()
	default:
		return status.Errorf(codes.ResourceExhausted, "%d health watches are open, the most this server keeps; use Check", maxHealthWatches)
	}
	var from string
	if p, ok := peer.FromContext(stream.Context()); ok {
		from = peerOfAddr(p.Addr)
	}
	if !h.s.watchPeers.add(from) {
		return status.Errorf(codes.ResourceExhausted, "this address holds %d health watches, the most one may; use Check", maxHealthWatchesPerPeer)
	}
	defer h.s.watchPeers.done(from)
	known := knownHealthService(req.GetService())
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	tick := time.NewTicker(healthWatchPoll)
	defer tick.Stop()
	for {
		// One reading of the drain per pass: a drain that lands after the
		// status was taken must not end the stream on SERVING.
		draining := h.s.draining.Load()
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		switch {
		case known && draining:
			st = healthpb.HealthCheckResponse_NOT_SERVING
		case known:
			st = h.status()
		}
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		if draining {
			return nil
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-h.s.drained:
		case <-tick.C:
		}
	}
}

// Drain turns /readyz to 503 ahead of a shutdown, so balancers stop
// sending new connections while the listeners still answer.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		s.draining.Store(true)
		close(s.drained)
	})
}

// HTTPHandler serves, for GET:
//
//   - /metrics: the Prometheus registry of the Metrics.
//   - /healthz: 200 while the process runs.
//   - /readyz: 200 once a snapshot is serving and Serve is not shutting
//     down, else 503, so a balancer sends nodes elsewhere.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.draining.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case s.snaps.Current() == nil:
			http.Error(w, "no snapshot loaded", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	return mux
}
