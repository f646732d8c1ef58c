// Package lpstest runs an in-process live-patching server on a real TLS
// socket for tests, with a freshly minted CA.
package lpstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
)

// CA is a minted certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA mints a self-signed CA valid around now.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lpstest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf mints a server certificate for dnsNames valid from notBefore to notAfter.
func (ca *CA) Leaf(t testing.TB, notBefore, notAfter time.Time, dnsNames ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Request is what the server saw of one call.
type Request struct {
	Component     string
	Authorization []string
	Authority     []string
	ServerName    string // SNI
	OfferedALPN   []string
}

// Handler answers one call.
type Handler func(ctx context.Context, req *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error)

// Server is a running test server.
type Server struct {
	Addr string

	mu       sync.Mutex
	requests []Request
	hellos   []*tls.ClientHelloInfo
}

// Requests returns the calls seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Handshakes returns how many TLS handshakes the server has seen.
func (s *Server) Handshakes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hellos)
}

// Options configure Start.
type Options struct {
	// ALPN is the server's protocol preference; nil means ["h2"], the
	// selection the service must make.
	ALPN []string
	// Outcome and Started, when set, serve nodehotfix.node.v1's
	// ReportService with them; nil: the service is not served (a
	// reference service: Unimplemented).
	Outcome func(ctx context.Context, r *nodev1.ReportOutcomeRequest) (*nodev1.ReportOutcomeResponse, error)
	Started func(ctx context.Context, r *nodev1.ReportStartedRequest) (*nodev1.ReportStartedResponse, error)
}

type reports struct {
	nodev1.UnimplementedReportServiceServer
	o Options
}

func (r reports) ReportOutcome(ctx context.Context, req *nodev1.ReportOutcomeRequest) (*nodev1.ReportOutcomeResponse, error) {
	if r.o.Outcome == nil {
		return r.UnimplementedReportServiceServer.ReportOutcome(ctx, req)
	}
	return r.o.Outcome(ctx, req)
}

func (r reports) ReportStarted(ctx context.Context, req *nodev1.ReportStartedRequest) (*nodev1.ReportStartedResponse, error) {
	if r.o.Started == nil {
		return r.UnimplementedReportServiceServer.ReportStarted(ctx, req)
	}
	return r.o.Started(ctx, req)
}

// Start serves h over TLS with cert on a loopback port until the test ends.
func Start(t testing.TB, cert tls.Certificate, h Handler, opts Options) *Server {
	t.Helper()
	s := &Server{}
	alpn := opts.ALPN
	if alpn == nil {
		alpn = []string{"h2"}
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   alpn,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			s.mu.Lock()
			s.hellos = append(s.hellos, hello)
			s.mu.Unlock()
			return nil, nil
		},
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	gs := grpc.NewServer()
	lpsv1.RegisterLivePatchingServiceServer(gs, &service{s: s, h: h})
	if opts.Outcome != nil || opts.Started != nil {
		nodev1.RegisterReportServiceServer(gs, reports{o: opts})
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return s
}

type service struct {
	lpsv1.UnimplementedLivePatchingServiceServer
	s *Server
	h Handler
}

func (svc *service) GetComponentConfig(ctx context.Context, req *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r := Request{Component: req.GetComponentName(), Authorization: md.Get("authorization"), Authority: md.Get(":authority")}
	svc.s.mu.Lock()
	if n := len(svc.s.hellos); n > 0 {
		r.ServerName = svc.s.hellos[n-1].ServerName
		r.OfferedALPN = svc.s.hellos[n-1].SupportedProtos
	}
	svc.s.requests = append(svc.s.requests, r)
	svc.s.mu.Unlock()
	return svc.h(ctx, req)
}

// Config returns a handler that serves body.
func Config(body string) Handler {
	return func(_ context.Context, req *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
		return &lpsv1.GetComponentConfigResponse{ComponentName: req.GetComponentName(), Config: body}, nil
	}
}

// Error returns a handler that fails with err.
func Error(err error) Handler {
	return func(context.Context, *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
		return nil, err
	}
}

// Hang returns a handler that blocks until the call is cancelled.
func Hang() Handler {
	return func(ctx context.Context, _ *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
}
