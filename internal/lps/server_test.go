package lps

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/imds/attest"
	"nodehotfix/internal/imds/imdssign"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

const (
	apiHost    = "myapi.test.local"
	testVMID   = "02aab8a4-74ef-476e-8182-f6d2ba4166a6"
	testSub    = "8d10da13-8125-4ba9-a717-bf7490507b3d"
	anotherSub = "11111111-2222-3333-4444-555555555555"
	// testMaxUses is small so the replay case is cheap.
	testMaxUses = 2
)

// imdsCAs are minted once per test binary: RSA key generation is slow.
type imdsCAs struct {
	good     *imdssign.CA // root → leaf, root pinned
	inter    *imdssign.CA // root → intermediate → leaf, root pinned, intermediate only at its AIA URL
	badSAN   *imdssign.CA // root pinned, leaf for metadata.azure.com.evil.net
	unpinned *imdssign.CA // root not pinned
}

var mintCAs = sync.OnceValues(func() (imdsCAs, error) {
	var cas imdsCAs
	var err error
	if cas.good, err = imdssign.NewCA(imdssign.CAConfig{}); err != nil {
		return cas, err
	}
	if cas.inter, err = imdssign.NewCA(imdssign.CAConfig{Intermediate: true}); err != nil {
		return cas, err
	}
	if cas.badSAN, err = imdssign.NewCA(imdssign.CAConfig{DNSNames: []string{"metadata.azure.com.evil.net"}}); err != nil {
		return cas, err
	}
	if cas.unpinned, err = imdssign.NewCA(imdssign.CAConfig{}); err != nil {
		return cas, err
	}
	return cas, nil
})

func mustCAs(t *testing.T) imdsCAs {
	t.Helper()
	cas, err := mintCAs()
	if err != nil {
		t.Fatal(err)
	}
	return cas
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newVerifier returns a real verifier trusting the pinned test roots, for
// testSub only, whose intermediate fetches all fail.
func newVerifier(t *testing.T) *attest.Verifier {
	t.Helper()
	cas := mustCAs(t)
	roots := x509.NewCertPool()
	roots.AddCert(cas.good.Root)
	roots.AddCert(cas.inter.Root)
	roots.AddCert(cas.badSAN.Root)
	v, err := attest.New(attest.Config{
		Roots: roots,
		AIATransport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("AIA host unreachable")
		}),
		AllowedSubscriptions: []string{testSub},
		MaxUses:              testMaxUses,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// docOpts varies a minted document; the zero value is valid for testSub.
type docOpts struct {
	sub     string
	created time.Time
	expires time.Time
}

// mintToken returns a fresh attested-document token signed by ca; every
// call has a new nonce, so a new replay key.
func mintToken(t *testing.T, ca *imdssign.CA, o docOpts) string {
	t.Helper()
	if o.sub == "" {
		o.sub = testSub
	}
	if o.created.IsZero() {
		o.created = time.Now().Add(-time.Minute)
	}
	if o.expires.IsZero() {
		o.expires = o.created.Add(6 * time.Hour)
	}
	content, err := json.Marshal(imdssign.Document{
		Nonce:          strings.ToLower(rand.Text())[:20],
		SubscriptionID: o.sub,
		TimeStamp:      imdssign.TimeStamp{CreatedOn: o.created, ExpiresOn: o.expires},
		VMID:           testVMID,
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ca.Sign(content)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Test releases: complete for every node, scoped to another subscription,
// and revoked.
var (
	relServed   = release("202501.15.2", rollout.Rollout{State: rollout.Complete, Percent: 100}, false)
	relScoped   = release("202502.01.1", rollout.Rollout{State: rollout.Complete, Percent: 100, Subscriptions: []string{anotherSub}}, false)
	relRevoked  = release("202501.15.3", rollout.Rollout{State: rollout.Complete, Percent: 100}, true)
	relRegional = release("202503.01.1", rollout.Rollout{State: rollout.Complete, Percent: 100, Regions: []string{"westeurope"}}, false)
)

// testNotAfter is the test releases' expiry: well after every test, on the
// service's real clock.
var testNotAfter = time.Now().Add(24 * time.Hour).Truncate(time.Second)

func release(version string, ro rollout.Rollout, revoked bool) rollout.Release {
	base := version[:strings.LastIndex(version, ".")]
	return rollout.Release{
		Version:  version,
		Base:     base,
		Envelope: json.RawMessage(`{"release":"` + version + `"}`),
		Rollout:  ro,
		Revoked:  revoked,
		NotAfter: testNotAfter,
	}
}

func publish(t *testing.T, st store.Store, rels ...rollout.Release) {
	t.Helper()
	for _, r := range rels {
		if _, err := st.PutRelease(t.Context(), r, 0, store.AuditEntry{Actor: "test", Action: "publish", Target: r.Version}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// testServer is a Server on a loopback port with a memstore behind its
// snapshotter.
type testServer struct {
	addr  string
	roots *x509.CertPool // trusts the server certificate
	st    watchedStore
	snaps *Snapshotter
	m     *Metrics
	srv   *Server
}

type serverOpts struct {
	v        verifier // nil: newVerifier
	region   string
	maxConns int
	maxHands int
	// Per-peer limits (0: the defaults).
	perPeerHands, perPeerConns int
	noLoad                     bool // leave the snapshotter without a snapshot
	releases                   []rollout.Release
}

// startServer serves until the test ends; Serve's error is checked then.
func startServer(t *testing.T, o serverOpts) *testServer {
	t.Helper()
	ts := &testServer{st: watchedStore{memstore.New(), make(chan struct{}, 1)}, m: NewMetrics(nil)}
	t.Cleanup(func() { ts.st.Close() })
	publish(t, ts.st, o.releases...)
	ts.snaps = NewSnapshotter(ts.st, testLog(t), ts.m.StoreError)
	if !o.noLoad {
		if err := ts.snaps.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if o.v == nil {
		o.v = newVerifier(t)
	}
	ca := lpstest.NewCA(t)
	ts.roots = ca.Pool()
	cert := ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), DefaultServerName)
	var err error
	ts.srv, err = NewServer(ts.snaps, o.v, ts.m, ServerConfig{Certificate: cert, Region: o.region, MaxConnections: o.maxConns, MaxHandshakes: o.maxHands,
		MaxHandshakesPerPeer: o.perPeerHands, MaxConnectionsPerPeer: o.perPeerConns, Log: testLog(t), Reports: ts.st, Seats: ts.st, Beats: ts.st, ReplicaID: testReplica})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	done := make(chan error, 1)
	// t.Context is cancelled before cleanups run, which stops Serve.
	go func() { done <- ts.srv.Serve(t.Context(), ln) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

// fetch calls the service with the node client itself.
func (ts *testServer) fetch(t *testing.T, token string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return lpsclient.Fetch(ctx, lpsclient.Target{Host: apiHost, Addr: ts.addr, Roots: ts.roots}, token)
}

// client returns a generated client on a connection set up like the
// reference client's: SNI the API server, ALPN [aks-live-patching h2], the
// certificate verified for the service name.
func (ts *testServer) client(t *testing.T) lpsv1.LivePatchingServiceClient {
	t.Helper()
	cfg := ts.nodeTLS()
	cfg.ServerName = "" // gRPC sets the SNI from the authority, as for the reference
	conn, err := grpc.NewClient("passthrough:///"+ts.addr,
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithAuthority(apiHost+":443"),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lpsv1.NewLivePatchingServiceClient(conn)
}

// nodeTLS is the node's TLS configuration for a raw dial.
func (ts *testServer) nodeTLS() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         apiHost,
		NextProtos:         []string{lpsclient.ALPN, "h2"},
		InsecureSkipVerify: true, // verified in VerifyConnection, for the service name
		VerifyConnection: func(cs tls.ConnectionState) error {
			return lpsclient.VerifyChain(cs.PeerCertificates, ts.roots)
		},
	}
}

// call makes one GetComponentConfig call with the given authorization
// values.
func call(t *testing.T, c lpsv1.LivePatchingServiceClient, component string, auth ...string) (*lpsv1.GetComponentConfigResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, a := range auth {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	return c.GetComponentConfig(ctx, &lpsv1.GetComponentConfigRequest{ComponentName: component})
}

// testLog logs to the test's output, shown when it fails or with -v.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// watchedStore tells when the snapshotter subscribes to changes, so a test
// publishes only once the change cannot be missed.
type watchedStore struct {
	*memstore.Store
	watching chan struct{}
}

func (s watchedStore) Watch(ctx context.Context) <-chan struct{} {
	ch := s.Store.Watch(ctx)
	select {
	case s.watching <- struct{}{}:
	default:
	}
	return ch
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWireConstantsMatchNodeClient(t *testing.T) {
	t.Parallel()
	if Component != lpsclient.Component || DefaultServerName != lpsclient.ServerName {
		t.Errorf("lps (%q, %q) and lpsclient (%q, %q) disagree", Component, DefaultServerName, lpsclient.Component, lpsclient.ServerName)
	}
}

// TestFetchOutcomes drives the service with the node client on a real
// socket, one outcome per case.
func TestFetchOutcomes(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	tests := []struct {
		name      string
		opts      serverOpts
		token     docOpts
		badToken  string
		want      string
		wantClass lpsclient.Class
		wantCode  codes.Code
		outcome   string
	}{
		{
			name:    "served",
			opts:    serverOpts{releases: []rollout.Release{relServed, relScoped, relRevoked}},
			want:    `{"hotfixes":{"202501.15":"202501.15.2"},"releases":[{"release":"202501.15.2"}],"revoked":["202501.15.3"]}`,
			outcome: outcomeServed,
		},
		{
			name:      "not-found",
			opts:      serverOpts{releases: []rollout.Release{relScoped}},
			wantClass: lpsclient.ClassNoHotfix, wantCode: codes.NotFound,
			outcome: outcomeNotFound,
		},
		{
			name:    "revoked-only",
			opts:    serverOpts{releases: []rollout.Release{relScoped, relRevoked}},
			want:    `{"hotfixes":{"202501.15":"202501.15.0"},"revoked":["202501.15.3"]}`,
			outcome: outcomeServed,
		},
		{
			name:     "unauthenticated",
			opts:     serverOpts{releases: []rollout.Release{relServed}},
			badToken: base64.StdEncoding.EncodeToString([]byte("not a document")),
			// A node treats both as "no hotfix for me".
			wantClass: lpsclient.ClassNoHotfix, wantCode: codes.Unauthenticated,
			outcome: string(attest.ReasonMalformed),
		},
		{
			name:      "permission-denied",
			opts:      serverOpts{releases: []rollout.Release{relServed}},
			token:     docOpts{sub: anotherSub},
			wantClass: lpsclient.ClassNoHotfix, wantCode: codes.PermissionDenied,
			outcome: string(attest.ReasonSubscription),
		},
		{
			name:      "unavailable",
			opts:      serverOpts{noLoad: true},
			wantClass: lpsclient.ClassUnreachable, wantCode: codes.Unavailable,
			outcome: outcomeUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, tt.opts)
			tok := tt.badToken
			if tok == "" {
				tok = mintToken(t, cas.good, tt.token)
			}
			got, err := ts.fetch(t, tok)
			if tt.wantCode == codes.OK {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if got != tt.want {
					t.Errorf("Fetch = %s, want %s", got, tt.want)
				}
			} else {
				var fe *lpsclient.Error
				if !errors.As(err, &fe) {
					t.Fatalf("Fetch error = %v, want *lpsclient.Error", err)
				}
				if fe.Class != tt.wantClass || fe.Code != tt.wantCode {
					t.Errorf("Fetch error class %v code %v, want class %v code %v", fe.Class, fe.Code, tt.wantClass, tt.wantCode)
				}
			}
			if diff := cmp.Diff(map[string]uint64{tt.outcome: 1}, ts.m.Counts()); diff != "" {
				t.Errorf("Counts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBadAttestationThroughSocket sends the bad inputs of security.md §5
// rows 11–21 over a real connection: each gets its uniform code with no
// detail, is counted under its reason, and the server keeps serving.
func TestBadAttestationThroughSocket(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	c := ts.client(t)
	b64 := func(b ...byte) string { return base64.StdEncoding.EncodeToString(b) }
	now := time.Now()

	tests := []struct {
		name    string
		auth    func(t *testing.T) []string
		reuse   int // successful calls with the same token first
		want    codes.Code
		outcome string
	}{
		{"garbage-base64", fixed("!!not*base64!!"), 0, codes.Unauthenticated, "malformed"},
		{"crasher-30-81", fixed(b64(0x30, 0x81)), 0, codes.Unauthenticated, "malformed"},
		{"crasher-30-84-01", fixed(b64(0x30, 0x84, 0x01)), 0, codes.Unauthenticated, "malformed"},
		{"crasher-30-82-06", fixed(b64(0x30, 0x82, 0x06)), 0, codes.Unauthenticated, "malformed"},
		{"crasher-1f-80", fixed(b64(0x1f, 0x80)), 0, codes.Unauthenticated, "malformed"},
		{"crasher-1f-05", fixed(b64(0x1f, 0x05)), 0, codes.Unauthenticated, "malformed"},
		{"too-large", fixed(strings.Repeat("A", attest.MaxTokenSize+4)), 0, codes.Unauthenticated, "too-large"},
		{"expired", minted(cas.good, docOpts{created: now.Add(-2 * time.Hour), expires: now.Add(-time.Hour)}), 0, codes.Unauthenticated, "expired"},
		{"not-yet-valid", minted(cas.good, docOpts{created: now.Add(time.Hour)}), 0, codes.Unauthenticated, "not-yet-valid"},
		{"wrong-san", minted(cas.badSAN, docOpts{}), 0, codes.Unauthenticated, "san"},
		{"unpinned-root", minted(cas.unpinned, docOpts{}), 0, codes.Unauthenticated, "chain"},
		{"subscription", minted(cas.good, docOpts{sub: anotherSub}), 0, codes.PermissionDenied, "subscription"},
		{"replay", minted(cas.good, docOpts{}), testMaxUses, codes.Unauthenticated, "replay"},
		{"aia-outage", minted(cas.inter, docOpts{}), 0, codes.Unavailable, "intermediate"},
		{"no-token", func(*testing.T) []string { return nil }, 0, codes.Unauthenticated, "no-token"},
		{"two-tokens", func(t *testing.T) []string {
			return []string{mintToken(t, cas.good, docOpts{}), mintToken(t, cas.good, docOpts{})}
		}, 0, codes.Unauthenticated, "no-token"},
	}
	// Sequential: the cases share the server and its counters.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth := tt.auth(t)
			for i := range tt.reuse {
				if _, err := call(t, c, Component, auth...); err != nil {
					t.Fatalf("use %d of the token: %v", i+1, err)
				}
			}
			before := ts.m.Counts()[tt.outcome]
			_, err := call(t, c, Component, auth...)
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Errorf("code = %v (%q), want %v", st.Code(), st.Message(), tt.want)
			}
			if st.Message() != statusText[tt.want] || len(st.Details()) > 0 {
				t.Errorf("status message %q with %d details, want only %q", st.Message(), len(st.Details()), statusText[tt.want])
			}
			if got := ts.m.Counts()[tt.outcome] - before; got != 1 {
				t.Errorf("count of %q rose by %d, want 1", tt.outcome, got)
			}
			if _, err := call(t, c, Component, mintToken(t, cas.good, docOpts{})); err != nil {
				t.Errorf("valid request after the bad one: %v", err)
			}
		})
	}
}

// isCode reports whether err is a node client error with code c.
func isCode(err error, c codes.Code) bool {
	var fe *lpsclient.Error
	return errors.As(err, &fe) && fe.Code == c
}

func fixed(tok string) func(*testing.T) []string {
	return func(*testing.T) []string { return []string{tok} }
}

func minted(ca *imdssign.CA, o docOpts) func(*testing.T) []string {
	return func(t *testing.T) []string { return []string{mintToken(t, ca, o)} }
}

func TestBearerPrefixAccepted(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	resp, err := call(t, ts.client(t), Component, "Bearer "+mintToken(t, cas.good, docOpts{}))
	if err != nil {
		t.Fatalf("GetComponentConfig with a Bearer prefix: %v", err)
	}
	if resp.GetComponentName() != Component || !strings.Contains(resp.GetConfig(), "202501.15.2") {
		t.Errorf("response = %v", resp)
	}
}

func TestWrongComponentIsNotFound(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	_, err := call(t, ts.client(t), "securityPatch", mintToken(t, cas.good, docOpts{}))
	if got := status.Code(err); got != codes.NotFound {
		t.Errorf("code = %v, want NotFound", got)
	}
	if diff := cmp.Diff(map[string]uint64{outcomeUnknownComponent: 1}, ts.m.Counts()); diff != "" {
		t.Errorf("Counts mismatch (-want +got):\n%s", diff)
	}
}

func TestALPNSelectsH2(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true})
	tests := []struct {
		name    string
		offer   []string
		want    string
		wantErr bool
	}{
		{"reference-offer", []string{lpsclient.ALPN, "h2"}, "h2", false},
		{"h2-only", []string{"h2"}, "h2", false},
		// gRPC cannot run without h2, so the handshake fails.
		{"no-h2", []string{lpsclient.ALPN}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ts.nodeTLS()
			cfg.NextProtos = tt.offer
			d := tls.Dialer{Config: cfg}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			conn, err := d.DialContext(ctx, "tcp", ts.addr)
			if tt.wantErr {
				if err == nil {
					conn.Close()
					t.Fatal("handshake succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cs := conn.(*tls.Conn).ConnectionState()
			if cs.NegotiatedProtocol != tt.want {
				t.Errorf("negotiated %q, want %q", cs.NegotiatedProtocol, tt.want)
			}
			if cs.Version < tls.VersionTLS12 {
				t.Errorf("TLS version %x, want ≥ 1.2", cs.Version)
			}
		})
	}
}

func TestTLSBelow12Refused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true})
	cfg := ts.nodeTLS()
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if conn, err := d.DialContext(ctx, "tcp", ts.addr); err == nil {
		conn.Close()
		t.Error("TLS 1.1 handshake succeeded")
	}
}

func TestSnapshotSwap(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{releases: []rollout.Release{relScoped}})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- ts.snaps.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	if _, err := ts.fetch(t, mintToken(t, cas.good, docOpts{})); !isCode(err, codes.NotFound) {
		t.Fatalf("Fetch before the publish: %v, want NotFound", err)
	}
	select {
	case <-ts.st.watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the snapshotter never watched the store")
	}
	publish(t, ts.st, relServed)
	want := `{"hotfixes":{"202501.15":"202501.15.2"},"releases":[{"release":"202501.15.2"}]}`
	var got string
	waitFor(t, "the published release to be served", func() bool {
		var err error
		got, err = ts.fetch(t, mintToken(t, cas.good, docOpts{}))
		return err == nil
	})
	if got != want {
		t.Errorf("Fetch after the publish = %s, want %s", got, want)
	}

	// Revoking moves the release from hotfixes to revoked, and the base
	// gets its tombstone (patch 0), so reference nodes see "not newer".
	r, rev, err := ts.st.Release(t.Context(), relServed.Version)
	if err != nil {
		t.Fatal(err)
	}
	r.Revoked = true
	if _, err := ts.st.PutRelease(t.Context(), r, rev, store.AuditEntry{Actor: "test", Action: "revoke", Target: r.Version}, nil); err != nil {
		t.Fatal(err)
	}
	want = `{"hotfixes":{"202501.15":"202501.15.0"},"revoked":["202501.15.2"]}`
	waitFor(t, "the revocation to be served", func() bool {
		got, err = ts.fetch(t, mintToken(t, cas.good, docOpts{}))
		return err == nil && got == want
	})
}

// panicVerifier panics for the token "panic" and defers to v otherwise.
type panicVerifier struct{ v verifier }

func (p panicVerifier) Verify(ctx context.Context, token string) (attest.Identity, error) {
	if token == "panic" {
		panic("verifier bug")
	}
	return p.v.Verify(ctx, token)
}

func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{v: panicVerifier{newVerifier(t)}, releases: []rollout.Release{relServed}})
	c := ts.client(t)
	_, err := call(t, c, Component, "panic")
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != statusText[codes.Internal] {
		t.Errorf("status = %v %q, want Internal %q", st.Code(), st.Message(), statusText[codes.Internal])
	}
	if _, err := call(t, c, Component, mintToken(t, cas.good, docOpts{})); err != nil {
		t.Errorf("valid request after the panic: %v", err)
	}
	if diff := cmp.Diff(map[string]uint64{outcomePanic: 1, outcomeServed: 1}, ts.m.Counts()); diff != "" {
		t.Errorf("Counts mismatch (-want +got):\n%s", diff)
	}
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	cas := mustCAs(t)
	ts := startServer(t, serverOpts{noLoad: true, releases: []rollout.Release{relServed}})
	hs := httptest.NewServer(ts.srv.HTTPHandler())
	t.Cleanup(hs.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hs.Client().Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}

	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the first snapshot = %d, want 503", code)
	}
	if err := ts.snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the first snapshot = %d, want 200", code)
	}

	if _, err := ts.fetch(t, mintToken(t, cas.good, docOpts{})); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.fetch(t, "!!"); err == nil {
		t.Fatal("Fetch with a garbage token succeeded")
	}
	ts.m.StoreError(errors.New("disk on fire"))
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d, want 200", code)
	}
	for _, want := range []string{
		`lpsd_requests_total{code="OK",outcome="served"} 1`,
		`lpsd_requests_total{code="Unauthenticated",outcome="malformed"} 1`,
		`lpsd_requests_total{code="PermissionDenied",outcome="subscription"} 0`,
		`lpsd_attestation_verify_seconds_count{result="accepted"} 1`,
		`lpsd_attestation_verify_seconds_count{result="rejected"} 1`,
		`lpsd_store_errors_total 1`,
		`lpsd_snapshot_loaded 1`,
		`lpsd_snapshot_revision 1`,
		`lpsd_snapshot_age_seconds `,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestReadyzDuringShutdown(t *testing.T) {
	t.Parallel()
	snaps := NewSnapshotter(memstore.New(), nil, nil)
	if err := snaps.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	ca := lpstest.NewCA(t)
	srv, err := NewServer(snaps, newVerifier(t), NewMetrics(nil), ServerConfig{Certificate: ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), DefaultServerName)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := srv.Serve(ctx, ln); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	rec := httptest.NewRecorder()
	srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after shutdown = %d, want 503", rec.Code)
	}
}

func TestNewServerChecksCertificate(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	now := time.Now()
	tests := []struct {
		name    string
		cfg     ServerConfig
		wantErr bool
	}{
		{"default-name", ServerConfig{Certificate: ca.Leaf(t, now, now.Add(time.Hour), DefaultServerName)}, false},
		{"custom-name", ServerConfig{Certificate: ca.Leaf(t, now, now.Add(time.Hour), "lps.example"), ServerName: "lps.example"}, false},
		{"wrong-name", ServerConfig{Certificate: ca.Leaf(t, now, now.Add(time.Hour), apiHost)}, true},
		{"no-certificate", ServerConfig{}, true},
		{"negative-limit", ServerConfig{Certificate: ca.Leaf(t, now, now.Add(time.Hour), DefaultServerName), MaxConnections: -1}, true},
		{"negative-handshakes", ServerConfig{Certificate: ca.Leaf(t, now, now.Add(time.Hour), DefaultServerName), MaxHandshakes: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewServer(staticSnapshots{}, verifierFunc(nil), NewMetrics(nil), tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Errorf("NewServer error = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestMaxConnections: with a limit of one, a second connection is not
// accepted (its handshake cannot complete) until the first closes.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true, maxConns: 1})
	dial := func(timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		d := tls.Dialer{Config: ts.nodeTLS()}
		return d.DialContext(ctx, "tcp", ts.addr)
	}
	first, err := dial(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := dial(300 * time.Millisecond); err == nil {
		second.Close()
		t.Fatal("second connection completed its handshake while the first was open")
	}
	first.Close()
	third, err := dial(5 * time.Second)
	if err != nil {
		t.Fatalf("connection after the first closed: %v", err)
	}
	third.Close()
}

// stall opens a connection that sends a real ClientHello and then never
// reads or answers: a handshake that started, holding a slot.
func stall(t *testing.T, addr string, local net.IP) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan struct{})
	t.Cleanup(func() { close(blocked); c.Close() })
	go tls.Client(deafConn{Conn: c, blocked: blocked}, &tls.Config{InsecureSkipVerify: true}).Handshake() //nolint:errcheck // it never finishes
	return c
}

// deafConn writes and never reads, until blocked closes.
type deafConn struct {
	net.Conn
	blocked chan struct{}
}

func (d deafConn) Read([]byte) (int, error) {
	<-d.blocked
	return 0, net.ErrClosed
}

// TestHandshakeGate: with one handshake slot held by a client that started
// its ClientHello and stalled, the next connection is closed after waiting
// handshakeWait and counted as shed; once the slot frees, handshakes
// complete again.
func TestHandshakeGate(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true, maxHands: 1})
	staller := stall(t, ts.addr, nil)
	// The staller must hold the slot before the next client arrives.
	waitFor(t, "the staller's handshake", func() bool { return scalars(t, ts.m.reg)["lpsd_handshakes_in_flight"] == 1 })

	d := tls.Dialer{Config: ts.nodeTLS()}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if c, err := d.DialContext(ctx, "tcp", ts.addr); err == nil {
		c.Close()
		t.Fatal("handshake completed while the only slot was held")
	}
	if waited := time.Since(start); waited < handshakeWait {
		t.Errorf("shed after %v, want at least the %v wait", waited, handshakeWait)
	}
	if ctx.Err() != nil {
		t.Fatal("connection was not closed: the client hit its own deadline")
	}
	if got := scalars(t, ts.m.reg)["lpsd_connections_shed_total"]; got != 1 {
		t.Errorf("lpsd_connections_shed_total = %v, want 1", got)
	}

	staller.Close()
	waitFor(t, "the slot to free", func() bool { return scalars(t, ts.m.reg)["lpsd_handshakes_in_flight"] == 0 })
	c, err := d.DialContext(ctx, "tcp", ts.addr)
	if err != nil {
		t.Fatalf("handshake after the slot freed: %v", err)
	}
	c.Close()
	got := scalars(t, ts.m.reg)
	if got["lpsd_handshakes_limit"] != 1 || got["lpsd_connections_shed_total"] != 1 {
		t.Errorf("limit %v and shed %v metrics, want 1 and 1", got["lpsd_handshakes_limit"], got["lpsd_connections_shed_total"])
	}
}

// TestHealthService: the gRPC health service answers probes without an
// attested document: SERVING with a snapshot, NOT_SERVING before one and
// once draining, NotFound for another service.
func TestHealthService(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, ts *testServer, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		t.Helper()
		cfg := ts.nodeTLS()
		cfg.ServerName = ""
		conn, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithAuthority(apiHost+":443"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	for _, svc := range []string{"", lpsv1.LivePatchingService_ServiceDesc.ServiceName} {
		if st, err := check(t, ts, svc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) with a snapshot = %v, %v; want SERVING", svc, st, err)
		}
	}
	if _, err := check(t, ts, "other.Service"); status.Code(err) != codes.NotFound {
		t.Errorf("Check(other) = %v, want NotFound", err)
	}
	ts.srv.Drain()
	if st, err := check(t, ts, ""); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check while draining = %v, %v; want NOT_SERVING", st, err)
	}
	empty := startServer(t, serverOpts{noLoad: true})
	if st, err := check(t, empty, ""); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check before the first snapshot = %v, %v; want NOT_SERVING", st, err)
	}
}

// healthConn dials ts's node listener as a probe does: TLS, no document.
func healthConn(t *testing.T, ts *testServer) healthpb.HealthClient {
	t.Helper()
	cfg := ts.nodeTLS()
	cfg.ServerName = ""
	conn, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithAuthority(apiHost+":443"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestHealthWatch: Watch sends the status Check would answer and then its
// changes: SERVING once the first snapshot loads, NOT_SERVING on a drain,
// which also ends the stream (so the graceful stop does not wait for it);
// an unknown service gets SERVICE_UNKNOWN on a stream that stays open; and
// watches past the cap are refused. Per-peer limits are off here, as
// behind a balancer, so one client can reach the global cap;
// TestHealthWatchPerPeer has them on.
func TestHealthWatch(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true, releases: []rollout.Release{relServed}, perPeerConns: noPeerLimit})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	recv := func(w healthpb.Health_WatchClient) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("Watch Recv: %v", err)
		}
		return resp.GetStatus()
	}
	hc := healthConn(t, ts)
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := recv(w); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch before the first snapshot = %v, want NOT_SERVING", st)
	}
	unknown, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "other.Service"})
	if err != nil {
		t.Fatal(err)
	}
	if st := recv(unknown); st != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Errorf("Watch(other) = %v, want SERVICE_UNKNOWN", st)
	}
	if err := ts.snaps.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if st := recv(w); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch after the snapshot loaded = %v, want SERVING", st)
	}

	// Fill the cap (two watches are open), over connections of 16 streams.
	for i := 2; i < maxHealthWatches; i++ {
		if i%maxConcurrentStreams == 0 {
			hc = healthConn(t, ts)
		}
		x, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		recv(x) // the stream is open on the server once it has sent
	}
	over, err := healthConn(t, ts).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = over.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Watch past the cap of %d: %v, want ResourceExhausted", maxHealthWatches, err)
	}

	ts.srv.Drain()
	if st := recv(w); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch on a drain = %v, want NOT_SERVING", st)
	}
	if _, err := w.Recv(); err != io.EOF {
		t.Errorf("Watch after the drain's NOT_SERVING: %v, want the stream to end (EOF)", err)
	}
	if _, err := unknown.Recv(); err != io.EOF {
		t.Errorf("Watch(other) after a drain: %v, want the stream to end (EOF)", err)
	}
}

// TestHealthWatchPerPeer: one address holds at most
// maxHealthWatchesPerPeer watches, so it cannot take every slot and have
// balancers that watch find each replica unhealthy.
func TestHealthWatchPerPeer(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{releases: []rollout.Release{relServed}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hc := healthConn(t, ts)
	for i := 0; i < maxHealthWatchesPerPeer; i++ {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
	}
	over, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = over.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "this address holds") {
		t.Errorf("watch %d from one address: %v, want ResourceExhausted for the address", maxHealthWatchesPerPeer+1, err)
	}
}

// TestSilentConnectionsHoldNoSlot: connections that never send a whole
// ClientHello (nothing at all, or one byte of it) take no handshake slot,
// so a node's handshake goes through beside a hundred of them (with a
// single slot), and they are closed after firstRecordWait.
func TestSilentConnectionsHoldNoSlot(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true, maxHands: 1})
	var silent []net.Conn
	for i := range 100 {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 1 {
			c.Write([]byte{0x16}) // the first byte of a record, and no more
		}
		silent = append(silent, c)
	}
	d := tls.Dialer{Config: ts.nodeTLS()}
	ctx, cancel := context.WithTimeout(t.Context(), 900*time.Millisecond) // inside firstRecordWait
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", ts.addr)
	if err != nil {
		t.Fatalf("handshake beside silent connections: %v", err)
	}
	c.Close()
	for _, s := range silent {
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := s.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a silent connection was not closed by lpsd: %v", err)
		}
	}
	if got := closedBy(t, ts, closedSilent); got != 100 {
		t.Errorf("closed as silent: %v, want 100", got)
	}
	// A client that connects and leaves at once (a balancer's TCP check)
	// is not counted as abuse.
	c, err = net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(50 * time.Millisecond) // lets lpsd see the close; a slow machine only makes the check weaker
	if got := closedBy(t, ts, closedSilent); got != 100 {
		t.Errorf("a connection that closed at once was counted silent: %v", got)
	}
}

// TestPerPeerLimitsOff: -1 turns the per-peer caps off (a balancer that
// hides the nodes' addresses).
func TestPerPeerLimitsOff(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{noLoad: true, perPeerHands: noPeerLimit, perPeerConns: noPeerLimit})
	for range 4 {
		stall(t, ts.addr, nil)
	}
	d := tls.Dialer{Config: ts.nodeTLS()}
	c, err := d.DialContext(t.Context(), "tcp", ts.addr)
	if err != nil {
		t.Fatalf("a handshake beside four stalled ones with no per-peer cap: %v", err)
	}
	c.Close()
	if got := closedBy(t, ts, closedPeerHandshakes) + closedBy(t, ts, closedPeerConnections); got != 0 {
		t.Errorf("closed by a per-peer cap that is off: %v", got)
	}
}

func TestPeerOf(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.7:443": "192.0.2.7", "[::ffff:192.0.2.7]:443": "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64", "[2001:db8:1:2:ffff::1]:443": "2001:db8:1:2::/64",
	} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := peerOf(addrConn{tcp}); got != want {
			t.Errorf("peerOf(%s) = %q, want %q", addr, got, want)
		}
	}
}

// addrConn is a connection with only a remote address.
type addrConn struct{ remote net.Addr }

func (a addrConn) RemoteAddr() net.Addr           { return a.remote }
func (addrConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (addrConn) Write(b []byte) (int, error)      { return len(b), nil }
func (addrConn) Close() error                     { return nil }
func (addrConn) LocalAddr() net.Addr              { return nil }
func (addrConn) SetDeadline(time.Time) error      { return nil }
func (addrConn) SetReadDeadline(time.Time) error  { return nil }
func (addrConn) SetWriteDeadline(time.Time) error { return nil }

// TestPerPeerLimits: one address's handshakes in flight and open
// connections are capped; another address is not affected.
func TestPerPeerLimits(t *testing.T) {
	t.Parallel()
	other := net.IPv4(127, 0, 0, 2)
	t.Run("handshakes", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, serverOpts{noLoad: true, perPeerHands: 2})
		stall(t, ts.addr, nil)
		stall(t, ts.addr, nil)
		waitFor(t, "two handshakes in flight", func() bool { return scalars(t, ts.m.reg)["lpsd_handshakes_in_flight"] == 2 })
		d := tls.Dialer{Config: ts.nodeTLS()}
		if c, err := d.DialContext(t.Context(), "tcp", ts.addr); err == nil {
			c.Close()
			t.Fatal("a third handshake from the same address went through")
		}
		if got := closedBy(t, ts, closedPeerHandshakes); got != 1 {
			t.Errorf("closed for peer handshakes: %v, want 1", got)
		}
		d.NetDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: other}}
		c, err := d.DialContext(t.Context(), "tcp", ts.addr)
		if err != nil {
			t.Fatalf("another address: %v", err)
		}
		c.Close()
	})
	t.Run("connections", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, serverOpts{noLoad: true, perPeerConns: 3})
		d := tls.Dialer{Config: ts.nodeTLS()}
		var open []net.Conn
		for range 3 {
			c, err := d.DialContext(t.Context(), "tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			open = append(open, c)
		}
		if c, err := d.DialContext(t.Context(), "tcp", ts.addr); err == nil {
			c.Close()
			t.Fatal("a fourth connection from the same address was served")
		}
		if got := closedBy(t, ts, closedPeerConnections); got != 1 {
			t.Errorf("closed for peer connections: %v, want 1", got)
		}
		d.NetDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: other}}
		c, err := d.DialContext(t.Context(), "tcp", ts.addr)
		if err != nil {
			t.Fatalf("another address: %v", err)
		}
		c.Close()
		// A closed connection gives its place back.
		open[0].Close()
		d.NetDialer = nil
		waitFor(t, "the place to free", func() bool {
			c, err := d.DialContext(t.Context(), "tcp", ts.addr)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	})
}

// closedBy reads lpsd_connections_closed_total{reason}.
func closedBy(t *testing.T, ts *testServer, reason string) float64 {
	t.Helper()
	mfs, err := ts.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lpsd_connections_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestIntegrationMaxConnectionAge: a connection whose call opened and
// never sent its request is active, so the 5 s idle limit leaves it; the
// age limit (30 s, ±10% jitter, then 5 s of grace) closes it.
func TestIntegrationMaxConnectionAge(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 30 s connection age limit")
	}
	t.Parallel()
	ts := startServer(t, serverOpts{})
	cfg := ts.nodeTLS()
	cfg.ServerName = ""
	conn, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithAuthority(apiHost+":443"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, lpsv1.LivePatchingService_GetComponentConfig_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- stream.RecvMsg(&lpsv1.GetComponentConfigResponse{}) }()
	select {
	case err := <-ended:
		t.Fatalf("the open call ended after less than 3 idle limits: %v", err)
	case <-time.After(3 * maxConnectionIdle):
	}
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
			t.Errorf("the call ended with %v, want the connection closed (Unavailable)", err)
		}
	case <-time.After(maxConnectionAge + maxConnectionAge/10 + maxConnectionAgeGrace + 10*time.Second):
		t.Fatal("a connection holding a call that never sent was not closed by the age limit")
	}
}

// TestServeMarksReplicaUp: a serving replica marks its minute up in the
// store (store.Beats) as soon as it serves, so silence is counted in
// lpsd's uptime.
func TestServeMarksReplicaUp(t *testing.T) {
	t.Parallel()
	ts := startServer(t, serverOpts{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		marks, err := ts.st.Beats(t.Context(), time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(marks) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no beat within 10 s of serving")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
