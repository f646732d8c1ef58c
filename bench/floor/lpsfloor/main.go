// Command lpsfloor is the floor lpsd's throughput is measured against: a
// bare grpc-go server with the same TLS certificate, serving
// GetComponentConfig with a constant answer, ignoring the caller's
// credentials. It has none of lpsd's limits, interceptors, attestation,
// snapshot or metrics. With -pprof-listen it also serves net/http/pprof,
// for comparing profiles with lpsd --debug-listen (bench/loadgen -mode profile).
//
// With -imds-roots it is the attesting floor: before the constant answer it
// verifies the call's attested document with attest.Verify, configured as
// lpsd configures it with --imds-roots and --imds-no-aia (same roots, SAN
// domain, skew, uses and replay cache), and refuses a call without a valid
// one (Unauthenticated). It still has none of lpsd's other parts.
//
//	lpsfloor -tls-cert FILE -tls-key FILE [-listen ADDR] [-addr-file FILE] [-config-file FILE] [-imds-roots FILE] [-pprof-listen ADDR]
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/imds/attest"
)

func main() {
	certFile := flag.String("tls-cert", "", "PEM certificate file")
	keyFile := flag.String("tls-key", "", "PEM key file")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	addrFile := flag.String("addr-file", "", "write the bound address to this file")
	configFile := flag.String("config-file", "", "file whose content is the constant config (default {})")
	pprofListen := flag.String("pprof-listen", "", "serve /debug/pprof on this address (default: off)")
	imdsRoots := flag.String("imds-roots", "", "PEM file of attested-document roots: verify every call's document as lpsd does (default: no attestation)")
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
	if err := serve(*certFile, *keyFile, *listen, *addrFile, *configFile, *imdsRoots); err != nil {
		fmt.Fprintln(os.Stderr, "lpsfloor:", err)
		os.Exit(1)
	}
}

func serve(certFile, keyFile, listen, addrFile, configFile, imdsRoots string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if imdsRoots != "" {
		v, err := verifier(imdsRoots)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.UnaryInterceptor(attested(v)))
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
	opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})))
	gs := grpc.NewServer(opts...)
	lpsv1.RegisterLivePatchingServiceServer(gs, constant{resp: &lpsv1.GetComponentConfigResponse{ComponentName: "aksNodeController", Config: config}})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	return gs.Serve(ln)
}

// verifier is attest's verifier as lpsd builds it from --imds-roots FILE
// --imds-no-aia and its other flags' defaults.
func verifier(rootsFile string) (*attest.Verifier, error) {
	data, err := os.ReadFile(rootsFile)
	if err != nil {
		return nil, err
	}
	roots, err := attest.RootsFromPEM(data)
	if err != nil {
		return nil, err
	}
	return attest.New(attest.Config{Roots: roots, SANDomains: attest.DefaultSANDomains(), DisableAIA: true})
}

// attested admits a call only with a valid attested document, the single
// "authorization" value, as lpsd's interceptor does.
func attested(v *attest.Verifier) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		vals := md.Get("authorization")
		if len(vals) != 1 {
			return nil, status.Error(codes.Unauthenticated, "unauthenticated")
		}
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := v.Verify(vctx, vals[0]); err != nil {
			return nil, status.Error(codes.Unauthenticated, "unauthenticated")
		}
		return handler(ctx, req)
	}
}

type constant struct {
	lpsv1.UnimplementedLivePatchingServiceServer
	resp *lpsv1.GetComponentConfigResponse
}

func (c constant) GetComponentConfig(context.Context, *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
	return c.resp, nil
}
