package lpsclient

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/node/lpsclient/lpstest"
)

const apiHost = "myapi.test.local"

func TestFetchSuccessOnTheWire(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	srv := lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName), lpstest.Config(`{"hotfixes":{}}`), lpstest.Options{})
	got, err := Fetch(t.Context(), Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}, "attested-doc-token")
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if got != `{"hotfixes":{}}` {
		t.Errorf("Fetch = %q", got)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(reqs))
	}
	want := lpstest.Request{
		Component:     "aksNodeController",
		Authorization: []string{"attested-doc-token"},
		Authority:     []string{apiHost + ":443"},
		ServerName:    apiHost,
		OfferedALPN:   []string{"aks-live-patching", "h2"},
	}
	if diff := cmp.Diff(want, reqs[0]); diff != "" {
		t.Errorf("request on the wire mismatch (-want +got):\n%s", diff)
	}
}

func TestFetchServerSelectingCustomALPN(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	srv := lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName), lpstest.Config("x"),
		lpstest.Options{ALPN: []string{"aks-live-patching"}})
	if _, err := Fetch(t.Context(), Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}, "tok"); err != nil {
		t.Errorf("Fetch against a server selecting aks-live-patching: %v", err)
	}
}

func TestFetchClassifiesFailures(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	otherCA := lpstest.NewCA(t)
	now := time.Now()
	good := ca.Leaf(t, now.Add(-time.Hour), now.Add(time.Hour), ServerName)
	tests := []struct {
		name      string
		srvCA     *lpstest.CA
		names     []string
		notAfter  time.Time
		handler   lpstest.Handler
		wantClass Class
		wantCode  codes.Code
		wantMsg   string
	}{
		{name: "unauthenticated", handler: lpstest.Error(status.Error(codes.Unauthenticated, "no")), wantClass: ClassNoHotfix, wantCode: codes.Unauthenticated},
		{name: "permission denied", handler: lpstest.Error(status.Error(codes.PermissionDenied, "no")), wantClass: ClassNoHotfix, wantCode: codes.PermissionDenied},
		{name: "not found", handler: lpstest.Error(status.Error(codes.NotFound, "no")), wantClass: ClassNoHotfix, wantCode: codes.NotFound},
		{name: "invalid argument", handler: lpstest.Error(status.Error(codes.InvalidArgument, "bad")), wantClass: ClassRejected, wantCode: codes.InvalidArgument},
		{name: "resource exhausted", handler: lpstest.Error(status.Error(codes.ResourceExhausted, "slow down")), wantClass: ClassRejected, wantCode: codes.ResourceExhausted},
		{name: "unavailable", handler: lpstest.Error(status.Error(codes.Unavailable, "down")), wantClass: ClassUnreachable, wantCode: codes.Unavailable},
		{name: "internal", handler: lpstest.Error(status.Error(codes.Internal, "oops")), wantClass: ClassUnreachable, wantCode: codes.Internal},
		{name: "oversized response", handler: lpstest.Config(strings.Repeat("x", MaxResponseSize+1)), wantClass: ClassRejected, wantCode: codes.ResourceExhausted},
		{name: "wrong CA", srvCA: otherCA, handler: lpstest.Config("x"), wantClass: ClassTLS, wantCode: codes.Unavailable, wantMsg: "unknown authority"},
		{name: "wrong name", names: []string{apiHost}, handler: lpstest.Config("x"), wantClass: ClassTLS, wantCode: codes.Unavailable, wantMsg: ServerName},
		{name: "expired", notAfter: now.Add(-time.Minute), handler: lpstest.Config("x"), wantClass: ClassTLS, wantCode: codes.Unavailable, wantMsg: "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cert := good
			if tt.srvCA != nil || tt.names != nil || !tt.notAfter.IsZero() {
				issuer, names, notAfter := ca, []string{ServerName}, now.Add(time.Hour)
				if tt.srvCA != nil {
					issuer = tt.srvCA
				}
				if tt.names != nil {
					names = tt.names
				}
				if !tt.notAfter.IsZero() {
					notAfter = tt.notAfter
				}
				cert = issuer.Leaf(t, now.Add(-2*time.Hour), notAfter, names...)
			}
			srv := lpstest.Start(t, cert, tt.handler, lpstest.Options{})
			_, err := Fetch(t.Context(), Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}, "tok")
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Fetch error = %v, want *Error", err)
			}
			if fe.Class != tt.wantClass || fe.Code != tt.wantCode {
				t.Errorf("Fetch error class/code = %v/%s, want %v/%s (%v)", fe.Class, fe.Code, tt.wantClass, tt.wantCode, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Fetch error %q does not mention %q", err, tt.wantMsg)
			}
			if tt.wantClass == ClassTLS && len(srv.Requests()) != 0 {
				t.Errorf("token reached a server that failed verification")
			}
		})
	}
}

func TestFetchHungServerIsBoundedByContext(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	srv := lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName), lpstest.Hang(), lpstest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := Fetch(ctx, Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}, "tok")
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != codes.DeadlineExceeded || fe.Class != ClassUnreachable {
		t.Errorf("Fetch against a hung server: %v, want DeadlineExceeded/unreachable", err)
	}
}

func TestFetchRefusesWithoutCA(t *testing.T) {
	t.Parallel()
	_, err := Fetch(t.Context(), Target{Host: apiHost, Addr: "127.0.0.1:1"}, "tok")
	var fe *Error
	if !errors.As(err, &fe) || fe.Class != ClassUnreachable || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("Fetch without CA: %v", err)
	}
}

func TestFetchRefusesLoopbackResolutionWithoutOverride(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	_, err := Fetch(t.Context(), Target{Host: "localhost", Roots: ca.Pool()}, "tok")
	if err == nil || !strings.Contains(err.Error(), "local or link-local") {
		t.Errorf("Fetch to a name resolving to loopback: %v, want refusal", err)
	}
}

func TestVerifyChainNoCertificates(t *testing.T) {
	t.Parallel()
	if err := VerifyChain(nil, lpstest.NewCA(t).Pool()); err == nil || !strings.Contains(err.Error(), "no certificates") {
		t.Errorf("VerifyChain(nil) = %v", err)
	}
}

// TestSessionKeepsTheConnection: a started report on the connection the
// session keeps goes with that connection's token and no second TLS
// handshake; a service that predates started reports answers
// Unimplemented. Keeping another connection closes the first.
func TestSessionKeepsTheConnection(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	srv := lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName), lpstest.Config(`{"hotfixes":{}}`), lpstest.Options{})
	target := Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}
	var s Session
	defer s.Close()
	if c := s.Conn(); c != nil {
		t.Fatalf("a new session keeps %p", c)
	}
	c, err := Dial(target, "tok")
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(c)
	if _, err := c.Fetch(t.Context(), Request{}); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	_, err = s.Conn().Started(t.Context(), nil)
	var le *Error
	if !errors.As(err, &le) || le.Code != codes.Unimplemented {
		t.Fatalf("Started on a service without it = %v, want Unimplemented", err)
	}
	if n := srv.Handshakes(); n != 1 {
		t.Errorf("%d TLS handshakes, want 1: the started report reuses the fetch's connection", n)
	}
	next, err := Dial(target, "tok")
	if err != nil {
		t.Fatal(err)
	}
	s.Keep(next)
	if s.Conn() != next || c.cc.GetState() != connectivity.Shutdown {
		t.Errorf("Keep of another connection: kept %p (want %p), the first in state %v (want closed)", s.Conn(), next, c.cc.GetState())
	}
}

// TestDialConnectsBeforeACall: Dial starts the handshake at once, so
// Node.Open overlaps it with the metadata service, and sends nothing
// before a call; each call carries the connection's token, and a redial
// (a second attempt) carries it too, over a handshake of its own.
func TestDialConnectsBeforeACall(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	srv := lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName), lpstest.Config(`{"hotfixes":{}}`), lpstest.Options{})
	c, err := Dial(Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}, "the-doc")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No call is made: the handshake must come of Dial alone.
	for srv.Handshakes() == 0 {
		select {
		case <-t.Context().Done():
			t.Fatal("no TLS handshake after Dial")
		case <-time.After(time.Millisecond):
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Fatalf("%d calls before any was made", n)
	}
	if _, err := c.Fetch(t.Context(), Request{Base: "202604.01"}); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	again, err := c.Redial()
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := again.Fetch(t.Context(), Request{}); err != nil {
		t.Fatalf("Fetch after Redial: %v", err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || !slices.Equal(reqs[0].Authorization, []string{"the-doc"}) || !slices.Equal(reqs[1].Authorization, []string{"the-doc"}) {
		t.Errorf("calls carried %+v; want two, each with the connection's token", reqs)
	}
	if n := srv.Handshakes(); n != 2 {
		t.Errorf("%d handshakes, want 2: one for the connection, one for the redial", n)
	}
}

// TestFreshRedialsOnlyAFailedConnection: a connection whose attempt
// failed is replaced (and closed), one that works is kept.
func TestFreshRedialsOnlyAFailedConnection(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	srv := lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), ServerName), lpstest.Config(`{"hotfixes":{}}`), lpstest.Options{})
	c, err := Dial(Target{Host: apiHost, Addr: srv.Addr, Roots: ca.Pool()}, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fetch(t.Context(), Request{}); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Fresh(); err != nil || f != c {
		t.Errorf("Fresh of a working connection = %p, %v; want it kept (%p)", f, err, c)
	}

	refused := Target{Host: apiHost, Addr: "127.0.0.1:1", Roots: ca.Pool()}
	bad, err := Dial(refused, "tok")
	if err != nil {
		t.Fatal(err)
	}
	for bad.cc.GetState() != connectivity.TransientFailure {
		if !bad.cc.WaitForStateChange(t.Context(), bad.cc.GetState()) {
			t.Fatal("the refused attempt never failed")
		}
	}
	f, err := bad.Fresh()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f == bad || bad.cc.GetState() != connectivity.Shutdown {
		t.Errorf("Fresh of a failed connection kept it (state %v)", bad.cc.GetState())
	}
	if f.t != refused || f.token != "tok" {
		t.Errorf("Fresh redialed %+v with token %q; want the same target and token", f.t, f.token)
	}
}
