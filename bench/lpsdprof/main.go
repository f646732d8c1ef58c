// Command lpsdprof is lpsd's node-facing server wired as cmd/lpsd wires it
// (attest.New with the given roots, a snapshot of an in-memory store,
// lps.NewServer, a JSON logger) plus net/http/pprof, so that bench/loadgen
// can profile the request path; lpsd itself serves no pprof. The admin API
// is left out: it is idle during a load test.
//
//	lpsdprof -tls-cert F -tls-key F -imds-roots F -envelope F -listen ADDR -addr-file F -pprof-listen ADDR
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lpsdprof:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context) error {
	certFile := flag.String("tls-cert", "", "PEM certificate file")
	keyFile := flag.String("tls-key", "", "PEM key file")
	rootsFile := flag.String("imds-roots", "", "attested-document roots PEM file")
	envFile := flag.String("envelope", "", "signed release envelope to serve, rolled out to 100%")
	listen := flag.String("listen", "127.0.0.1:0", "node-facing address")
	addrFile := flag.String("addr-file", "", "write the bound node-facing address to this file")
	pprofListen := flag.String("pprof-listen", "127.0.0.1:0", "address of /debug/pprof")
	flag.Parse()

	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	pemData, err := os.ReadFile(*rootsFile)
	if err != nil {
		return err
	}
	roots, err := attest.RootsFromPEM(pemData)
	if err != nil {
		return err
	}
	v, err := attest.New(attest.Config{Roots: roots, SANDomains: []string{"metadata.azure.com"}, AIAHosts: []string{"www.microsoft.com"}, DisableAIA: true})
	if err != nil {
		return err
	}
	env, err := os.ReadFile(*envFile)
	if err != nil {
		return err
	}
	rel, err := release.Inspect(env)
	if err != nil {
		return err
	}
	// Compacted, as the admin API stores it.
	var compact bytes.Buffer
	if err := json.Compact(&compact, env); err != nil {
		return err
	}
	st := memstore.New()
	now := time.Now()
	if _, err := st.PutRelease(ctx, rollout.Release{
		Version: rel.Version, Base: rel.Base, Envelope: compact.Bytes(),
		Rollout: rollout.Rollout{State: rollout.Rolling, Percent: 100}, PublishedAt: now, UpdatedAt: now,
	}, 0, store.AuditEntry{Time: now, Actor: "lpsdprof", Action: "publish", Target: rel.Version}); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	metrics := lps.NewMetrics(prometheus.NewRegistry())
	snaps := lps.NewSnapshotter(st, log, metrics.StoreError)
	if err := snaps.Load(ctx); err != nil {
		return err
	}
	srv, err := lps.NewServer(snaps, v, metrics, lps.ServerConfig{Certificate: cert, Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	pln, err := net.Listen("tcp", *pprofListen)
	if err != nil {
		return err
	}
	go (&http.Server{ReadHeaderTimeout: 5 * time.Second}).Serve(pln) // DefaultServeMux: pprof
	if *addrFile != "" {
		data, _ := json.Marshal(map[string]string{"grpc": ln.Addr().String(), "pprof": pln.Addr().String()})
		if err := os.WriteFile(*addrFile, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	go snaps.Run(ctx)
	return srv.Serve(ctx, ln)
}
