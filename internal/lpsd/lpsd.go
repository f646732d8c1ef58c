// Package lpsd assembles the live-patching service from its command
// line: the store, the snapshot of it that nodes are served from, the
// node-facing gRPC service, the admin API and dashboard, the metrics and
// readiness endpoints, and their lifecycles (SIGHUP reloads, the drain on
// shutdown). cmd/lpsd is Main; the fleet simulator runs several Servers in
// one process, each assembled by New from the same flags (cmd/lpsd's
// doc.go is the manual).
package lpsd

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"golang.org/x/net/netutil"

	"nodehotfix/internal/assess"
	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/autopilot"
	"nodehotfix/internal/capfile"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/history"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/imds/azureroots"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/lps/dashboard"
	"nodehotfix/internal/release"
	"nodehotfix/internal/retention"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/schedule"
	"nodehotfix/internal/store"
	"nodehotfix/internal/typo"
)

type options struct {
	listen, adminListen, httpListen string
	dashboard                       bool
	dashboardRefresh                time.Duration
	addrFile                        string
	debugListen                     string
	tlsCert, tlsKey, serverName     string
	adminCert, adminKey             string
	adminTokens, adminClientCA      string
	storeSpec                       string
	imdsRoots, imdsIntermediates    string
	sanDomains, aiaHosts            string
	noAIA                           bool
	allowedSubs                     string
	maxUses                         int
	region                          string
	deployEnv                       string
	releaseKeys                     string
	maxConns                        int
	maxHandshakes                   int
	maxHandshakesPerPeer            int
	maxConnsPerPeer                 int
	autopilotInterval               time.Duration
	advanceWindow                   autopilot.Window
	drainDelay                      time.Duration
	etcd                            etcdFlags
	logf                            logFlags
	retention                       retentionFlags
	policy                          policyFlags
	// version is the build's (Main's), for lpsd_build_info.
	version string
}

// Main is the lpsd command: it parses args (without the program name),
// serves until ctx is done, and returns the exit code (doc.go). version is
// the build's, for --version and lpsd_build_info.
func Main(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flagSet(&o, io.Discard)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "Usage of lpsd:")
			fs.PrintDefaults()
			return 2
		}
		fmt.Fprintf(stderr, "lpsd: %v\nRun 'lpsd -h' for usage.\n", parseError(fs, args, err))
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lpsd: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "lpsd %s (%s)\n", version, runtime.Version())
		return 0
	}
	o.version = version
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	applyMemoryLimit(systemCgroup, log)
	err := func() error {
		s, err := newServer(ctx, o, log)
		if err != nil {
			return err
		}
		defer s.Close()
		return s.Serve(ctx, Listeners{})
	}()
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "lpsd: %v\nRun 'lpsd -h' for usage.\n", err)
		return 2
	case err != nil:
		log.Error("lpsd stopped", "err", err)
		return 1
	}
	return 0
}

// flagSet registers lpsd's flags into o.
func flagSet(o *options, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("lpsd", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.listen, "listen", ":8443", "node-facing gRPC/TLS `address`")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:8444", "admin API gRPC/TLS `address`")
	fs.StringVar(&o.httpListen, "http-listen", "127.0.0.1:9090", "`address` of /metrics, /healthz and /readyz")
	fs.StringVar(&o.debugListen, "debug-listen", "", "loopback `address` of /debug/pprof (CPU and heap profiles); off when empty")
	fs.StringVar(&o.addrFile, "addr-file", "", "write the bound addresses as JSON {grpc,admin,http} to this `file`")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate `file` for the node-facing listener (required)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `file` for --tls-cert (required)")
	fs.StringVar(&o.serverName, "server-name", lps.DefaultServerName, "name nodes verify the certificate for")
	fs.StringVar(&o.adminCert, "admin-tls-cert", "", "PEM certificate `file` for the admin listener (default --tls-cert)")
	fs.StringVar(&o.adminKey, "admin-tls-key", "", "PEM key `file` for --admin-tls-cert (default --tls-key)")
	fs.StringVar(&o.adminTokens, "admin-token-file", "", "admin bearer tokens `file`, one [name:[role:]]token or name:role:token:expires per line")
	fs.StringVar(&o.adminClientCA, "admin-client-ca", "", "PEM CA `file` verifying admin client certificates (mTLS)")
	fs.StringVar(&o.storeSpec, "store", defaultStore, "state backend: bolt:PATH, etcd:HOST:PORT[,...] or mem:")
	fs.StringVar(&o.imdsRoots, "imds-roots", "", "PEM `file` of attested-document roots (default: the embedded public roots)")
	fs.StringVar(&o.imdsIntermediates, "imds-intermediates", "", "PEM `file` of intermediates to build chains with")
	fs.StringVar(&o.sanDomains, "imds-san-domain", "metadata.azure.com", "comma-separated metadata domains the signer's SAN must be under")
	fs.StringVar(&o.aiaHosts, "imds-aia-hosts", "www.microsoft.com", "comma-separated hosts intermediates may be fetched from")
	fs.BoolVar(&o.noAIA, "imds-no-aia", false, "never fetch intermediates; chains must build from --imds-intermediates")
	fs.StringVar(&o.allowedSubs, "allowed-subscriptions", "", "comma-separated subscription IDs allowed to attest (default: all)")
	fs.IntVar(&o.maxUses, "attest-max-uses", 0, "times one attested document is accepted while valid (0: the verifier default; 1: single use)")
	fs.StringVar(&o.region, "region", "", "this instance's region label, matched against rollout regions")
	fs.StringVar(&o.deployEnv, "deploy-env", "", "this instance's deploy-environment label (prod, staging), matched against rollout deploy environments")
	fs.StringVar(&o.releaseKeys, "release-keys", "", "release public keys `file`; when set, only releases signed by them can be published")
	fs.IntVar(&o.maxConns, "max-connections", 0, "cap on open node connections (0: the default, 4096)")
	fs.DurationVar(&o.autopilotInterval, "autopilot-interval", autopilot.DefaultInterval, "how often planned rollouts are judged on the nodes' reports and advanced or halted, and component configurations' timed plans stepped (0: never)")
	fs.Var(&o.advanceWindow, "advance-window", "when the autopilot may advance a healthy plan step: `\"DAYS HH:MM-HH:MM ZONE\"` (\"Mon-Fri 09:00-17:00 Europe/Dublin\"; a span crossing midnight ends the next day); halts and pauses are never held back (default: any time)")
	o.etcd.register(fs)
	o.logf.register(fs)
	o.retention.register(fs)
	o.policy.register(fs)
	fs.DurationVar(&o.drainDelay, "drain-delay", 5*time.Second, "on SIGTERM or SIGINT, how long /readyz answers 503 before the listeners close, so balancers stop sending new connections first")
	fs.BoolVar(&o.dashboard, "dashboard", true, "serve the operator dashboard on the admin listener (https://ADMIN-ADDRESS/)")
	fs.DurationVar(&o.dashboardRefresh, "dashboard-refresh", dashboard.DefaultRefresh, "how often the dashboard rebuilds its view (at least ten times as long as a rebuild takes)")
	fs.IntVar(&o.maxHandshakes, "max-handshakes", 0, "cap on concurrent node TLS handshakes; connections waiting over 2 s for a slot are closed (0: the default, 128 per CPU)")
	fs.IntVar(&o.maxHandshakesPerPeer, "max-handshakes-per-peer", 0, "cap on node TLS handshakes in flight from one peer (an IPv4 address, an IPv6 /64); more are closed at once (0: the default, 64; -1: none, behind a balancer or NAT that hides node addresses)")
	fs.IntVar(&o.maxConnsPerPeer, "max-connections-per-peer", 0, "cap on open node connections from one peer; more are closed at accept (0: the default, 1024; -1: none)")
	return fs
}

// parseError is err, fs's failure to parse args, with a suggestion when
// its cause is an unknown flag that looks like a typo of a known one.
func parseError(fs *flag.FlagSet, args []string, err error) error {
	name := unknownFlag(fs, args)
	if name == "" {
		return err
	}
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	if s := typo.Closest(name, known); s != "" {
		return fmt.Errorf("unknown flag --%s; did you mean --%s?", name, s)
	}
	return fmt.Errorf("unknown flag --%s", name)
}

// unknownFlag walks args as fs.Parse does and returns the name of the
// flag it stopped at for not being defined, or "" if it stopped at
// something else (a bad value). The flag package's error for an unknown
// flag is a bare string; this finds the name without parsing the message.
// It sets fs's values again, which is harmless: fs has failed to parse.
func unknownFlag(fs *flag.FlagSet, args []string) string {
	for len(args) > 0 {
		a := args[0]
		args = args[1:]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return ""
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "" || name[0] == '-' {
			return "" // bad syntax, not a name
		}
		f := fs.Lookup(name)
		if f == nil {
			return name
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && !hasValue {
			value, hasValue = "true", true
		}
		if !hasValue {
			if len(args) == 0 {
				return ""
			}
			value, args = args[0], args[1:]
		}
		if f.Value.Set(value) != nil {
			return ""
		}
	}
	return ""
}

// New assembles lpsd from its command line (args, without the program
// name) exactly as the command does, for a caller that runs it in its
// own process (the fleet simulator): the store is open; the snapshot
// loads and the listeners open when Serve runs. A command line lpsd cannot run
// with is an error that says so; --version and -h are not taken.
func New(ctx context.Context, version string, args []string, log *slog.Logger) (*Server, error) {
	var o options
	fs := flagSet(&o, io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, usageError{parseError(fs, args, err)}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.version = version
	return newServer(ctx, o, log)
}

// usageError is a flag combination lpsd cannot run with: exit 2.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// Server is lpsd assembled from its command line: the store, the serving
// snapshot, the node service, the admin API and dashboard, and the
// servers of its listeners. Serve runs it; Close releases the store.
type Server struct {
	o          options
	log        *slog.Logger
	hup        chan os.Signal
	st         store.Store
	snaps      *lps.Snapshotter
	metrics    *lps.Metrics
	reloads    *reloadMetrics
	node       *lps.Server
	auth       *admin.Auth
	adminCerts *lps.CertSource
	adminHTTP  *http.Server
	dash       *dashboard.Dashboard
	// checkpointer keeps the log's cosigned checkpoint; nil without
	// --log-key.
	checkpointer *lps.Checkpointer
	// id names this process among the replicas of a shared store.
	id string
	// retention prunes the stored history while the autopilot runs here;
	// nil when the flags prune nothing or the store cannot.
	retention *retention.Retention
	// evidence is the reports and served records the looks and admin
	// reads share their reads of.
	evidence *assess.Shared
}

// Listeners are listeners a caller opened for lpsd (a supervisor passing
// its socket, the fleet simulator); a nil one is opened on the command
// line's address. Serve owns them: it closes them on every path.
type Listeners struct {
	Node net.Listener
}

func newServer(ctx context.Context, o options, log *slog.Logger) (_ *Server, err error) {
	// SIGHUP reloads certificates and tokens (below); registered first, so
	// a SIGHUP during start-up is a reload, not the default exit.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer func() {
		if err != nil {
			signal.Stop(hup)
		}
	}()
	if o.tlsCert == "" || o.tlsKey == "" {
		return nil, usagef("--tls-cert and --tls-key are required")
	}
	if host, _, err := net.SplitHostPort(o.debugListen); o.debugListen != "" && (err != nil || !loopback(host)) {
		return nil, usagef("--debug-listen %q: profiles show lpsd's memory; keep the address on loopback (127.0.0.1:PORT)", o.debugListen)
	}
	if o.adminTokens == "" && o.adminClientCA == "" {
		return nil, usagef("set --admin-token-file or --admin-client-ca: the admin API is never unauthenticated")
	}
	if o.region != "" && !rollout.ValidRegion(o.region) {
		// Rollout region scopes take only labels of this form, so any other
		// label could never be scoped to.
		return nil, usagef("--region %q: want a region label (a letter, then letters and digits, at most %d, like eastus)", o.region, rollout.MaxRegionLength)
	}
	if o.deployEnv != "" && !rollout.ValidRegion(o.deployEnv) {
		return nil, usagef("--deploy-env %q: want a label (a letter, then letters and digits, at most %d, like prod)", o.deployEnv, rollout.MaxRegionLength)
	}
	retain, err := o.retention.config()
	if err != nil {
		return nil, err
	}
	policy, err := o.policy.policy()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	creds := loadCredentials(o, started, false, log)
	if err := creds.err(); err != nil {
		return nil, err
	}
	cert, adminCert, tokens := creds.node, creds.admin, creds.tokens
	verifier, err := newVerifier(o)
	if err != nil {
		return nil, err
	}
	var clientCAs *x509.CertPool
	if o.adminClientCA != "" {
		if clientCAs, err = loadPool(o.adminClientCA); err != nil {
			return nil, fmt.Errorf("--admin-client-ca: %w", err)
		}
	}
	var keys *release.KeySet
	if o.releaseKeys != "" {
		data, err := capfile.Read(o.releaseKeys, release.MaxKeySetSize)
		if err != nil {
			return nil, fmt.Errorf("--release-keys: %w", err)
		}
		ks, err := release.ParseKeySet(data)
		if err != nil {
			return nil, fmt.Errorf("--release-keys %s: %w", o.releaseKeys, err)
		}
		keys = &ks
	}

	if keys == nil {
		log.Warn("no --release-keys: publish accepts any well-formed envelope unverified (nodes with release keys still verify theirs)")
	}
	st, err := openStore(ctx, o.storeSpec, o.etcd, log)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()

	// A nil registry gets the Go runtime and process collectors too.
	metrics := lps.NewMetrics(nil)
	metrics.RegisterBuildInfo(o.version)
	reloads := newReloadMetrics(metrics.Register)
	retainMetrics := newRetentionMetrics(metrics.Register)
	snaps := lps.NewSnapshotter(st, log, metrics.StoreError)
	id := replicaID()
	nodeCfg := lps.ServerConfig{
		Certificate: cert, ServerName: o.serverName, Region: o.region, DeployEnv: o.deployEnv, ReplicaID: id, MaxConnections: o.maxConns, MaxHandshakes: o.maxHandshakes,
		MaxHandshakesPerPeer: o.maxHandshakesPerPeer, MaxConnectionsPerPeer: o.maxConnsPerPeer, Log: log,
		Reports: st, Seats: st, Served: st,
	}
	if b, ok := st.(store.Beats); ok {
		nodeCfg.Beats = b
	}
	node, err := lps.NewServer(snaps, verifier, metrics, nodeCfg)
	if err != nil {
		return nil, err
	}
	auth := admin.NewAuth(tokens, log)
	adminCerts := lps.NewCertSource(adminCert)
	// Admin RPC metrics, lpsd_admin_grpc_server_*: every call, refused
	// ones (Unauthenticated, PermissionDenied) included.
	adminMetrics := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("lpsd_admin")),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("lpsd_admin")),
	)
	metrics.Register(adminMetrics)
	adminSrv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lps.Recover(log.With("listener", "admin"), func() error { return status.Error(codes.Internal, "internal error") }),
			adminMetrics.UnaryServerInterceptor(), auth.Unary),
		grpc.ChainStreamInterceptor(adminMetrics.StreamServerInterceptor(), auth.Stream),
	)
	cp, err := o.logf.checkpointer(st, log, metrics.Register)
	if err != nil {
		return nil, err
	}
	var logs admin.LogKeeper // a nil *Checkpointer is not a nil interface
	if cp != nil {
		logs = cp
	}
	// The autopilot's looks and the admin reads (status, explain, the
	// dashboard, the nodes list) share their reads of the evidence.
	evidence := assess.NewShared(st)
	adminAPI := admin.New(admin.Config{
		Store: st, Evidence: evidence, Snapshots: snaps, Counts: metrics.Counts, Served: metrics.ServedByRelease, Trust: metrics.TrustByBase, Region: o.region, DeployEnv: o.deployEnv, ReplicaID: id, ReleaseKeys: keys, TransparencyLog: logs, Policy: policy, AdvanceWindow: o.advanceWindow, Log: log,
	})
	adminv1.RegisterAdminServiceServer(adminSrv, adminAPI)
	var dash *dashboard.Dashboard
	if o.dashboard {
		dash = dashboard.New(dashboard.Config{Admin: adminAPI, Auth: auth, Refresh: o.dashboardRefresh, Log: log.With("component", "dashboard")})
	}
	// The admin listener serves the gRPC admin API and the dashboard, one
	// TLS configuration and one set of callers for both.
	adminTLS := admin.TLSConfig(adminCerts, clientCAs, len(tokens) > 0)
	adminTLS.NextProtos = []string{"h2", "http/1.1"}
	adminHTTP := &http.Server{
		Handler:   adminHandler(adminSrv, dash),
		TLSConfig: adminTLS,
		// Bounds the TLS handshake and the headers too.
		ReadHeaderTimeout: 5 * time.Second,
		// Admin calls and forms are small: a slow sender is cut off.
		ReadTimeout: 30 * time.Second,
		IdleTimeout: time.Minute,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	o.logf.warnLogPolicy(ctx, keys, st, log)
	adminMetrics.InitializeMetrics(adminSrv)
	reloads.loaded(started, nil, false, map[string]tls.Certificate{"node": cert, "admin": adminCert})
	reloads.tokensInUse(tokens)
	var ret *retention.Retention
	if p, ok := st.(retention.Store); ok && o.retention.on() {
		retain.Log, retain.OnPrune = log.With("component", "retention"), retainMetrics.set
		ret = retention.New(p, retain)
	}
	return &Server{o: o, log: log, hup: hup, st: st, snaps: snaps, metrics: metrics, reloads: reloads, node: node, auth: auth, adminCerts: adminCerts, adminHTTP: adminHTTP, dash: dash, checkpointer: cp, id: id, retention: ret, evidence: evidence}, nil
}

// Snapshot is the snapshot lpsd serves from, nil before the first.
func (s *Server) Snapshot() *lps.Snapshot { return s.snaps.Current() }

// Close releases what New holds: the store and the SIGHUP registration.
// Serve must have returned.
func (s *Server) Close() error {
	signal.Stop(s.hup)
	return s.st.Close()
}

// Serve opens the listeners the command line names (ln's where given),
// serves until ctx is done, drains for --drain-delay and stops, and
// returns nil; or the first error that stopped a part of it.
func (s *Server) Serve(ctx context.Context, ln Listeners) error {
	o, log, node, hup := s.o, s.log, s.node, s.hup
	snaps, adminHTTP, dash := s.snaps, s.adminHTTP, s.dash
	httpMux := http.NewServeMux()
	httpMux.Handle("/", node.HTTPHandler())
	httpMux.Handle("/log/", logHandler(s.st))
	httpSrv := &http.Server{Handler: httpMux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}

	// Every listener opened (or handed in) is closed if Serve stops
	// before serving on it.
	var opened []net.Listener
	fail := func(err error) error {
		for _, l := range opened {
			l.Close()
		}
		return err
	}
	listen := func(addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			opened = append(opened, l)
		}
		return l, err
	}
	nodeLn := ln.Node
	var err error
	if nodeLn != nil {
		opened = append(opened, nodeLn)
	} else if nodeLn, err = listen(o.listen); err != nil {
		return fail(err)
	}
	adminLn, err := listen(o.adminListen)
	if err != nil {
		return fail(err)
	}
	// Operators are few: a flood of connections to the admin port waits in
	// the backlog instead of taking the CPUs the nodes' handshakes need.
	adminLn = netutil.LimitListener(adminLn, maxAdminConnections)
	httpLn, err := listen(o.httpListen)
	if err != nil {
		return fail(err)
	}
	addrs := map[string]string{"grpc": nodeLn.Addr().String(), "admin": adminLn.Addr().String(), "http": httpLn.Addr().String()}
	var debugLn net.Listener
	if o.debugListen != "" {
		if debugLn, err = listen(o.debugListen); err != nil {
			return fail(err)
		}
		addrs["debug"] = debugLn.Addr().String()
	}
	if o.addrFile != "" {
		data, _ := json.Marshal(addrs)
		if err := atomicfile.WriteFile(o.addrFile, append(data, '\n'), 0o644); err != nil {
			return fail(fmt.Errorf("--addr-file: %w", err))
		}
	}
	log.Info("lpsd serving", "grpc", nodeLn.Addr().String(), "admin", adminLn.Addr().String(), "http", httpLn.Addr().String(),
		"store", storeKind(o.storeSpec), "region", o.region, "deployEnv", o.deployEnv, "serverName", o.serverName, "rolloutPolicy", o.policy.p.String())

	// The servers run until the drain is over, not until the signal.
	signalled := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	goRun := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	goRun("snapshot", func() error { return keepSnapshot(ctx, snaps, log) })
	if s.checkpointer != nil {
		goRun("checkpointer", func() error { return s.checkpointer.Run(ctx) })
	}
	goRun("reload", func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				s.reload(time.Now())
			}
		}
	})
	goRun("autopilot", func() error { return s.runAutopilot(ctx, o.autopilotInterval, log.With("component", "autopilot")) })
	if o.autopilotInterval > 0 {
		// Timed plans of component configurations step on the same
		// cadence; nothing judges them.
		sched := schedule.New(s.st, schedule.Config{Interval: o.autopilotInterval, Log: log.With("component", "schedule")})
		goRun("schedule", func() error { return sched.Run(ctx) })
	}
	// /metrics and /readyz outlive the node listener, so what its drain
	// counts (sheds, closes, the last reports' writes) can still be read.
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHTTP()
	goRun("node listener", func() error {
		defer stopHTTP()
		return node.Serve(ctx, nodeLn)
	})
	// Admin calls in flight get 10 s to finish after the drain; the
	// metrics listener 5 s; profiles none.
	goRun("admin listener", func() error { return serveHTTP(ctx, adminHTTP, adminLn, 10*time.Second) })
	if dash != nil {
		goRun("dashboard", func() error { return dash.Run(ctx) })
	}
	goRun("http listener", func() error { return serveHTTP(httpCtx, httpSrv, httpLn, 5*time.Second) })
	if debugLn != nil {
		log.Info("lpsd debug listener (pprof)", "addr", debugLn.Addr().String())
		goRun("debug listener", func() error {
			return serveHTTP(ctx, &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 5 * time.Second}, debugLn, 0)
		})
	}

	var runErr error
	select {
	case <-signalled.Done():
		node.Drain()
		log.Info("lpsd draining: /readyz answers 503 before the listeners close", "delay", o.drainDelay)
		select {
		case <-time.After(o.drainDelay):
		case runErr = <-errc:
		}
		log.Info("lpsd shutting down")
	case runErr = <-errc:
	}
	cancel()
	wg.Wait()
	return runErr
}

// reload re-reads the certificates and admin tokens on SIGHUP, as at
// start (loadCredentials), and swaps in each that loaded: new connections
// get the new certificates, calls check the new tokens, and nothing open is
// dropped. One that fails to load (an expired certificate, a token file
// caught mid-write) keeps its current value, is logged and counted in
// lpsd_reload_failures_total; so is what changed.
func (s *Server) reload(now time.Time) {
	o := s.o
	c := loadCredentials(o, now, true, s.log)
	var changed, failed, failedNames []string
	fail := func(name string, err error) {
		failedNames = append(failedNames, name)
		failed = append(failed, err.Error())
	}
	inUse := make(map[string]tls.Certificate)
	nodeErr := c.failed[credNode]
	if nodeErr == nil {
		if err := s.node.SetCertificate(c.node); err != nil {
			nodeErr = fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	if nodeErr != nil {
		fail(credNode, nodeErr)
	} else {
		inUse["node"] = c.node
		changed = append(changed, "node certificate "+certSummary(c.node))
	}
	adminErr := c.failed[credAdmin]
	if o.adminCert == "" && o.adminKey == "" {
		// The admin listener presents the node certificate: it goes with it.
		adminErr = nodeErr
	}
	if adminErr != nil {
		fail(credAdmin, adminErr)
	} else {
		s.adminCerts.Set(c.admin)
		inUse["admin"] = c.admin
		changed = append(changed, "admin certificate "+certSummary(c.admin))
	}
	if o.adminTokens != "" {
		if err := c.failed[credTokens]; err != nil {
			fail(credTokens, err)
		} else {
			s.auth.SetTokens(c.tokens)
			s.reloads.tokensInUse(c.tokens)
			names := make([]string, len(c.tokens))
			for i, t := range c.tokens {
				names[i] = t.Actor()
			}
			changed = append(changed, fmt.Sprintf("admin tokens %v", names))
		}
	}
	s.reloads.loaded(now, failedNames, true, inUse)
	if len(failed) > 0 {
		s.log.Error("SIGHUP reload: kept the current values of what failed to load", "failed", failed, "reloaded", changed)
		return
	}
	s.log.Info("SIGHUP reload", "reloaded", changed)
}

// certSummary names a certificate loadCertificate loaded for the log:
// subject, serial, expiry.
func certSummary(c tls.Certificate) string {
	leaf := c.Leaf
	return fmt.Sprintf("%s serial %s not after %s", leaf.Subject.CommonName, leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))
}

// keepSnapshot loads the first snapshot, retrying until the store answers
// (readyz stays false meanwhile), then keeps it fresh.
func keepSnapshot(ctx context.Context, snaps *lps.Snapshotter, log *slog.Logger) error {
	for {
		err := snaps.Load(ctx)
		if err == nil {
			break
		}
		log.Warn("initial snapshot load failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	return snaps.Run(ctx)
}

// maxPEMBundle caps a certificate bundle lpsd reads (--imds-roots,
// --imds-intermediates, the admin client and etcd CAs): a few hundred
// certificates, which no deployment comes near, while a wrong path (a
// log, a device) is refused before it is read whole.
const maxPEMBundle = 1 << 20

func newVerifier(o options) (*attest.Verifier, error) {
	cfg := attest.Config{
		Roots:                azureroots.Pool(),
		SANDomains:           splitList(o.sanDomains),
		AIAHosts:             splitList(o.aiaHosts),
		DisableAIA:           o.noAIA,
		AllowedSubscriptions: splitList(o.allowedSubs),
		MaxUses:              o.maxUses,
	}
	if o.imdsRoots != "" {
		data, err := capfile.Read(o.imdsRoots, maxPEMBundle)
		if err != nil {
			return nil, fmt.Errorf("--imds-roots: %w", err)
		}
		if cfg.Roots, err = attest.RootsFromPEM(data); err != nil {
			return nil, fmt.Errorf("--imds-roots %s: %w", o.imdsRoots, err)
		}
	}
	if o.imdsIntermediates != "" {
		data, err := capfile.Read(o.imdsIntermediates, maxPEMBundle)
		if err != nil {
			return nil, fmt.Errorf("--imds-intermediates: %w", err)
		}
		if cfg.Intermediates, err = attest.ParseCertificatesPEM(data); err != nil {
			return nil, fmt.Errorf("--imds-intermediates %s: %w", o.imdsIntermediates, err)
		}
	}
	v, err := attest.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("attestation verifier: %w", err)
	}
	return v, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	data, err := capfile.Read(path, maxPEMBundle)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificates", path)
	}
	return p, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func storeKind(spec string) string {
	kind, _, _ := strings.Cut(spec, ":")
	return kind
}

// adminHandler routes the admin listener's requests: gRPC to the admin
// API, anything else to the dashboard (or 404 without one).
func adminHandler(api *grpc.Server, dash http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			api.ServeHTTP(w, r)
			return
		}
		if dash == nil {
			http.Error(w, "the dashboard is off (lpsd --dashboard=false); use lpsctl", http.StatusNotFound)
			return
		}
		dash.ServeHTTP(w, r)
	})
}

// debugHandler serves net/http/pprof (on its own mux, not the default).
func debugHandler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}

// maxAdminConnections caps the admin listener's open connections (lpsctl,
// the dashboard's browsers).
const maxAdminConnections = 256

// serveHTTP serves srv on ln (TLS when srv has a TLSConfig) until ctx is
// done, then shuts it down, giving requests in flight grace before closing
// what is left, and returns nil; or the error that stopped it first. It is
// how each of lpsd's HTTP listeners starts and stops.
func serveHTTP(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	served := make(chan error, 1)
	go func() {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		served <- err
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runAutopilot runs the autopilot (with interval 0, none) until ctx
// ends. On a store replicas share (store.Joiner) it joins them, labelled
// with this replica's place, so that only the elected leader decides and
// every replica's labels are seen; it joins again whenever the membership
// is lost (a partition past the lease). Without an autopilot it still
// joins and beats, never campaigning. A store this process holds alone
// needs no election.
func (s *Server) runAutopilot(ctx context.Context, interval time.Duration, log *slog.Logger) error {
	onAssess, onLeader := s.assessed(log)
	cfg := autopilot.Config{Interval: interval, Log: log, Evidence: s.evidence, OnAssess: onAssess, OnLeader: onLeader, OnSkew: s.metrics.SetClockSkew, OnFreeze: s.metrics.SetFrozen, Places: s.places, AdvanceWindow: s.o.advanceWindow}
	if s.retention != nil {
		cfg.Lead = s.retention.Run
	}
	j, shared := s.st.(store.Joiner)
	if !shared {
		if interval == 0 {
			return nil
		}
		s.metrics.SetLeader(true)
		return autopilot.New(s.st, cfg).Run(ctx)
	}
	for ctx.Err() == nil {
		rep, err := j.Join(ctx, s.id, s.place())
		if err != nil {
			log.Warn("autopilot cannot join the replicas; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(autopilot.BeatInterval):
			}
			continue
		}
		if interval == 0 {
			autopilot.Beat(ctx, rep, time.Now, log)
		} else {
			cfg.Replica = rep
			err = autopilot.New(s.st, cfg).Run(ctx)
		}
		rep.Close()
		if ctx.Err() == nil {
			log.Warn("left the replicas; joining again", "err", err)
		}
	}
	return nil
}

// assessed returns the autopilot's OnAssess and OnLeader: every look's
// assessment is published as metrics and, on a store with history
// (store.History), recorded as the releases' history; a replica that
// becomes the leader reads the last points again, which another leader
// may have written meanwhile.
func (s *Server) assessed(log *slog.Logger) (func(context.Context, assess.Fleet), func(bool)) {
	h, ok := s.st.(store.History)
	if !ok {
		return func(_ context.Context, f assess.Fleet) { s.metrics.SetAssess(f) }, s.metrics.SetLeader
	}
	rec := history.NewRecorder(h, log)
	onAssess := func(ctx context.Context, f assess.Fleet) {
		s.metrics.SetAssess(f)
		if err := rec.Record(ctx, f); err != nil && ctx.Err() == nil {
			log.Warn("recording the releases' history failed; the next look writes what changed", "err", err)
		}
	}
	onLeader := func(leads bool) {
		if leads {
			rec.Forget()
		}
		s.metrics.SetLeader(leads)
	}
	return onAssess, onLeader
}

// replicaID names this process among the replicas: its host name and pid.
func replicaID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", cmp.Or(strings.ReplaceAll(host, "/", "_"), "lpsd"), os.Getpid())
}

// place is where this replica serves nodes from: its labels.
func (s *Server) place() rollout.Place {
	return rollout.Place{Region: s.o.region, DeployEnv: s.o.deployEnv}
}

// places returns where the fleet's nodes are served from: this replica's
// place and every live replica's the store lists, each once.
func (s *Server) places(ctx context.Context) []rollout.Place {
	out := []rollout.Place{s.place()}
	rl, ok := s.st.(store.ReplicaLister)
	if !ok {
		return out
	}
	hs, err := rl.Replicas(ctx)
	if err != nil {
		s.log.Warn("list replicas: judging with this replica's labels only", "err", err)
		return out
	}
	for _, h := range hs {
		if !slices.Contains(out, h.Place) {
			out = append(out, h.Place)
		}
	}
	return out
}
