// Package lpsclient fetches a node component's configuration from the
// live-patching service over gRPC and TLS, exactly as the reference client
// does on the wire.
package lpsclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	nodev1 "nodehotfix/internal/gen/nodehotfix/node/v1"
	"nodehotfix/internal/lpswire"
)

// Wire constants shared with the service (and pinned by the reference).
const (
	// Component is the component key the service registers for the agent.
	Component = "aksNodeController"
	// ServerName is the name the service's certificate must carry. It is
	// verified but never sent as SNI: the front end routes on the API
	// server SNI plus ALPN.
	ServerName = "aks-security-patch.data.mcr.microsoft.com"
	// ALPN is the protocol the front end routes on.
	ALPN = "aks-live-patching"
	// Port is the live-patching port on the API server front end.
	Port = "443"
	// MaxResponseSize caps a response message.
	MaxResponseSize = 1 << 20
)

// Target says where to dial and whom to trust.
type Target struct {
	// Host is the API server FQDN: TLS SNI and gRPC authority.
	Host string
	// Addr is the host:port to dial; empty means Host:443. An override
	// changes only where packets go, never what TLS verifies.
	Addr string
	// Roots is the cluster CA pool, the only trust anchor.
	Roots *x509.CertPool
}

// Request is what a GetComponentConfig call asks for and what the node
// declares about itself with it, in the call's metadata. The zero Request
// is the reference client's: the agent's component, nothing declared.
type Request struct {
	// Component is the component whose configuration is asked for;
	// empty means Component, the agent's.
	Component string
	// Base, when set, is the node's image base, sent in
	// lpswire.BaseMetadata: the service then serves that base's release
	// and revocations only. The reference sends none and gets every
	// base's.
	Base string
	// Reports says the node reports its provisioning outcome afterwards
	// (launch), sent as lpswire.ReportsMetadata "1" with Base: such a node
	// may take a seat of a canary of its base's release.
	Reports bool
	// Boot, with Reports, is the kernel boot ID the outcome report will
	// carry, sent as lpswire.BootMetadata: the service records that it
	// served this boot a release, so the node counts for it whether its
	// report arrives or not.
	Boot string
	// KeySetVersion, when non-zero, is the version of the newest release
	// key set the node verified (internal/node/trust), sent as
	// lpswire.KeySetMetadata: the service serves the key-set chain's links
	// after it. LogSize is the size of the last transparency-log
	// checkpoint the node kept, sent as lpswire.LogSizeMetadata when
	// non-zero: the service proves its checkpoint consistent with it.
	// Reference nodes send neither.
	KeySetVersion int64
	LogSize       int64
}

// Class says how a fetch failure should be treated by a fail-open caller.
type Class int

// Classes of fetch failures.
const (
	// ClassUnreachable covers transport failures and server-side gRPC codes:
	// the service may be down, so a cold-start fallback is acceptable.
	ClassUnreachable Class = iota
	// ClassNoHotfix is the service saying "nothing for you"
	// (Unauthenticated, PermissionDenied, NotFound): benign.
	ClassNoHotfix
	// ClassRejected is an authoritative client rejection (InvalidArgument,
	// ResourceExhausted): no fallback.
	ClassRejected
	// ClassTLS is a failed verification of the server's certificate: a
	// misconfiguration or an attack, never "down", so no fallback.
	ClassTLS
)

// Error is a failed fetch with its classification.
type Error struct {
	Class Class
	Code  codes.Code // the gRPC code; Unknown for non-status errors
	Err   error
}

func (e *Error) Error() string {
	switch e.Class {
	case ClassTLS:
		return fmt.Sprintf("live-patching TLS verification failed: %v", e.Err)
	case ClassRejected:
		// gRPC reports this node's own receive limit as ResourceExhausted
		// too; it is the answer that is too large, not the request.
		if e.Code == codes.ResourceExhausted && strings.Contains(e.Err.Error(), "received message larger than max") {
			return fmt.Sprintf("live-patching response larger than the %d bytes this node accepts: %v", MaxResponseSize, e.Err)
		}
		return fmt.Sprintf("live-patching service rejected the request (code %s): %v", e.Code, e.Err)
	case ClassNoHotfix:
		return fmt.Sprintf("live-patching service has no configuration for this node (code %s)", e.Code)
	}
	return fmt.Sprintf("live-patching service unreachable: %v", e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Fetch calls GetComponentConfig for the agent's component with the
// attested-document token in the "authorization" metadata, declaring
// nothing, as the reference client does, and returns the config text.
// ctx bounds connect, handshake and call. Errors are *Error.
func Fetch(ctx context.Context, t Target, token string) (string, error) {
	return FetchRequest(ctx, t, token, Request{})
}

// FetchRequest is Fetch asking and declaring what req says.
func FetchRequest(ctx context.Context, t Target, token string, req Request) (string, error) {
	return once(t, token, func(c *Conn) (string, error) { return c.Fetch(ctx, req) })
}

// Report sends one provisioning outcome report (nodehotfix.node.v1) over
// the same TLS, ALPN, verification and token as Fetch, and returns whether
// the service had no earlier report for this boot. ctx bounds connect,
// handshake and call. Errors are *Error.
func Report(ctx context.Context, t Target, token string, r *nodev1.ReportOutcomeRequest) (bool, error) {
	return once(t, token, func(c *Conn) (bool, error) { return c.Report(ctx, r) })
}

// Started sends one started report (ReportService.ReportStarted) as
// Report sends an outcome, and returns whether the service stored it (the
// boot had no report yet). An older service answers Unimplemented. Errors
// are *Error.
func Started(ctx context.Context, t Target, token string, r *nodev1.ReportStartedRequest) (bool, error) {
	return once(t, token, func(c *Conn) (bool, error) { return c.Started(ctx, r) })
}

// once runs call on a connection of its own, closed after it: the
// one-shot calls.
func once[R any](t Target, token string, call func(c *Conn) (R, error)) (R, error) {
	c, err := Dial(t, token)
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return call(c)
}

// Session holds one connection to the service across the steps of one
// process: launch's check-hotfix keeps the connection it fetched on, and
// the started report goes over it later without a metadata-service call
// or a TLS handshake of its own (unless the service dropped the idle
// connection, which gRPC then redials). Safe for concurrent use; the zero
// value holds none. Close it.
type Session struct {
	mu sync.Mutex
	c  *Conn
}

// Keep makes c the session's connection, closing the one kept before.
func (s *Session) Keep(c *Conn) {
	s.mu.Lock()
	old := s.c
	s.c = c
	s.mu.Unlock()
	if old != nil && old != c {
		old.Close()
	}
}

// Conn returns the kept connection; nil when none is kept. It stays the
// session's: the caller does not close it.
func (s *Session) Conn() *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// Close closes the kept connection, if there is one.
func (s *Session) Close() error {
	s.mu.Lock()
	c := s.c
	s.c = nil
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Close()
}

// Conn is a connection to the service with the token its calls carry
// (the attested document, per call, never on the connection) and the
// verification record its calls classify their errors by. Each call's
// error is an *Error. Close it.
type Conn struct {
	cc    *grpc.ClientConn
	vr    *verifyRecorder
	t     Target // what it was dialed for, to dial again (Redial, Fresh)
	token string
}

// Redial returns a new connection to c's target with c's token, for a
// second attempt: behind a load balancer it may reach another replica
// than the one that failed (restarting, draining). c stays open.
func (c *Conn) Redial() (*Conn, error) { return Dial(c.t, c.token) }

// Fresh returns c if its connection has not failed, else a new one for
// the same target and token, closing c. A call is not wait-for-ready: on
// a connection whose early attempt failed (a reset, a name not yet
// resolving at boot) it would fail at once, in gRPC's reconnect backoff,
// with the service healthy again; Open calls Fresh once it has the token,
// so the call gets the one attempt of its own it had when the dial waited
// for the token, and a caller that makes several calls calls it between
// them. An attempt that is still running is kept: the call waits for it.
func (c *Conn) Fresh() (*Conn, error) {
	switch c.cc.GetState() {
	case connectivity.TransientFailure, connectivity.Shutdown:
		c.Close()
		return c.Redial()
	}
	return c, nil
}

// Fetch calls GetComponentConfig as req says and returns the config text.
func (c *Conn) Fetch(ctx context.Context, req Request) (string, error) {
	resp, err := c.FetchResponse(ctx, req)
	if err != nil {
		return "", err
	}
	return resp.GetConfig(), nil
}

// FetchResponse is Fetch returning the whole response.
func (c *Conn) FetchResponse(ctx context.Context, req Request) (*lpsv1.GetComponentConfigResponse, error) {
	if req.Base != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, lpswire.BaseMetadata, req.Base)
		if req.Reports {
			ctx = metadata.AppendToOutgoingContext(ctx, lpswire.ReportsMetadata, "1")
			if req.Boot != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, lpswire.BootMetadata, req.Boot)
			}
		}
	}
	if req.KeySetVersion > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, lpswire.KeySetMetadata, strconv.FormatInt(req.KeySetVersion, 10))
	}
	if req.LogSize > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, lpswire.LogSizeMetadata, strconv.FormatInt(req.LogSize, 10))
	}
	component := req.Component
	if component == "" {
		component = Component
	}
	resp, err := lpsv1.NewLivePatchingServiceClient(c.cc).GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: component}, c.withToken())
	if err != nil {
		return nil, callError(err, c.vr)
	}
	return resp, nil
}

// Report sends one outcome report, as the package's Report does.
func (c *Conn) Report(ctx context.Context, r *nodev1.ReportOutcomeRequest) (bool, error) {
	resp, err := nodev1.NewReportServiceClient(c.cc).ReportOutcome(ctx, r, c.withToken())
	if err != nil {
		return false, callError(err, c.vr)
	}
	return resp.GetFirst(), nil
}

// Started sends one started report, as the package's Started does.
func (c *Conn) Started(ctx context.Context, r *nodev1.ReportStartedRequest) (bool, error) {
	resp, err := nodev1.NewReportServiceClient(c.cc).ReportStarted(ctx, r, c.withToken())
	if err != nil {
		return false, callError(err, c.vr)
	}
	return resp.GetFirst(), nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.cc.Close() }

// Dial makes the connection every call uses, its calls carrying token:
// TLS verified against t.Roots for ServerName (not the SNI), ALPN as the
// reference offers it. It starts connecting at once (the name lookup, TCP
// connect and TLS handshake run in the background), so a caller that
// still has to fetch the token (Node.Open) overlaps the two; the first
// call waits for the connection, bounded by its own context. Nothing but
// the handshake goes to the service before a call. Its errors are *Error.
func Dial(t Target, token string) (*Conn, error) {
	if t.Roots == nil {
		return nil, &Error{Class: ClassUnreachable, Code: codes.Unknown, Err: errors.New("no cluster CA; refusing to send credentials over unverified TLS")}
	}
	addr := t.Addr
	if addr == "" {
		addr = net.JoinHostPort(t.Host, Port)
	}
	vr := &verifyRecorder{}
	tlsCfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// ServerName stays empty: gRPC derives the SNI from the authority
		// (Host:443 without the port), the API server name.
		NextProtos: []string{ALPN, "h2"},
		// Go's verifier would check the SNI name; the certificate carries the
		// service name instead, so verification is done in VerifyConnection.
		InsecureSkipVerify: true,
		VerifyConnection:   vr.verifier(t.Roots),
	}
	cc, err := grpc.NewClient(
		// passthrough: the OS resolver (with /etc/hosts) dials addr; no gRPC
		// DNS resolver, hence no TXT service-config lookup on the critical path.
		"passthrough:///"+addr,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithAuthority(net.JoinHostPort(t.Host, Port)),
		grpc.WithDisableServiceConfig(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseSize)),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return dial(ctx, a, t.Addr == "")
		}),
	)
	if err != nil {
		return nil, &Error{Class: ClassUnreachable, Code: codes.Unknown, Err: fmt.Errorf("create client for %s: %w", addr, err)}
	}
	cc.Connect()
	return &Conn{cc: cc, vr: vr, t: t, token: token}, nil
}

// callError turns a failed call into an *Error: a certificate the node
// refused is ClassTLS, whatever code gRPC reported for it.
func callError(err error, vr *verifyRecorder) *Error {
	if verr := vr.err(); verr != nil {
		return &Error{Class: ClassTLS, Code: status.Code(err), Err: verr}
	}
	return classify(err)
}

func classify(err error) *Error {
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Class: ClassUnreachable, Code: codes.Unknown, Err: err}
	}
	e := &Error{Code: st.Code(), Err: err}
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied, codes.NotFound:
		e.Class = ClassNoHotfix
	case codes.InvalidArgument, codes.ResourceExhausted:
		e.Class = ClassRejected
	default:
		e.Class = ClassUnreachable
	}
	return e
}

// verifyRecorder keeps the first certificate verification error of a call,
// so that a handshake failure caused by verification is told apart from an
// unreachable service without parsing error strings.
type verifyRecorder struct {
	mu    sync.Mutex
	first error
}

func (v *verifyRecorder) err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.first
}

func (v *verifyRecorder) verifier(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		err := VerifyChain(cs.PeerCertificates, roots)
		if err != nil {
			v.mu.Lock()
			if v.first == nil {
				v.first = err
			}
			v.mu.Unlock()
		}
		return err
	}
}

// VerifyChain verifies a presented chain against roots for ServerName and
// server authentication.
func VerifyChain(certs []*x509.Certificate, roots *x509.CertPool) error {
	if len(certs) == 0 {
		return errors.New("server presented no certificates")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		DNSName:       ServerName,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("verify server certificate for %s: %w", ServerName, err)
	}
	return nil
}

// dial connects to addr. When the address came from the node config rather
// than an operator override, names resolving to loopback, link-local (the
// metadata service among them), unspecified or multicast addresses are
// refused: the attested document must not be handed to a local process or
// the metadata service by a poisoned resolver.
func dial(ctx context.Context, addr string, restrict bool) (net.Conn, error) {
	var d net.Dialer
	if !restrict {
		return d.DialContext(ctx, "tcp", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	var lastErr error = fmt.Errorf("%s resolves only to local or link-local addresses", host)
	for _, ip := range ips {
		if ip.IP.IsLoopback() || ip.IP.IsLinkLocalUnicast() || ip.IP.IsUnspecified() || ip.IP.IsMulticast() || ip.IP.IsInterfaceLocalMulticast() {
			continue
		}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.IP.String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// withToken sends c's token, the attested document, with one call, as the
// reference sends it: the raw base64 signature, no "Bearer" prefix, and
// only over a secure channel.
func (c *Conn) withToken() grpc.CallOption { return grpc.PerRPCCredentials(tokenCreds(c.token)) }

type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(c)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }
