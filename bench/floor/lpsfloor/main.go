// Command lpsfloor is the floor lpsd's throughput is measured against: a
// bare grpc-go server with the same TLS certificate, serving
// GetComponentConfig with a constant answer, ignoring the caller's
// credentials. It has none of lpsd's limits, interceptors, attestation,
// snapshot or metrics. With -pprof-listen it also serves net/http/pprof,
// for comparing profiles with lpsd --debug-listen (bench/loadgen -mode profile).
//
//	lpsfloor -tls-cert FILE -tls-key FILE [-listen ADDR] [-addr-file FILE] [-config-file FILE] [-pprof-listen ADDR]
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
)

func main() {
	certFile := flag.String("tls-cert", "", "PEM certificate file")
	keyFile := flag.String("tls-key", "", "PEM key file")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	addrFile := flag.String("addr-file", "", "write the bound address to this file")
	configFile := flag.String("config-file", "", "file whose content is the constant config (default {})")
	pprofListen := flag.String("pprof-listen", "", "serve /debug/pprof on this address (default: off)")
	flag.Parse()
	if *pprofListen != "" {
		pln, err := net.Listen("tcp", *pprofListen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lpsfloor:", err)
			os.Exit(1)
		}
		go (&http.Server{ReadHeaderTimeout: 5 * time.Second}).Serve(pln) // DefaultServeMux: pprof
		fmt.Fprintln(os.Stderr, "pprof", pln.Addr())
	}
	if err := serve(*certFile, *keyFile, *listen, *addrFile, *configFile); err != nil {
		fmt.Fprintln(os.Stderr, "lpsfloor:", err)
		os.Exit(1)
	}
}

func serve(certFile, keyFile, listen, addrFile, configFile string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	config := "{}"
	if configFile != "" {
		b, err := os.ReadFile(configFile)
		if err != nil {
			return err
		}
		config = string(b)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})))
	lpsv1.RegisterLivePatchingServiceServer(gs, constant{resp: &lpsv1.GetComponentConfigResponse{ComponentName: "aksNodeController", Config: config}})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	return gs.Serve(ln)
}

type constant struct {
	lpsv1.UnimplementedLivePatchingServiceServer
	resp *lpsv1.GetComponentConfigResponse
}

func (c constant) GetComponentConfig(context.Context, *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
	return c.resp, nil
}
