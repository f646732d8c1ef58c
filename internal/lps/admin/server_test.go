package admin

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// testReplica is the test server's replica ID.
const testReplica = "lpsd-test-1"

// testNow is the server's clock in every test; TLS uses the real one.
var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// Test subscription IDs.
const (
	subA = "0a1b2c3d-0000-4000-8000-00000000000a"
	subB = "0a1b2c3d-0000-4000-8000-00000000000b"
)

const (
	opsToken     = "ops-0123456789abcdef-token"
	unnamedToken = "unnamed0123456789abcdefXYZ"
	readerToken  = "reader-0123456789abcdef-token"
	expiredToken = "expired-0123456789abcdef-token"
	tokenFile    = "# admin tokens\nops:" + opsToken + "\n\n" + unnamedToken + "\nwatcher:reader:" + readerToken + "\nformer:operator:" + expiredToken + ":2020-01-01\n"
)

// pki is a server certificate, its roots, an admin client CA with one
// client ("alice"), and a client certificate from an unrelated CA.
type pki struct {
	server    tls.Certificate
	roots     *x509.CertPool
	clientCAs *x509.CertPool
	alice     tls.Certificate
	rogue     tls.Certificate
	// bob's certificate has the organizational unit "reader".
	bob tls.Certificate
}

var sharedPKI = sync.OnceValue(func() *pki {
	serverCA, serverKey := newCA("server CA")
	clientCA, clientKey := newCA("admin client CA")
	otherCA, otherKey := newCA("rogue CA")
	p := &pki{
		server:    issue(serverCA, serverKey, "localhost", x509.ExtKeyUsageServerAuth),
		roots:     x509.NewCertPool(),
		clientCAs: x509.NewCertPool(),
		alice:     issue(clientCA, clientKey, "alice", x509.ExtKeyUsageClientAuth),
		rogue:     issue(otherCA, otherKey, "alice", x509.ExtKeyUsageClientAuth),
		bob:       issueOU(clientCA, clientKey, "bob", "reader"),
	}
	p.roots.AddCert(serverCA)
	p.clientCAs.AddCert(clientCA)
	return p
})

func newCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key))
	return must(x509.ParseCertificate(der)), key
}

func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) tls.Certificate {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{cn}
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: must(x509.ParseCertificate(der))}
}

// issueOU issues a client certificate for cn in organizational unit ou.
func issueOU(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, ou string) tls.Certificate {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: cn, OrganizationalUnit: []string{ou}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: must(x509.ParseCertificate(der))}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// harness is an admin server on a real TLS socket over a memstore.
type harness struct {
	// ahead moves the server's clock past testNow.
	ahead atomic.Int64
	store *memstore.Store
	snap  *lps.Snapshotter
	srv   *Server
	addr  string
	pki   *pki
}

type harnessOpts struct {
	keys        *release.KeySet
	store       store.Store // nil: the harness's memstore
	noSnapshot  bool
	requireMTLS bool
	logs        LogKeeper
	policy      rollout.Policy
	window      autopilot.Window
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	p := sharedPKI()
	h := &harness{store: memstore.New(), pki: p}
	t.Cleanup(func() { h.store.Close() })
	st := o.store
	if st == nil {
		st = h.store
	}
	h.snap = lps.NewSnapshotter(st, nil, nil)
	cfg := Config{
		Store:           st,
		Snapshots:       h.snap,
		Counts:          func() map[string]uint64 { return map[string]uint64{"served": 7, "not-found": 2} },
		Region:          "eastus",
		ReplicaID:       testReplica,
		ReleaseKeys:     o.keys,
		TransparencyLog: o.logs,
		Policy:          o.policy,
		AdvanceWindow:   o.window,
		Now:             func() time.Time { return testNow.Add(time.Duration(h.ahead.Load())) },
	}
	if o.noSnapshot {
		cfg.Snapshots = nil
	}
	h.srv = New(cfg)
	tokens, err := ParseTokens([]byte(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	auth := NewAuth(tokens, nil)
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(TLSConfig(lps.NewCertSource(p.server), p.clientCAs, !o.requireMTLS))),
		grpc.ChainUnaryInterceptor(auth.Unary),
		grpc.ChainStreamInterceptor(auth.Stream),
	)
	adminv1.RegisterAdminServiceServer(g, h.srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	h.addr = lis.Addr().String()
	return h
}

// cred is how a test client authenticates.
type cred struct {
	token string
	cert  *tls.Certificate
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

func (h *harness) conn(t *testing.T, c cred) *grpc.ClientConn {
	t.Helper()
	tc := &tls.Config{RootCAs: h.pki.roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if c.cert != nil {
		// Always present the certificate, even one the server's CA list
		// does not name, as a hostile client would.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert, nil }
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.token)))
	}
	cc, err := grpc.NewClient(h.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (h *harness) client(t *testing.T, c cred) adminv1.AdminServiceClient {
	return adminv1.NewAdminServiceClient(h.conn(t, c))
}

// ops is the client most tests use: the named bearer token.
func (h *harness) ops(t *testing.T) adminv1.AdminServiceClient {
	return h.client(t, cred{token: "Bearer " + opsToken})
}

func (h *harness) reload(t *testing.T) {
	t.Helper()
	if err := h.snap.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// signed returns an envelope for version, signed by priv and valid for a
// month after testNow.
func signed(t *testing.T, priv ed25519.PrivateKey, version string) string {
	t.Helper()
	return signedUntil(t, priv, version, testNow.Add(30*24*time.Hour))
}

// signedUntil returns an envelope for version, signed by priv, valid until
// notAfter.
func signedUntil(t *testing.T, priv ed25519.PrivateKey, version string, notAfter time.Time) string {
	t.Helper()
	v := hotfix.MustParseVersion(version)
	env, err := release.Sign(release.Release{
		Base:    v.Base(),
		Version: version,
		Artifacts: map[string]release.Artifact{
			"linux/amd64": {URL: "https://blob.example.com/anc/" + version, SHA256: strings.Repeat("ab", 32), Size: 1234},
		},
		NotAfter: notAfter,
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(env)
}

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := release.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func publish(t *testing.T, c adminv1.AdminServiceClient, env string) *adminv1.Release {
	t.Helper()
	resp, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: env})
	if err != nil {
		t.Fatalf("PublishRelease: %v", err)
	}
	return resp.GetRelease()
}

func TestPublishRelease(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	env := signed(t, priv, "202604.01.3")

	got := publish(t, c, "\n"+env+"\n")
	if got.GetVersion() != "202604.01.3" || got.GetBase() != "202604.01" || got.GetRollout().GetState() != "draft" ||
		got.GetRollout().GetPercent() != 0 || got.GetRevision() == 0 || !got.GetPublishedAt().AsTime().Equal(testNow) {
		t.Errorf("PublishRelease = %v, want a draft of 202604.01.3 at 0%% published at %v", got, testNow)
	}
	if got.GetEnvelopeJson() != env {
		t.Errorf("stored envelope = %q, want the published one %q", got.GetEnvelopeJson(), env)
	}

	// A retry of the same envelope succeeds and changes nothing; another
	// envelope under the same version is refused.
	again, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: env})
	if err != nil || !again.GetUnchanged() || again.GetRelease().GetRevision() != got.GetRevision() {
		t.Errorf("publish the same envelope again = %v, %v; want it unchanged at revision %d", again, err, got.GetRevision())
	}
	other, err := release.Sign(release.Release{
		Base: "202604.01", Version: "202604.01.3", NotAfter: testNow.Add(time.Hour),
		Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://x.example/other", SHA256: strings.Repeat("1", 64), Size: 2}},
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: string(other)})
	wantCode(t, "publish a different envelope as the same version", err, codes.AlreadyExists)
	if !strings.Contains(status.Convert(err).Message(), "a different envelope") {
		t.Errorf("refusal %q does not say the envelope differs", status.Convert(err).Message())
	}

	expired, err := release.Sign(release.Release{
		Base: "202604.01", Version: "202604.01.4", NotAfter: testNow,
		Artifacts: map[string]release.Artifact{"linux/amd64": {URL: "https://x.example/a", SHA256: strings.Repeat("0", 64), Size: 1}},
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]string{
		"empty":   "  ",
		"garbage": "{not json",
		"expired": string(expired),
	} {
		_, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: env})
		wantCode(t, "publish "+name, err, codes.InvalidArgument)
	}
}

func TestPublishWithReleaseKeysRefusesUntrusted(t *testing.T) {
	t.Parallel()
	pub, priv := newKey(t)
	_, otherPriv := newKey(t)
	ks, err := release.NewKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{keys: &ks})
	c := h.ops(t)

	// Tamper: swap the payload of a trusted envelope for another version's.
	var good, other map[string]any
	if err := json.Unmarshal([]byte(signed(t, priv, "202604.01.5")), &good); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(signed(t, otherPriv, "202604.01.6")), &other); err != nil {
		t.Fatal(err)
	}
	good["payload"] = other["payload"]
	tampered, _ := json.Marshal(good)
	payload, _ := base64.StdEncoding.DecodeString(other["payload"].(string))
	unsigned, _ := json.Marshal(map[string]any{
		"payloadType": "application/vnd.nodehotfix.release.v1+json",
		"payload":     base64.StdEncoding.EncodeToString(payload),
		"signatures":  []any{},
	})

	for name, env := range map[string]string{
		"other-key": signed(t, otherPriv, "202604.01.4"),
		"tampered":  string(tampered),
		"unsigned":  string(unsigned),
	} {
		_, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: env})
		wantCode(t, "publish "+name, err, codes.InvalidArgument)
	}
	if rels, _, _ := h.store.Releases(t.Context()); len(rels) != 0 {
		t.Errorf("store holds %d releases after refused publishes, want 0", len(rels))
	}
	publish(t, c, signed(t, priv, "202604.01.3"))
}

// TestPublishBelowThreshold: with a 2-of-3 key set, an envelope signed
// once is refused as FailedPrecondition naming its signer and the one
// missing, machine-readably too; co-signed by another key it publishes.
func TestPublishBelowThreshold(t *testing.T) {
	t.Parallel()
	pubA, privA := newKey(t)
	pubB, privB := newKey(t)
	pubC, _ := newKey(t)
	ks, err := release.KeySetDocument{Version: 1, Threshold: 2, Keys: []ed25519.PublicKey{pubA, pubB, pubC}}.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{keys: &ks})
	c := h.ops(t)
	once := signed(t, privB, "202604.01.3")
	_, err = c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: once})
	wantCode(t, "publish signed once", err, codes.FailedPrecondition)
	st, _ := status.FromError(err)
	if !strings.Contains(st.Message(), release.KeyID(pubB)) || !strings.Contains(st.Message(), "1 more signature") {
		t.Errorf("publish signed once: %q, want it to name %s and the one missing", st.Message(), release.KeyID(pubB))
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	want := map[string]string{"signers": release.KeyID(pubB), "missing": "1", "threshold": "2"}
	if info == nil || info.GetReason() != ReasonBelowThreshold || info.GetDomain() != ErrorDomain || !cmp.Equal(info.GetMetadata(), want) {
		t.Errorf("publish signed once: details %v, want an ErrorInfo %s with %v", st.Details(), ReasonBelowThreshold, want)
	}
	if rels, _, _ := h.store.Releases(t.Context()); len(rels) != 0 {
		t.Errorf("store holds %d releases after a refused publish, want 0", len(rels))
	}
	// A signature by a key lpsd does not trust is no co-signature.
	_, otherPriv := newKey(t)
	stranger, err := release.AddSignature([]byte(once), otherPriv)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: string(stranger)})
	wantCode(t, "publish co-signed by a stranger", err, codes.FailedPrecondition)
	twice, err := release.AddSignature([]byte(once), privA)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, c, string(twice))
}

func TestRolloutChanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, c, signed(t, priv, v))
	ctx := t.Context()

	set := func(pct int32, subs ...string) (*adminv1.Release, error) {
		resp, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: pct, Subscriptions: subs, SetSubscriptions: subs != nil, AllowUnseen: true})
		return resp.GetRelease(), err
	}
	move := func(a adminv1.Action) (*adminv1.Release, error) {
		resp, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: a})
		return resp.GetRelease(), err
	}
	state := func(r *adminv1.Release) string { return r.GetRollout().GetState() }

	r, err := set(10, strings.ToUpper(subB), subA)
	if err != nil {
		t.Fatalf("SetRollout 10%%: %v", err)
	}
	if state(r) != "rolling" || r.GetRollout().GetPercent() != 10 || !cmp.Equal(r.GetRollout().GetSubscriptions(), []string{subA, subB}) {
		t.Errorf("after SetRollout 10%% = %v, want rolling at 10%% for [sub-a sub-b]", r.GetRollout())
	}
	_, err = set(5)
	wantCode(t, "decrease", err, codes.FailedPrecondition)
	_, err = set(101)
	wantCode(t, "percent 101", err, codes.InvalidArgument)
	_, err = c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: "202604.01.99", Percent: 10})
	wantCode(t, "unknown version", err, codes.NotFound)
	_, err = c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: "nope", Percent: 10})
	wantCode(t, "malformed version", err, codes.InvalidArgument)
	_, err = c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 20, IfRevision: r.GetRevision() - 1})
	wantCode(t, "stale if_revision", err, codes.Aborted)
	resp, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 20, IfRevision: r.GetRevision()})
	r = resp.GetRelease()
	if err != nil || r.GetRollout().GetPercent() != 20 || len(r.GetRollout().GetSubscriptions()) != 2 {
		t.Errorf("SetRollout 20%% at the current revision = %v, %v; want 20%% with the scope kept", r.GetRollout(), err)
	}
	resp, err = c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 20, SetSubscriptions: true, Regions: []string{"WestUS"}, SetRegions: true, AllowUnseen: true})
	r = resp.GetRelease()
	if err != nil || len(r.GetRollout().GetSubscriptions()) != 0 || !cmp.Equal(r.GetRollout().GetRegions(), []string{"westus"}) {
		t.Errorf("SetRollout clearing subscriptions = %v, %v; want every subscription, region westus", r.GetRollout(), err)
	}

	steps := []struct {
		action adminv1.Action
		want   string
		code   codes.Code
	}{
		{adminv1.Action_ACTION_PAUSE, "paused", codes.OK},
		{adminv1.Action_ACTION_PAUSE, "paused", codes.OK}, // already: done, not refused
		{adminv1.Action_ACTION_RESUME, "rolling", codes.OK},
		{adminv1.Action_ACTION_RESUME, "rolling", codes.OK},
		{adminv1.Action_ACTION_RESUME, "rolling", codes.OK},
		{adminv1.Action_ACTION_HALT, "halted", codes.OK},
		{adminv1.Action_ACTION_COMPLETE, "", codes.FailedPrecondition},
		{adminv1.Action_ACTION_RESUME, "rolling", codes.OK},
		{adminv1.Action_ACTION_COMPLETE, "complete", codes.OK},
		{adminv1.Action_ACTION_UNSPECIFIED, "", codes.InvalidArgument},
	}
	for i, s := range steps {
		r, err := move(s.action)
		wantCode(t, s.action.String(), err, s.code)
		if s.code == codes.OK && state(r) != s.want {
			t.Errorf("step %d: Transition(%v) state = %q, want %q", i, s.action, state(r), s.want)
		}
	}
	// A complete release changes scope without a halt, and stays at 100%.
	if r, err := set(100, subB); err != nil || state(r) != "complete" || r.GetRollout().GetPercent() != 100 || !cmp.Equal(r.GetRollout().GetSubscriptions(), []string{subB}) {
		t.Errorf("SetRollout scope on a complete rollout = %v, %v; want complete at 100%% for [%s]", r.GetRollout(), err, subB)
	}
	_, err = set(50)
	wantCode(t, "lower the percentage of a complete release", err, codes.FailedPrecondition)
	if msg := status.Convert(err).Message(); strings.Contains(msg, "resume") {
		t.Errorf("refusal on a complete release %q suggests resume, which cannot work from complete", msg)
	}
	audited, _ := h.store.Audit(ctx, 0, 1000)
	done, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE})
	if err != nil || !done.GetUnchanged() {
		t.Errorf("complete a complete release = %v, %v; want done, unchanged", done, err)
	}
	if after, _ := h.store.Audit(ctx, 0, 1000); len(after) != len(audited) {
		t.Errorf("a transition to the current state wrote %d audit entries", len(after)-len(audited))
	}

	// A revoke from a stale page is refused, as every change is.
	_, err = c.Revoke(ctx, &adminv1.RevokeRequest{Version: v, IfRevision: done.GetRelease().GetRevision() - 1})
	wantCode(t, "revoke at a stale if_revision", err, codes.Aborted)
	rv, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: v, IfRevision: done.GetRelease().GetRevision()})
	if err != nil || !rv.GetRelease().GetRevoked() {
		t.Fatalf("Revoke = %v, %v; want revoked", rv, err)
	}
	if rv.GetUnchanged() {
		t.Errorf("the first Revoke says unchanged")
	}
	again, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: v})
	if err != nil || again.GetRelease().GetRevision() != rv.GetRelease().GetRevision() || !again.GetUnchanged() {
		t.Errorf("Revoke again = %v, %v; want the same record, unchanged", again, err)
	}
	_, err = c.Revoke(ctx, &adminv1.RevokeRequest{Version: v, IfRevision: done.GetRelease().GetRevision()})
	wantCode(t, "revoke a revoked release at a stale if_revision", err, codes.Aborted)
	_, err = move(adminv1.Action_ACTION_HALT)
	wantCode(t, "halt revoked", err, codes.FailedPrecondition)
	_, err = c.Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.99"})
	wantCode(t, "revoke unknown", err, codes.NotFound)
}

// auditView is what TestAuditRecordsEveryChange compares per entry.
type auditView struct {
	Seq                   int64
	Actor, Action, Target string
	Before, After         string // "state/percent/revoked", "" for none
}

func summarize(t *testing.T, js string) string {
	t.Helper()
	if js == "" {
		return ""
	}
	var r rollout.Release
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("audit record %q: %v", js, err)
	}
	s := string(r.Rollout.State) + "/" + strconv.Itoa(r.Rollout.Percent)
	if r.Revoked {
		s += "/revoked"
	}
	return s
}

func TestAuditRecordsEveryChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ops := h.ops(t)
	unnamed := h.client(t, cred{token: "bearer " + unnamedToken})
	alice := h.client(t, cred{cert: &h.pki.alice})
	_, priv := newKey(t)
	ctx := t.Context()
	const v = "202604.01.3"

	publish(t, ops, signed(t, priv, v))
	calls := []func() error{
		func() error {
			_, err := alice.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 25})
			return err
		},
		func() error {
			_, err := unnamed.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_PAUSE})
			return err
		},
		func() error {
			_, err := ops.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_RESUME})
			return err
		},
		func() error {
			_, err := ops.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_HALT})
			return err
		},
		func() error {
			_, err := ops.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE})
			return err // refused: halted cannot complete; must not be audited
		},
		func() error {
			_, err := ops.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_RESUME})
			return err
		},
		func() error {
			_, err := ops.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE})
			return err
		},
		func() error {
			_, err := alice.Revoke(ctx, &adminv1.RevokeRequest{Version: v})
			return err
		},
	}
	for i, call := range calls {
		if err := call(); err != nil && i != 4 {
			t.Fatalf("change %d: %v", i, err)
		}
	}

	resp, err := ops.ListAudit(ctx, &adminv1.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []auditView
	for _, e := range resp.GetEntries() {
		if !e.GetTime().AsTime().Equal(testNow) {
			t.Errorf("entry %d time = %v, want %v", e.GetSeq(), e.GetTime().AsTime(), testNow)
		}
		got = append(got, auditView{e.GetSeq(), e.GetActor(), e.GetAction(), e.GetTarget(), summarize(t, e.GetBeforeJson()), summarize(t, e.GetAfterJson())})
	}
	unnamedActor := must(ParseTokens([]byte(unnamedToken)))[0].Actor()
	want := []auditView{
		{1, "token:ops", "publish", v, "", "draft/0"},
		{2, "cert:alice", "rollout-set", v, "draft/0", "rolling/25"},
		{3, unnamedActor, "pause", v, "rolling/25", "paused/25"},
		{4, "token:ops", "resume", v, "paused/25", "rolling/25"},
		{5, "token:ops", "halt", v, "rolling/25", "halted/25"},
		{6, "token:ops", "resume", v, "halted/25", "rolling/25"},
		{7, "token:ops", "complete", v, "rolling/25", "complete/100"},
		{8, "cert:alice", "revoke", v, "complete/100", "complete/100/revoked"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(unnamedActor, "token:sha256:") || len(unnamedActor) != len("token:sha256:")+8 {
		t.Errorf("unnamed token actor = %q, want token:sha256:<8 hex>", unnamedActor)
	}

	page, err := ops.ListAudit(ctx, &adminv1.ListAuditRequest{AfterSeq: 2, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range page.GetEntries() {
		seqs = append(seqs, e.GetSeq())
	}
	if !cmp.Equal(seqs, []int64{3, 4, 5}) {
		t.Errorf("ListAudit(after 2, limit 3) seqs = %v, want [3 4 5]", seqs)
	}
	_, err = ops.ListAudit(ctx, &adminv1.ListAuditRequest{AfterSeq: -1})
	wantCode(t, "negative after_seq", err, codes.InvalidArgument)
}

func TestConcurrentSetRolloutOneWins(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.3"
	rev := publish(t, c, signed(t, priv, v)).GetRevision()

	pcts := []int32{10, 30}
	errs := make([]error, len(pcts))
	var wg sync.WaitGroup
	for i, p := range pcts {
		wg.Go(func() {
			_, errs[i] = c.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: v, Percent: p, IfRevision: rev})
		})
	}
	wg.Wait()
	var won, aborted int
	for _, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			won++
		case codes.Aborted:
			aborted++
		default:
			t.Errorf("concurrent SetRollout: %v, want OK or Aborted", err)
		}
	}
	if won != 1 || aborted != 1 {
		t.Errorf("concurrent SetRollout at one revision: %d won, %d aborted; want 1 and 1 (%v)", won, aborted, errs)
	}
	if entries, _ := h.store.Audit(t.Context(), 0, 10); len(entries) != 2 {
		t.Errorf("audit holds %d entries, want 2 (publish and the winner)", len(entries))
	}
}

// racingStore lets another writer change a release between the server's
// read and its compare-and-swap.
type racingStore struct {
	*memstore.Store
	race func()
}

func (s *racingStore) PutRelease(ctx context.Context, r rollout.Release, ifRev int64, a store.AuditEntry, rec []byte) (int64, error) {
	if s.race != nil {
		s.race()
		s.race = nil
	}
	return s.Store.PutRelease(ctx, r, ifRev, a, rec)
}

func TestSetRolloutLosingTheCASIsAborted(t *testing.T) {
	t.Parallel()
	rs := &racingStore{}
	h := newHarness(t, harnessOpts{store: rs})
	rs.Store = h.store
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, c, signed(t, priv, v))

	rs.race = func() {
		r, rev, err := h.store.Release(t.Context(), v)
		if err != nil {
			t.Error(err)
			return
		}
		r.Rollout = rollout.Rollout{State: rollout.Rolling, Percent: 50}
		if _, err := h.store.PutRelease(t.Context(), r, rev, store.AuditEntry{Actor: "other", Action: "rollout-set", Target: v}, nil); err != nil {
			t.Error(err)
		}
	}
	_, err := c.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: v, Percent: 10})
	wantCode(t, "SetRollout that lost the race", err, codes.Aborted)
	if !strings.Contains(status.Convert(err).Message(), "retry") {
		t.Errorf("Aborted message %q does not say to retry", status.Convert(err).Message())
	}
	r, _, _ := h.store.Release(t.Context(), v)
	if r.Rollout.Percent != 50 {
		t.Errorf("percent after the lost race = %d, want the winner's 50", r.Rollout.Percent)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	for _, v := range []string{"202604.01.10", "202604.01.9", "202603.15.1"} {
		publish(t, c, signed(t, priv, v))
	}
	r, err := c.SetRollout(t.Context(), &adminv1.SetRolloutRequest{Version: "202604.01.9", Percent: 40})
	if err != nil {
		t.Fatal(err)
	}
	h.reload(t)

	st, err := c.Status(t.Context(), &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, rel := range st.GetReleases() {
		versions = append(versions, rel.GetVersion())
		if rel.GetVersion() == "202604.01.9" && (rel.GetRevision() != r.GetRelease().GetRevision() || rel.GetRollout().GetPercent() != 40) {
			t.Errorf("status of 202604.01.9 = %v, want revision %d at 40%%", rel, r.GetRelease().GetRevision())
		}
	}
	if want := []string{"202603.15.1", "202604.01.9", "202604.01.10"}; !cmp.Equal(versions, want) {
		t.Errorf("status versions = %v, want %v", versions, want)
	}
	var counts []string
	for _, oc := range st.GetRequests() {
		counts = append(counts, oc.GetOutcome()+"="+strconv.Itoa(int(oc.GetCount())))
	}
	if want := []string{"not-found=2", "served=7"}; !cmp.Equal(counts, want) {
		t.Errorf("status counts = %v, want %v", counts, want)
	}
	_, storeRev, _ := h.store.Releases(t.Context())
	if st.GetRegion() != "eastus" || st.GetSnapshotRevision() != storeRev || st.GetSnapshotTime() == nil {
		t.Errorf("status region %q snapshot %d at %v, want eastus, %d, a time", st.GetRegion(), st.GetSnapshotRevision(), st.GetSnapshotTime(), storeRev)
	}
}

func TestExplainRuleByRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	for _, v := range []string{"202604.01.2", "202604.01.3", "202604.01.4", "202604.01.5", "202604.01.6", "202605.01.1"} {
		publish(t, c, signed(t, priv, v))
	}
	steps := []struct {
		v    string
		do   func(v string) error
		note string
	}{
		{"202604.01.2", func(v string) error { return setPct(ctx, c, v, 100, []string{subA}, nil) }, "chosen"},
		{"202604.01.3", func(v string) error { return setPct(ctx, c, v, 0, nil, nil) }, "0%: never included"},
		{"202604.01.4", func(v string) error {
			if err := setPct(ctx, c, v, 100, nil, nil); err != nil {
				return err
			}
			_, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_HALT})
			return err
		}, "halted"},
		{"202604.01.5", func(v string) error { return setPct(ctx, c, v, 100, []string{subB}, nil) }, "other subscription"},
		{"202604.01.6", func(v string) error { return setPct(ctx, c, v, 100, nil, []string{"westus"}) }, "other region"},
		{"202605.01.1", func(v string) error {
			_, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: v})
			return err
		}, "revoked"},
	}
	for _, s := range steps {
		if err := s.do(s.v); err != nil {
			t.Fatalf("set up %s (%s): %v", s.v, s.note, err)
		}
	}
	h.reload(t)

	type rule struct {
		Rule   string
		Passed bool
	}
	type decision struct {
		Version          string
		Included, Chosen bool
		Rules            []rule
	}
	explain := func(region string) ([]decision, hotfix.Pointer) {
		t.Helper()
		resp, err := c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: strings.ToUpper(subA), Region: region})
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		var out []decision
		for _, d := range resp.GetDecisions() {
			dd := decision{Version: d.GetVersion(), Included: d.GetIncluded(), Chosen: d.GetChosen()}
			for _, r := range d.GetRules() {
				if r.GetDetail() == "" {
					t.Errorf("%s rule %s has no detail", d.GetVersion(), r.GetRule())
				}
				dd.Rules = append(dd.Rules, rule{r.GetRule(), r.GetPassed()})
			}
			out = append(out, dd)
		}
		p, err := hotfix.ParsePointer([]byte(resp.GetPointerJson()))
		if err != nil {
			t.Fatalf("Explain pointer %q: %v", resp.GetPointerJson(), err)
		}
		return out, p
	}
	pass := func(names ...string) []rule {
		var rs []rule
		for _, n := range names {
			rs = append(rs, rule{n, true})
		}
		return rs
	}
	fail := func(rs []rule, name string) []rule { return append(rs, rule{name, false}) }
	all := pass("not-revoked", "not-expired", "state-serving", "subscription-in-scope", "region-in-scope", "percentage")

	got, ptr := explain("")
	want := []decision{
		{"202604.01.2", true, true, all},
		{"202604.01.3", false, false, fail(pass("not-revoked", "not-expired", "state-serving", "subscription-in-scope", "region-in-scope"), "percentage")},
		{"202604.01.4", false, false, fail(pass("not-revoked", "not-expired"), "state-serving")},
		{"202604.01.5", false, false, fail(pass("not-revoked", "not-expired", "state-serving"), "subscription-in-scope")},
		{"202604.01.6", false, false, fail(pass("not-revoked", "not-expired", "state-serving", "subscription-in-scope"), "region-in-scope")},
		{"202605.01.1", false, false, fail(nil, "not-revoked")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Explain in the instance region (-want +got):\n%s", diff)
	}
	// 202605.01 has only a revoked release: its tombstone is served.
	if !cmp.Equal(ptr.Hotfixes, map[string]string{"202604.01": "202604.01.2", "202605.01": "202605.01.0"}) || !cmp.Equal(ptr.Revoked, []string{"202605.01.1"}) || len(ptr.Releases) != 1 {
		t.Errorf("Explain pointer = hotfixes %v revoked %v with %d releases, want 202604.01.2 and the 202605.01 tombstone, [202605.01.1], 1", ptr.Hotfixes, ptr.Revoked, len(ptr.Releases))
	}

	got, ptr = explain("WestUS")
	want[4] = decision{"202604.01.6", true, true, all}
	want[0].Chosen = false
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Explain in region westus (-want +got):\n%s", diff)
	}
	if ptr.Hotfixes["202604.01"] != "202604.01.6" {
		t.Errorf("Explain in westus serves %v, want 202604.01.6", ptr.Hotfixes)
	}

	_, err := c.Explain(ctx, &adminv1.ExplainRequest{SubscriptionId: subA})
	wantCode(t, "explain without vm_id", err, codes.InvalidArgument)
}

func setPct(ctx context.Context, c adminv1.AdminServiceClient, v string, pct int32, subs, regions []string) error {
	_, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{
		Version: v, Percent: pct,
		Subscriptions: subs, SetSubscriptions: subs != nil,
		Regions: regions, SetRegions: regions != nil,
		AllowUnseen: true, // these tests have no nodes
	})
	return err
}

func TestExplainWithoutSnapshot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{noSnapshot: true})
	_, err := h.ops(t).Explain(t.Context(), &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: subA})
	wantCode(t, "explain without a snapshot", err, codes.Unavailable)
}

func TestHandlersFailClosedWithoutInterceptor(t *testing.T) {
	t.Parallel()
	s := New(Config{Store: memstore.New()})
	ctx := t.Context()
	calls := map[string]func() error{
		"PublishRelease": func() error { _, err := s.PublishRelease(ctx, &adminv1.PublishReleaseRequest{}); return err },
		"SetRollout": func() error {
			_, err := s.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: "202604.01.1"})
			return err
		},
		"Transition": func() error {
			_, err := s.Transition(ctx, &adminv1.TransitionRequest{Version: "202604.01.1", Action: adminv1.Action_ACTION_HALT})
			return err
		},
		"SetPlan": func() error {
			_, err := s.SetPlan(ctx, &adminv1.SetPlanRequest{Version: "202604.01.1"})
			return err
		},
		"Revoke": func() error { _, err := s.Revoke(ctx, &adminv1.RevokeRequest{Version: "202604.01.1"}); return err },
		"SkipStep": func() error {
			_, err := s.SkipStep(ctx, &adminv1.SkipStepRequest{Version: "202604.01.1", Reason: "r"})
			return err
		},
		"Status": func() error { _, err := s.Status(ctx, &adminv1.StatusRequest{}); return err },
		"Explain": func() error {
			_, err := s.Explain(ctx, &adminv1.ExplainRequest{VmId: "x", SubscriptionId: "y"})
			return err
		},
		"ListAudit": func() error { _, err := s.ListAudit(ctx, &adminv1.ListAuditRequest{}); return err },
		"ListNodes": func() error { _, err := s.ListNodes(ctx, &adminv1.ListNodesRequest{}); return err },
		"GetHistory": func() error {
			_, err := s.GetHistory(ctx, &adminv1.GetHistoryRequest{Version: "202604.01.3"})
			return err
		},
		"PublishComponentConfig": func() error {
			_, err := s.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{})
			return err
		},
		"PublishKeySet": func() error {
			_, err := s.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: "{}", Reason: "r"})
			return err
		},
		"ListKeySets": func() error { _, err := s.ListKeySets(ctx, &adminv1.ListKeySetsRequest{}); return err },
		"GetLog":      func() error { _, err := s.GetLog(ctx, &adminv1.GetLogRequest{}); return err },
		"SetFreeze": func() error {
			_, err := s.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: true, Reason: "r"})
			return err
		},
		"RestoreLog": func() error {
			_, err := s.RestoreLog(ctx, &adminv1.RestoreLogRequest{Records: [][]byte{[]byte("r")}, Reason: "r"})
			return err
		},
	}
	for _, m := range adminv1.AdminService_ServiceDesc.Methods {
		call, ok := calls[m.MethodName]
		if !ok {
			t.Errorf("method %s is not covered", m.MethodName)
			continue
		}
		wantCode(t, m.MethodName+" without an actor", call(), codes.Unauthenticated)
	}
}

// TestSetPlan: a plan starts the release at its first step; Status shows
// the plan, the health verdict on the counted reports and when the next
// step is due; bad plans are InvalidArgument.
func TestSetPlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.4"
	publish(t, c, signed(t, priv, v))
	plan := &adminv1.Plan{
		Steps:  []*adminv1.PlanStep{{Percent: 1, BakeSeconds: 1800, MinReports: 20}, {Percent: 100, BakeSeconds: 3600, MinReports: 100}},
		Margin: 0.05, MaxFailureRate: 0.2,
	}
	r, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	ro := r.GetRelease().GetRollout()
	if ro.GetState() != "rolling" || ro.GetPercent() != 1 || ro.GetPlan().GetStep() != 0 || len(ro.GetPlan().GetSteps()) != 2 {
		t.Errorf("SetPlan = %v, want rolling at the first step's 1%%", ro)
	}
	st, err := c.Status(t.Context(), &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hl := st.GetReleases()[0].GetRollout().GetHealth()
	if hl.GetVerdict() != "insufficient" || hl.GetNextDue() == nil {
		t.Errorf("health = %v, want insufficient with a due time", hl)
	}
	h.reload(t)
	ex, err := c.Explain(t.Context(), &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: subA})
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, d := range ex.GetDecisions() {
		for _, r := range d.GetRules() {
			rules = append(rules, r.GetRule())
		}
	}
	if !slices.Contains(rules, "plan") || !slices.Contains(rules, "health") {
		t.Errorf("explain rules = %v, want the plan and the health rule", rules)
	}
	for name, bad := range map[string]*adminv1.Plan{
		"none":       nil,
		"shrinking":  {Steps: []*adminv1.PlanStep{{Percent: 50, MinReports: 1}, {Percent: 10, MinReports: 1}}, MaxFailureRate: 0.2},
		"no-reports": {Steps: []*adminv1.PlanStep{{Percent: 50}}, MaxFailureRate: 0.2},
		"ceiling-0":  {Steps: []*adminv1.PlanStep{{Percent: 50, MinReports: 1}}},
		"over-100":   {Steps: []*adminv1.PlanStep{{Percent: 101, MinReports: 1}}, MaxFailureRate: 0.2},
		"nan-margin": {Steps: []*adminv1.PlanStep{{Percent: 50, MinReports: 1}}, MaxFailureRate: 0.2, Margin: math.NaN()},
	} {
		_, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: bad})
		wantCode(t, "plan "+name, err, codes.InvalidArgument)
	}
}

// TestPlanDetail: explain's plan line says what moves a planned release
// next, which for a stopped one is an operator, not a due time.
func TestPlanDetail(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	p := rollout.Plan{Steps: []rollout.PlanStep{{Percent: 5, Bake: time.Hour, MinReports: 20}, {Percent: 100, MinReports: 50}}, StepSince: since}
	r := rollout.Release{Version: "202604.01.4", Rollout: rollout.Rollout{State: rollout.Rolling, Percent: 5, Plan: &p}}
	for _, tt := range []struct {
		state   rollout.State
		revoked bool
		want    string
	}{
		{rollout.Rolling, false, "step 1/2 at 5%; the next is due 2026-12-01T10:00:00Z once 20 reports are in"},
		{rollout.Halted, false, "step 1/2 at 5%; halted: the plan waits until an operator resumes it"},
		{rollout.Paused, false, "step 1/2 at 5%; paused: the plan waits until an operator resumes it"},
		{rollout.Rolling, true, "step 1/2 at 5%; revoked: the plan no longer runs"},
		{rollout.Complete, false, "step 1/2 at 5%; complete"},
	} {
		r.Rollout.State, r.Revoked = tt.state, tt.revoked
		if got := planDetail(r, autopilot.Window{}); got != tt.want {
			t.Errorf("%s revoked=%v: %q, want %q", tt.state, tt.revoked, got, tt.want)
		}
	}
	w, err := autopilot.ParseWindow("Mon-Fri 09:00-17:00 Europe/Dublin")
	if err != nil {
		t.Fatal(err)
	}
	r.Rollout.State, r.Revoked = rollout.Rolling, false
	if got, want := planDetail(r, w), "once 20 reports are in, and advances only Mon-Fri 09:00-17:00 Europe/Dublin (lpsd --advance-window)"; !strings.HasSuffix(got, want) {
		t.Errorf("under an advance window: %q, want it to end %q", got, want)
	}
}

// TestResumeRestartsPlanBake: resuming a planned release over the API
// starts its step's bake afresh, so days spent paused do not make the step
// due at once.
func TestResumeRestartsPlanBake(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.5"
	publish(t, c, signed(t, priv, v))
	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{{Percent: 5, BakeSeconds: 3600, MinReports: 20}, {Percent: 100, MinReports: 50}}, MaxFailureRate: 0.2}
	if _, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan}); err != nil {
		t.Fatal(err)
	}
	// Paused two days ago, in the middle of its canary.
	r, rev, err := h.store.Release(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	r.Rollout.State = rollout.Paused
	r.Rollout.Plan.StepSince = testNow.Add(-48 * time.Hour)
	if _, err := h.store.PutRelease(t.Context(), r, rev, store.AuditEntry{Time: testNow, Actor: "test", Action: "pause", Target: v}, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Transition(t.Context(), &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_RESUME})
	if err != nil {
		t.Fatal(err)
	}
	ro := resp.GetRelease().GetRollout()
	if ro.GetState() != "rolling" || !ro.GetPlan().GetStepSince().AsTime().Equal(testNow) {
		t.Errorf("resumed: %s, step since %v; want rolling with the bake restarted at %v", ro.GetState(), ro.GetPlan().GetStepSince().AsTime(), testNow)
	}
}

// TestReaderRole: a reader token or a certificate of the reader unit sees
// status, explain and the audit log, and is refused every change with
// PermissionDenied saying what it may do; an operator still changes.
func TestReaderRole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for name, c := range map[string]cred{"token": {token: "Bearer " + readerToken}, "certificate": {cert: &h.pki.bob}} {
		cl := h.client(t, c)
		if _, err := cl.Status(t.Context(), &adminv1.StatusRequest{}); err != nil {
			t.Errorf("%s reader: Status = %v", name, err)
		}
		if _, err := cl.ListAudit(t.Context(), &adminv1.ListAuditRequest{}); err != nil {
			t.Errorf("%s reader: ListAudit = %v", name, err)
		}
		_, err := cl.Revoke(t.Context(), &adminv1.RevokeRequest{Version: "202604.01.1"})
		wantCode(t, name+" reader revoking", err, codes.PermissionDenied)
		if !strings.Contains(status.Convert(err).Message(), "reader role") {
			t.Errorf("%s reader: refusal %q does not say why", name, status.Convert(err).Message())
		}
	}
	_, err := h.client(t, cred{token: "Bearer " + opsToken}).Revoke(t.Context(), &adminv1.RevokeRequest{Version: "202604.01.1"})
	if status.Code(err) == codes.PermissionDenied {
		t.Errorf("an operator token was refused a change: %v", err)
	}
}

// TestScopeChangesWithoutDeadEnds: a paused release changes scope at its
// percentage, a complete one at 100% without a halt; a halted one is sent
// to resume, which works, and every refusal names a command that works.
func TestScopeChangesWithoutDeadEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, c, signed(t, priv, v))
	scope := func(req *adminv1.SetRolloutRequest) (*adminv1.Rollout, error) {
		req.Version, req.AllowUnseen = v, true
		resp, err := c.SetRollout(ctx, req)
		return resp.GetRelease().GetRollout(), err
	}
	move := func(a adminv1.Action) {
		t.Helper()
		if _, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: a}); err != nil {
			t.Fatalf("Transition(%v): %v", a, err)
		}
	}
	refused := func(what string, err error, suggests string) {
		t.Helper()
		wantCode(t, what, err, codes.FailedPrecondition)
		if msg := status.Convert(err).Message(); !strings.Contains(msg, suggests) {
			t.Errorf("%s: %q does not suggest %q", what, msg, suggests)
		}
	}

	if _, err := scope(&adminv1.SetRolloutRequest{Percent: 10, Subscriptions: []string{subA}, SetSubscriptions: true}); err != nil {
		t.Fatal(err)
	}
	move(adminv1.Action_ACTION_PAUSE)
	ro, err := scope(&adminv1.SetRolloutRequest{KeepPercent: true, Subscriptions: []string{subA, subB}, SetSubscriptions: true})
	if err != nil || ro.GetState() != "paused" || ro.GetPercent() != 10 || len(ro.GetSubscriptions()) != 2 {
		t.Errorf("scope of a paused release = %v, %v; want paused at 10%% for two subscriptions", ro, err)
	}
	_, err = scope(&adminv1.SetRolloutRequest{Percent: 20})
	refused("grow a paused release", err, "`lpsctl rollout resume "+v+"`")
	again, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, KeepPercent: true, Subscriptions: []string{subB, subA}, SetSubscriptions: true, AllowUnseen: true})
	if err != nil || !again.GetUnchanged() {
		t.Errorf("the same scope again = %v, %v; want unchanged", again, err)
	}

	move(adminv1.Action_ACTION_COMPLETE)
	ro, err = scope(&adminv1.SetRolloutRequest{KeepPercent: true, SetSubscriptions: true, Regions: []string{"WestEurope2"}, SetRegions: true})
	if err != nil || ro.GetState() != "complete" || ro.GetPercent() != 100 || len(ro.GetSubscriptions()) != 0 || !cmp.Equal(ro.GetRegions(), []string{"westeurope2"}) {
		t.Errorf("widen a complete release = %v, %v; want complete at 100%%, every subscription, westeurope2", ro, err)
	}
	_, err = c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_RESUME})
	refused("resume a complete release", err, "`lpsctl rollout halt "+v+"`")
	if strings.Contains(status.Convert(err).Message(), "rollout resume") {
		t.Errorf("a complete release is told to resume: %v", err)
	}

	move(adminv1.Action_ACTION_HALT)
	// Narrowing a halted release before its resume: it serves nobody
	// meanwhile, and the resume then serves only the narrowed scope.
	if ro, err = scope(&adminv1.SetRolloutRequest{KeepPercent: true, Subscriptions: []string{subA}, SetSubscriptions: true}); err != nil || ro.GetState() != "halted" || !cmp.Equal(ro.GetSubscriptions(), []string{subA}) {
		t.Errorf("narrow a halted release = %v, %v; want halted, scoped to %s", ro, err, subA)
	}
	_, err = c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE})
	refused("complete a halted release", err, "`lpsctl rollout resume "+v+"`")
	move(adminv1.Action_ACTION_RESUME) // the suggestion works: complete again, as before the halt
	if ro, err = scope(&adminv1.SetRolloutRequest{KeepPercent: true, Subscriptions: []string{subA}, SetSubscriptions: true}); err != nil || ro.GetState() != "complete" || ro.GetPercent() != 100 {
		t.Errorf("scope after the resume = %v, %v; want it complete at 100%%", ro, err)
	}
}

func TestScopeValuesValidated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, c, signed(t, priv, v))
	for _, tt := range []struct {
		name          string
		subs, regions []string
		names         string
	}{
		{"curly-quote", []string{"\u201d"}, nil, "\"\u201d\""},
		{"not-a-guid", []string{subA, "sub-a"}, nil, `"sub-a"`},
		{"escape", []string{"\x1b[31m"}, nil, `"\x1b[31m"`},
		{"region", nil, []string{"east-us"}, `"east-us"`},
	} {
		_, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 10,
			Subscriptions: tt.subs, SetSubscriptions: tt.subs != nil, Regions: tt.regions, SetRegions: tt.regions != nil})
		wantCode(t, tt.name, err, codes.InvalidArgument)
		if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.names) {
			t.Errorf("%s: %q does not name %s", tt.name, msg, tt.names)
		}
	}
	if r, _, _ := h.store.Release(ctx, v); r.Rollout.State != rollout.Draft {
		t.Errorf("a refused scope changed the release: %+v", r.Rollout)
	}
	// What the manual's "--subscriptions ''" sends: all subscriptions.
	resp, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 10,
		Subscriptions: []string{""}, SetSubscriptions: true, Regions: []string{"EastUS"}, SetRegions: true})
	if err != nil || len(resp.GetRelease().GetRollout().GetSubscriptions()) != 0 || !cmp.Equal(resp.GetRelease().GetRollout().GetRegions(), []string{"eastus"}) {
		t.Errorf("an empty subscription list = %v, %v; want every subscription", resp.GetRelease().GetRollout(), err)
	}

	h.reload(t)
	_, err = c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: "sub-a"})
	wantCode(t, "explain a subscription that is no GUID", err, codes.InvalidArgument)
	if _, err := c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: strings.ToUpper(subB)}); err != nil {
		t.Errorf("explain with an upper-case GUID: %v", err)
	}
}

// TestExpiryVisibleAndEnforced: every Release the API returns carries the
// envelope's not_after, records stored without it included; once it
// passes, explain fails not-expired and the release leaves the pointer.
func TestExpiryVisibleAndEnforced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v, old = "202604.01.3", "202604.01.2"
	notAfter := testNow.Add(time.Hour)
	wantNotAfter := func(what string, r *adminv1.Release, want time.Time) {
		t.Helper()
		if r.GetNotAfter() == nil || !r.GetNotAfter().AsTime().Equal(want) {
			t.Errorf("%s: not_after = %v, want %v", what, r.GetNotAfter(), want)
		}
	}
	wantNotAfter("PublishRelease", publish(t, c, signedUntil(t, priv, v, notAfter)), notAfter)
	set, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 100})
	if err != nil {
		t.Fatal(err)
	}
	wantNotAfter("SetRollout", set.GetRelease(), notAfter)
	tr, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_COMPLETE})
	if err != nil {
		t.Fatal(err)
	}
	wantNotAfter("Transition", tr.GetRelease(), notAfter)

	// A record stored before releases carried their expiry.
	oldNotAfter := testNow.Add(48 * time.Hour)
	rec := rollout.Release{Version: old, Base: "202604.01", Envelope: json.RawMessage(signedUntil(t, priv, old, oldNotAfter)),
		Rollout: rollout.Rollout{State: rollout.Complete, Percent: 100}, PublishedAt: testNow, UpdatedAt: testNow}
	if _, err := h.store.PutRelease(ctx, rec, 0, store.AuditEntry{Time: testNow, Actor: "test", Action: ActionPublish, Target: old}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, &adminv1.StatusRequest{})
	if err != nil || len(st.GetReleases()) != 2 {
		t.Fatalf("Status = %v, %v", st, err)
	}
	wantNotAfter("Status of a record without it", st.GetReleases()[0], oldNotAfter)
	wantNotAfter("Status", st.GetReleases()[1], notAfter)

	explain := func() (map[string][]*adminv1.Rule, string) {
		t.Helper()
		h.reload(t)
		resp, err := c.Explain(ctx, &adminv1.ExplainRequest{VmId: "vm-1", SubscriptionId: subA})
		if err != nil {
			t.Fatal(err)
		}
		rules := make(map[string][]*adminv1.Rule)
		for _, d := range resp.GetDecisions() {
			rules[d.GetVersion()] = d.GetRules()
		}
		return rules, resp.GetPointerJson()
	}
	rules, ptr := explain()
	if r := rules[v]; len(r) < 2 || r[1].GetRule() != "not-expired" || !r[1].GetPassed() || !strings.Contains(ptr, `"`+v+`"`) {
		t.Errorf("before expiry: rules %v, pointer %s; want not-expired passed and %s served", r, ptr, v)
	}
	h.ahead.Store(int64(2 * time.Hour))
	rules, ptr = explain()
	if r := rules[v]; len(r) != 2 || r[1].GetRule() != "not-expired" || r[1].GetPassed() || !strings.Contains(r[1].GetDetail(), notAfter.Format(time.RFC3339)) {
		t.Errorf("after expiry: rules %v; want not-expired failed, naming %v", r, notAfter)
	}
	if strings.Contains(ptr, v) || !strings.Contains(ptr, `"`+old+`"`) {
		t.Errorf("after expiry the pointer is %s, want %s gone and %s served", ptr, v, old)
	}
	st, err = c.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r := st.GetReleases()[1]; r.GetRollout().GetState() != "complete" || !r.GetNotAfter().AsTime().Before(testNow.Add(2*time.Hour)) {
		t.Errorf("Status after expiry = %v; want complete with the past not_after that shows it expired", r)
	}
	rv, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: v})
	if err != nil {
		t.Fatal(err)
	}
	wantNotAfter("Revoke", rv.GetRelease(), notAfter)
	// An envelope expired by the server's clock is refused at publish.
	_, err = c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: signedUntil(t, priv, "202604.01.4", testNow.Add(time.Hour))})
	wantCode(t, "publish an expired envelope", err, codes.InvalidArgument)
}

func TestAuditReasons(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.3"
	if _, err := c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: signed(t, priv, v), Reason: "publish: INC-1"}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(reason string) error{
		"rollout-set": func(reason string) error {
			_, err := c.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: v, Percent: 10, Reason: reason})
			return err
		},
		"plan": func(reason string) error {
			_, err := c.SetPlan(ctx, &adminv1.SetPlanRequest{Version: v, Reason: reason, Plan: &adminv1.Plan{
				Steps: []*adminv1.PlanStep{{Percent: 50, BakeSeconds: 60, MinReports: 1}}, MaxFailureRate: 0.5}})
			return err
		},
		"pause": func(reason string) error {
			_, err := c.Transition(ctx, &adminv1.TransitionRequest{Version: v, Action: adminv1.Action_ACTION_PAUSE, Reason: reason})
			return err
		},
		"revoke": func(reason string) error {
			_, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: v, Reason: reason})
			return err
		},
	}
	order := []string{"rollout-set", "plan", "pause", "revoke"}
	bad := map[string]string{
		"too-long": strings.Repeat("x", MaxReasonBytes+1),
		"newline":  "line one\nline two",
		"escape":   "ok \x1b[2J",
		"bidi":     "ok \u202e",
	}
	// Protobuf refuses to marshal invalid UTF-8, so no client can send it;
	// the server's check stands behind that.
	wantCode(t, "checkReason of invalid UTF-8", checkReason("ok \xff"), codes.InvalidArgument)
	for _, action := range order {
		for name, reason := range bad {
			wantCode(t, action+" with a reason "+name, calls[action](reason), codes.InvalidArgument)
		}
		if err := calls[action](action + ": «why» — " + strings.Repeat("é", 100)); err != nil {
			t.Fatalf("%s: %v", action, err)
		}
	}
	_, err := c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: signed(t, priv, "202604.01.4"), Reason: bad["escape"]})
	wantCode(t, "publish with a bad reason", err, codes.InvalidArgument)
	if _, err := c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: signed(t, priv, "202604.01.5"), Reason: strings.Repeat("x", MaxReasonBytes)}); err != nil {
		t.Errorf("publish with a reason of %d bytes: %v", MaxReasonBytes, err)
	}

	resp, err := c.ListAudit(ctx, &adminv1.ListAuditRequest{Target: v})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range resp.GetEntries() {
		got = append(got, e.GetAction()+"="+e.GetReason())
	}
	want := []string{"publish=publish: INC-1"}
	for _, a := range order {
		want = append(want, a+"="+a+": «why» — "+strings.Repeat("é", 100))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit reasons (-want +got):\n%s", diff)
	}
}

func TestListAuditFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ops := h.ops(t)
	alice := h.client(t, cred{cert: &h.pki.alice})
	ctx := t.Context()
	_, priv := newKey(t)
	const a, b = "202604.01.3", "202604.01.4"
	publish(t, ops, signed(t, priv, a))                         // 1
	publish(t, alice, signed(t, priv, b))                       // 2
	h.ahead.Store(int64(time.Hour))                             // later entries an hour on
	if err := setPct(ctx, alice, a, 10, nil, nil); err != nil { // 3
		t.Fatal(err)
	}
	if err := setPct(ctx, ops, b, 10, nil, nil); err != nil { // 4
		t.Fatal(err)
	}
	if err := setPct(ctx, alice, b, 20, nil, nil); err != nil { // 5
		t.Fatal(err)
	}
	seqs := func(req *adminv1.ListAuditRequest) ([]int64, int64, bool) {
		t.Helper()
		resp, err := ops.ListAudit(ctx, req)
		if err != nil {
			t.Fatalf("ListAudit(%v): %v", req, err)
		}
		var out []int64
		for _, e := range resp.GetEntries() {
			out = append(out, e.GetSeq())
		}
		return out, resp.GetNextAfterSeq(), resp.GetMore()
	}
	later := timestamppb.New(testNow.Add(time.Hour))
	tests := []struct {
		name string
		req  *adminv1.ListAuditRequest
		want []int64
		next int64
		more bool
	}{
		{"all", &adminv1.ListAuditRequest{}, []int64{1, 2, 3, 4, 5}, 5, false},
		{"target", &adminv1.ListAuditRequest{Target: b}, []int64{2, 4, 5}, 5, false},
		{"actor", &adminv1.ListAuditRequest{Actor: "cert:alice"}, []int64{2, 3, 5}, 5, false},
		{"since", &adminv1.ListAuditRequest{Since: later}, []int64{3, 4, 5}, 5, false},
		{"all-three", &adminv1.ListAuditRequest{Target: b, Actor: "cert:alice", Since: later}, []int64{5}, 5, false},
		{"action", &adminv1.ListAuditRequest{Action: ActionPublish}, []int64{1, 2}, 5, false},
		{"action-actor", &adminv1.ListAuditRequest{Action: ActionRolloutSet, Actor: "cert:alice"}, []int64{3, 5}, 5, false},
		{"action-none", &adminv1.ListAuditRequest{Action: autopilot.ActionHalt}, nil, 5, false},
		{"limit", &adminv1.ListAuditRequest{Target: b, Limit: 2}, []int64{2, 4}, 4, true},
		{"after", &adminv1.ListAuditRequest{Target: b, AfterSeq: 4}, []int64{5}, 5, false},
		{"none", &adminv1.ListAuditRequest{Actor: "token:nobody"}, nil, 5, false},
		{"past-the-end", &adminv1.ListAuditRequest{AfterSeq: 9}, nil, 9, false},
	}
	for _, tt := range tests {
		got, next, more := seqs(tt.req)
		if !cmp.Equal(got, tt.want) || next != tt.next || more != tt.more {
			t.Errorf("%s: seqs %v next_after_seq %d more %v, want %v %d %v", tt.name, got, next, more, tt.want, tt.next, tt.more)
		}
	}
	_, err := ops.ListAudit(ctx, &adminv1.ListAuditRequest{Since: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}})
	wantCode(t, "invalid since", err, codes.InvalidArgument)
	_, err = ops.ListAudit(ctx, &adminv1.ListAuditRequest{Action: "rollout"})
	wantCode(t, "unknown action", err, codes.InvalidArgument)
}

// TestListAuditScanIsBounded: a filter that matches nothing in a long log
// examines at most maxAuditScan entries per call, and says where to go on.
func TestListAuditScanIsBounded(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: memstore.New()}
	t.Cleanup(func() { st.Close() })
	h := newHarness(t, harnessOpts{store: st})
	ctx := t.Context()
	r := rollout.Release{Version: "202604.01.1", Base: "202604.01", Envelope: json.RawMessage(`{}`), Rollout: rollout.Rollout{State: rollout.Draft}}
	rev := int64(0)
	for i := range maxAuditScan + 5 {
		actor := "token:bulk"
		if i == maxAuditScan+2 {
			actor = "token:needle"
		}
		var err error
		r.UpdatedAt = testNow.Add(time.Duration(i))
		if rev, err = st.PutRelease(ctx, r, rev, store.AuditEntry{Time: testNow, Actor: actor, Action: ActionRolloutSet, Target: r.Version}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := h.ops(t)
	resp, err := c.ListAudit(ctx, &adminv1.ListAuditRequest{Actor: "token:needle"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEntries()) != 0 || !resp.GetMore() || resp.GetNextAfterSeq() != maxAuditScan || st.read.Load() != maxAuditScan {
		t.Errorf("first call: %d entries, more %v, next_after_seq %d, %d read; want none, more, %d, %d read",
			len(resp.GetEntries()), resp.GetMore(), resp.GetNextAfterSeq(), st.read.Load(), maxAuditScan, maxAuditScan)
	}
	resp, err = c.ListAudit(ctx, &adminv1.ListAuditRequest{Actor: "token:needle", AfterSeq: resp.GetNextAfterSeq()})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetSeq() != maxAuditScan+3 || resp.GetMore() || resp.GetNextAfterSeq() != maxAuditScan+5 {
		t.Errorf("second call: %v, more %v, next_after_seq %d; want the needle at %d and the end", resp.GetEntries(), resp.GetMore(), resp.GetNextAfterSeq(), maxAuditScan+3)
	}
}

// countingStore counts the audit entries read from it.
type countingStore struct {
	*memstore.Store
	read atomic.Int64
}

func (s *countingStore) Audit(ctx context.Context, after int64, limit int) ([]store.AuditEntry, error) {
	es, err := s.Store.Audit(ctx, after, limit)
	s.read.Add(int64(len(es)))
	return es, err
}

// auditActions returns the actions of v's audit entries, oldest first.
func auditActions(t *testing.T, c adminv1.AdminServiceClient, v string) []string {
	t.Helper()
	resp, err := c.ListAudit(t.Context(), &adminv1.ListAuditRequest{Target: v})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range resp.GetEntries() {
		out = append(out, e.GetAction())
	}
	return out
}

// TestPlanSkipsNoStepUnasked: over the API, a plan whose canary a release
// is past is refused with what to send instead; a dry run answers by the
// same rules, with the preview, and writes nothing; from_step starts the
// plan where asked.
func TestPlanSkipsNoStepUnasked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v, prev = "202604.01.6", "202604.01.5"
	publish(t, c, signed(t, priv, prev))
	if _, err := c.Transition(t.Context(), &adminv1.TransitionRequest{Version: prev, Action: adminv1.Action_ACTION_COMPLETE}); err != nil {
		t.Fatal(err)
	}
	publish(t, c, signed(t, priv, v))
	if err := setPct(t.Context(), c, v, 5, nil, nil); err != nil {
		t.Fatal(err)
	}
	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{
		{Nodes: 20, BakeSeconds: 1800, MinReports: 20},
		{Percent: 10, BakeSeconds: 3600, MinReports: 100},
		{Percent: 100, BakeSeconds: 7200, MinReports: 500},
	}, Margin: 0.05, MaxFailureRate: 0.2}
	_, before, err := h.store.Release(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{false, true} {
		_, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan, DryRun: dry})
		wantCode(t, fmt.Sprintf("plan with a canary at 5%% (dry run %v)", dry), err, codes.FailedPrecondition)
		for _, want := range []string{"past step 1 of the plan (a canary of 20 nodes)", "--from-step 2", "from_step 2"} {
			if !strings.Contains(status.Convert(err).Message(), want) {
				t.Errorf("refusal %q does not say %q", status.Convert(err).Message(), want)
			}
		}
	}

	dry, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan, FromStep: 2, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	ro := dry.GetRelease().GetRollout()
	if !dry.GetDryRun() || ro.GetState() != "rolling" || ro.GetPercent() != 10 || ro.GetPlan().GetStep() != 1 || dry.GetRelease().GetRevision() != before {
		t.Errorf("dry run = %v, want what the plan would do: step index 1 at 10%%, at the current revision %d", dry, before)
	}
	pv := dry.GetPreview()
	want := []struct{ start, end time.Time }{{}, {testNow, testNow.Add(time.Hour)}, {testNow.Add(time.Hour), testNow.Add(3 * time.Hour)}}
	if len(pv.GetSteps()) != len(want) {
		t.Fatalf("preview steps = %v, want %d", pv.GetSteps(), len(want))
	}
	for i, w := range want {
		got := pv.GetSteps()[i]
		if (got.GetEarliestStart() == nil) != w.start.IsZero() || (!w.start.IsZero() && (!got.GetEarliestStart().AsTime().Equal(w.start) || !got.GetEarliestEnd().AsTime().Equal(w.end))) {
			t.Errorf("preview step %d = %v, want %v to %v (none for the skipped canary)", i, got, w.start, w.end)
		}
	}
	if !pv.GetEarliestComplete().AsTime().Equal(testNow.Add(3*time.Hour)) || pv.GetBaseline().GetFloor() != 20 ||
		pv.GetBaseline().GetMaxFailureRate() != 0.2 || pv.GetBaseline().GetMargin() != 0.05 || !strings.Contains(pv.GetBaseline().GetComparedWith(), "incumbent of base 202604.01") {
		t.Errorf("preview = %v, want completion 3h on, floor 20, the plan's ceiling and margin against the base's incumbent", pv)
	}
	if b := pv.GetBaseline(); b.GetIncumbent() != prev || !strings.Contains(b.GetComparedWith(), prev+", its previous complete hotfix") || b.GetMaxSilentRate() != rollout.DefaultMaxRate {
		t.Errorf("baseline = %v, want the incumbent %s, named, and the default silent ceiling", b, prev)
	}
	if d := pv.GetSteps()[1].GetDeadline(); d == nil || !d.AsTime().Equal(testNow.Add(time.Hour+rollout.DefaultDeadline)) {
		t.Errorf("step 2's deadline = %v, want its bake's end plus the default deadline", d)
	}
	if r, rev, _ := h.store.Release(t.Context(), v); rev != before || r.Rollout.Plan != nil || r.Rollout.Percent != 5 {
		t.Errorf("a dry run changed the record: revision %d (was %d), %+v", rev, before, r.Rollout)
	}
	if got := auditActions(t, c, v); slices.Contains(got, ActionPlan) {
		t.Errorf("a dry run or a refusal was audited: %v", got)
	}

	_, err = c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan, FromStep: 4})
	wantCode(t, "from_step past the plan", err, codes.InvalidArgument)
	_, err = c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan, FromStep: 2, IfRevision: before + 5})
	wantCode(t, "plan at a stale revision", err, codes.Aborted)

	r, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan, FromStep: 2, IfRevision: before, Reason: "canary ran by hand"})
	if err != nil {
		t.Fatal(err)
	}
	if ro := r.GetRelease().GetRollout(); r.GetDryRun() || ro.GetPercent() != 10 || ro.GetPlan().GetStep() != 1 || r.GetPreview() == nil {
		t.Errorf("SetPlan from step 2 = %v, want step index 1 at 10%% with its preview", r)
	}
	if got := auditActions(t, c, v); got[len(got)-1] != ActionPlan {
		t.Errorf("audit = %v, want the plan last", got)
	}
}

// TestSkipStep: skip moves a planned release to its next step, needs a
// reason, honours if_revision, is audited as skip, and is refused where
// there is no step to skip to.
func TestSkipStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v = "202604.01.7"
	publish(t, c, signed(t, priv, v))
	_, err := c.SkipStep(t.Context(), &adminv1.SkipStepRequest{Version: v, Reason: "no plan yet"})
	wantCode(t, "skip without a plan", err, codes.FailedPrecondition)
	plan := &adminv1.Plan{Steps: []*adminv1.PlanStep{{Nodes: 3, BakeSeconds: 1800, MinReports: 3}, {Percent: 100, BakeSeconds: 3600, MinReports: 10}}, MaxFailureRate: 0.2}
	pr, err := c.SetPlan(t.Context(), &adminv1.SetPlanRequest{Version: v, Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SkipStep(t.Context(), &adminv1.SkipStepRequest{Version: v})
	wantCode(t, "skip without a reason", err, codes.InvalidArgument)
	_, err = c.SkipStep(t.Context(), &adminv1.SkipStepRequest{Version: v, Reason: "r", IfRevision: pr.GetRelease().GetRevision() + 1})
	wantCode(t, "skip at a stale revision", err, codes.Aborted)
	_, err = h.client(t, cred{token: "Bearer " + readerToken}).SkipStep(t.Context(), &adminv1.SkipStepRequest{Version: v, Reason: "r"})
	wantCode(t, "a reader skipping", err, codes.PermissionDenied)

	h.ahead.Store(int64(10 * time.Minute))
	resp, err := c.SkipStep(t.Context(), &adminv1.SkipStepRequest{Version: v, Reason: "canary nodes provisioned by hand", IfRevision: pr.GetRelease().GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	ro := resp.GetRelease().GetRollout()
	if resp.GetSkippedStep() != 0 || ro.GetPlan().GetStep() != 1 || ro.GetPercent() != 100 || ro.GetState() != "rolling" ||
		!ro.GetPlan().GetStepSince().AsTime().Equal(testNow.Add(10*time.Minute)) {
		t.Errorf("SkipStep = %v, want step index 1 at 100%%, rolling, begun now", resp)
	}
	a, err := c.ListAudit(t.Context(), &adminv1.ListAuditRequest{Target: v, Action: ActionSkip})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.GetEntries()) != 1 || a.GetEntries()[0].GetReason() != "canary nodes provisioned by hand" ||
		!strings.Contains(rollout.DescribeChange(a.GetEntries()[0].GetBeforeJson(), a.GetEntries()[0].GetAfterJson()), "plan step 1/2→2/2") {
		t.Errorf("skip audit = %v, want one entry with the reason and the step change", a.GetEntries())
	}
	_, err = c.SkipStep(t.Context(), &adminv1.SkipStepRequest{Version: v, Reason: "again"})
	wantCode(t, "skip at the last step", err, codes.FailedPrecondition)
	if !strings.Contains(status.Convert(err).Message(), "lpsctl rollout complete "+v) {
		t.Errorf("refusal at the last step %q does not name rollout complete", status.Convert(err).Message())
	}
}

// TestResumeAfterHalt: resuming a halted release opens a fresh evidence
// window, shown in the record and the audit entry; a pause does not; a
// release halted while complete resumes to complete.
func TestResumeAfterHalt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.ops(t)
	_, priv := newKey(t)
	const v, done = "202604.01.8", "202604.01.9"
	publish(t, c, signed(t, priv, v))
	publish(t, c, signed(t, priv, done))
	if err := setPct(t.Context(), c, v, 10, nil, nil); err != nil {
		t.Fatal(err)
	}
	move := func(version string, a adminv1.Action) *adminv1.Release {
		t.Helper()
		resp, err := c.Transition(t.Context(), &adminv1.TransitionRequest{Version: version, Action: a, Reason: "test"})
		if err != nil {
			t.Fatalf("%s %v: %v", version, a, err)
		}
		return resp.GetRelease()
	}
	move(v, adminv1.Action_ACTION_PAUSE)
	if r := move(v, adminv1.Action_ACTION_RESUME); r.GetRollout().GetEvidenceSince() != nil {
		t.Errorf("resumed from paused: evidence since %v, want none", r.GetRollout().GetEvidenceSince())
	}
	if r := move(v, adminv1.Action_ACTION_HALT); r.GetRollout().GetHaltedFrom() != "rolling" {
		t.Errorf("halted: halted_from %q, want rolling", r.GetRollout().GetHaltedFrom())
	}
	// A failure reported before the halt counts until the resume.
	rep := store.Report{VMID: "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0", Boot: "b1", SubscriptionID: subA, Base: "202604.01", Agent: "hotfix",
		HotfixVersion: v, ExitCode: 1, Time: testNow.Add(30 * time.Minute)}
	if _, err := h.store.PutReports(t.Context(), []store.Report{rep}); err != nil {
		t.Fatal(err)
	}
	reported := func() uint64 {
		t.Helper()
		st, err := c.Status(t.Context(), &adminv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range st.GetReleases() {
			if r.GetVersion() == v {
				return r.GetCounts().GetFailed()
			}
		}
		t.Fatalf("status has no %s", v)
		return 0
	}
	if got := reported(); got != 1 {
		t.Fatalf("failed before the resume = %d, want the one report", got)
	}
	h.ahead.Store(int64(time.Hour))
	resumedAt := testNow.Add(time.Hour)
	r := move(v, adminv1.Action_ACTION_RESUME)
	if got := reported(); got != 0 {
		t.Errorf("failed after the resume = %d, want 0: the report came before the evidence window", got)
	}
	if r.GetRollout().GetState() != "rolling" || !r.GetRollout().GetEvidenceSince().AsTime().Equal(resumedAt) || r.GetRollout().GetHaltedFrom() != "" {
		t.Errorf("resumed from halted: %v, want rolling with evidence since %v", r.GetRollout(), resumedAt)
	}
	a, err := c.ListAudit(t.Context(), &adminv1.ListAuditRequest{Target: v, Action: ActionResume})
	if err != nil {
		t.Fatal(err)
	}
	last := a.GetEntries()[len(a.GetEntries())-1]
	var after rollout.Release
	if err := json.Unmarshal([]byte(last.GetAfterJson()), &after); err != nil || !after.Rollout.EvidenceSince.Equal(resumedAt) {
		t.Errorf("resume audit after = %s (%v), want evidence_since %v", last.GetAfterJson(), err, resumedAt)
	}
	if got := rollout.DescribeChange(last.GetBeforeJson(), last.GetAfterJson()); !strings.Contains(got, "reports accepted before it do not count") {
		t.Errorf("resume audit change %q does not say earlier reports no longer count", got)
	}

	move(done, adminv1.Action_ACTION_COMPLETE)
	if r := move(done, adminv1.Action_ACTION_HALT); r.GetRollout().GetHaltedFrom() != "complete" {
		t.Errorf("halted while complete: halted_from %q", r.GetRollout().GetHaltedFrom())
	}
	if r := move(done, adminv1.Action_ACTION_RESUME); r.GetRollout().GetState() != "complete" || r.GetRollout().GetPercent() != 100 {
		t.Errorf("resumed a release halted while complete: %s at %d%%, want complete", r.GetRollout().GetState(), r.GetRollout().GetPercent())
	}
}

// TestListNodes: the nodes behind Status's counts, worst first, filtered
// and paged, for a reader too; bad filters are refused with what is valid.
func TestListNodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ops := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, ops, signed(t, priv, v))
	if err := setPct(ctx, ops, v, 100, nil, nil); err != nil {
		t.Fatal(err)
	}
	at := testNow.Add(-time.Hour)
	var reports []store.Report
	for i := range 5 {
		r := store.Report{VMID: fmt.Sprintf("vm-%d", i), Boot: "b", SubscriptionID: "sub-a", Base: "202604.01", HotfixVersion: v, Agent: "hotfix", AgentVersion: v, Time: at}
		switch i {
		case 0:
			r.ExitCode = 3
		case 1:
			r.HotfixVersion, r.Agent, r.AgentVersion, r.RequestedVersion = "", "baked", "202604.01.0", v
			r.Decision, r.DownloadHotfix = "untrusted", "untrusted"
		}
		reports = append(reports, r)
	}
	if _, err := h.store.PutReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	if err := h.store.PutServed(ctx, []store.Served{{Version: v, VMID: "vm-hung", Boot: "b", Base: "202604.01", SubscriptionID: "sub-b", Time: at, Replica: "lpsd-b-7"}}); err != nil {
		t.Fatal(err)
	}
	list := func(c adminv1.AdminServiceClient, req *adminv1.ListNodesRequest) *adminv1.ListNodesResponse {
		t.Helper()
		resp, err := c.ListNodes(ctx, req)
		if err != nil {
			t.Fatalf("ListNodes(%v) = %v", req, err)
		}
		return resp
	}
	all := list(h.client(t, cred{token: "Bearer " + readerToken}), &adminv1.ListNodesRequest{Release: v})
	var got []string
	for _, n := range all.GetNodes() {
		got = append(got, n.GetVmId()+"="+n.GetOutcome())
	}
	if want := []string{"vm-0=failed", "vm-1=refusedIntegrity", "vm-hung=silent", "vm-2=ok", "vm-3=ok", "vm-4=ok"}; !slices.Equal(got, want) || all.GetTotal() != 6 {
		t.Fatalf("ListNodes = %v (total %d), want %v", got, all.GetTotal(), want)
	}
	if n := all.GetNodes()[0]; n.GetReason() != "provision exited 3" || n.GetExitCode() != 3 || n.GetRan() != "hotfix "+v || n.GetSubscriptionId() != "sub-a" {
		t.Errorf("the failed node = %v", n)
	}
	if n := all.GetNodes()[1]; !strings.Contains(n.GetReason(), "untrusted") || n.GetRan() != "baked 202604.01.0" {
		t.Errorf("the refusing node = %v", n)
	}
	if n := all.GetNodes()[2]; n.GetRan() != "" || n.GetServedAt() == nil || n.GetSubscriptionId() != "sub-b" {
		t.Errorf("the silent node = %v, want its served record and no report", n)
	}
	if r := list(ops, &adminv1.ListNodesRequest{Outcome: "refused"}); len(r.GetNodes()) != 1 || r.GetNodes()[0].GetVmId() != "vm-1" {
		t.Errorf("--outcome refused = %v", r.GetNodes())
	}
	if r := list(ops, &adminv1.ListNodesRequest{SubscriptionId: "SUB-B"}); len(r.GetNodes()) != 1 || r.GetNodes()[0].GetVmId() != "vm-hung" || r.GetNodes()[0].GetReplica() != "lpsd-b-7" {
		t.Errorf("--subscription sub-b = %v", r.GetNodes())
	}
	if r := list(ops, &adminv1.ListNodesRequest{Since: timestamppb.New(testNow)}); len(r.GetNodes()) != 0 {
		t.Errorf("--since now = %v, want none", r.GetNodes())
	}
	// Pages of 4: the first says there is more, the second ends.
	p1 := list(ops, &adminv1.ListNodesRequest{PageSize: 4})
	p2 := list(ops, &adminv1.ListNodesRequest{PageSize: 4, PageToken: p1.GetNextPageToken()})
	if len(p1.GetNodes()) != 4 || p1.GetNextPageToken() == "" || len(p2.GetNodes()) != 2 || p2.GetNextPageToken() != "" {
		t.Errorf("pages = %d (next %q), %d (next %q); want 4 then 2", len(p1.GetNodes()), p1.GetNextPageToken(), len(p2.GetNodes()), p2.GetNextPageToken())
	}
	// The reasons sum up every failing node that matches, on every page.
	reasons := func(r *adminv1.ListNodesResponse) []string {
		var out []string
		for _, rc := range r.GetTopReasons() {
			out = append(out, fmt.Sprintf("%s %q %d", rc.GetOutcome(), rc.GetReason(), rc.GetNodes()))
		}
		return out
	}
	wantReasons := []string{`failed "provision exited 3" 1`, `refusedIntegrity "decision untrusted download-hotfix untrusted" 1`, `silent "" 1`}
	for name, r := range map[string]*adminv1.ListNodesResponse{"all": all, "page 1": p1, "page 2": p2} {
		if got := reasons(r); !slices.Equal(got, wantReasons) {
			t.Errorf("%s: top reasons = %q, want %q", name, got, wantReasons)
		}
	}
	// Nodes is every page at once, from one assessment.
	every, err := h.srv.Nodes(WithActor(ctx, "token:reader"), &adminv1.ListNodesRequest{Release: v, PageSize: 1})
	if err != nil || len(every) != len(all.GetNodes()) {
		t.Fatalf("Nodes = %d nodes, %v; want the %d of ListNodes", len(every), err, len(all.GetNodes()))
	}
	for i, n := range every {
		if !proto.Equal(n, all.GetNodes()[i]) {
			t.Errorf("Nodes[%d] = %v, want %v", i, n, all.GetNodes()[i])
		}
	}
	if _, err := h.srv.Nodes(ctx, &adminv1.ListNodesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Nodes without an actor = %v, want Unauthenticated", err)
	}
	if _, err := h.srv.Nodes(WithActor(ctx, "token:reader"), &adminv1.ListNodesRequest{Outcome: "broken"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Nodes with a bad outcome = %v, want InvalidArgument", err)
	}
	for _, bad := range []*adminv1.ListNodesRequest{{Outcome: "broken"}, {PageToken: "x"}, {PageSize: -1}, {Base: "2026"}} {
		if _, err := ops.ListNodes(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListNodes(%v) = %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := ops.ListNodes(ctx, &adminv1.ListNodesRequest{Release: "202604.01.9"}); status.Code(err) != codes.NotFound {
		t.Errorf("ListNodes of an unknown release = %v, want NotFound", err)
	}
}

// TestListNodesPagesWhileNodesReport: a page token is where its page
// ended, so nodes that report between pages (a new failure sorting first,
// a listed node's outcome getting worse) neither repeat nor skip the
// nodes of the next page, as an offset did; an offset token from an
// older lpsd still pages, and a damaged token is refused.
func TestListNodesPagesWhileNodesReport(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ops := h.ops(t)
	ctx := t.Context()
	_, priv := newKey(t)
	const v = "202604.01.3"
	publish(t, ops, signed(t, priv, v))
	if err := setPct(ctx, ops, v, 100, nil, nil); err != nil {
		t.Fatal(err)
	}
	at := testNow.Add(-time.Hour)
	report := func(vm, boot string, exit int) {
		t.Helper()
		r := store.Report{VMID: vm, Boot: boot, SubscriptionID: "sub-a", Base: "202604.01", HotfixVersion: v, Agent: "hotfix", AgentVersion: v, ExitCode: exit, Time: at}
		if _, err := h.store.PutReports(ctx, []store.Report{r}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		report(fmt.Sprintf("vm-%d", i), "b", 0)
	}
	page := func(tok string) ([]string, string) {
		t.Helper()
		resp, err := ops.ListNodes(ctx, &adminv1.ListNodesRequest{Release: v, PageSize: 3, PageToken: tok})
		if err != nil {
			t.Fatalf("ListNodes(page %q) = %v", tok, err)
		}
		var ids []string
		for _, n := range resp.GetNodes() {
			ids = append(ids, n.GetVmId())
		}
		return ids, resp.GetNextPageToken()
	}
	first, next := page("")
	if want := []string{"vm-0", "vm-1", "vm-2"}; !slices.Equal(first, want) || next == "" {
		t.Fatalf("first page %v (next %q), want %v and a next page", first, next, want)
	}
	report("vm-new", "b", 3) // a failure, sorting before every ok node
	report("vm-1", "b2", 3)  // a listed node's worst outcome is now failed
	second, last := page(next)
	if want := []string{"vm-3", "vm-4", "vm-5"}; !slices.Equal(second, want) || last != "" {
		t.Errorf("second page %v (next %q), want %v and no more", second, last, want)
	}
	// An older lpsd's token is an offset into the order.
	if ids, _ := page("2"); !slices.Equal(ids, []string{"vm-0", "vm-2", "vm-3"}) {
		t.Errorf("offset 2 of vm-new, vm-1 (failed), then ok: %v", ids)
	}
	for _, bad := range []string{"k1.!!", "k1." + strings.Repeat("A", 2000), "-1", "k1.e30x"} {
		if _, err := ops.ListNodes(ctx, &adminv1.ListNodesRequest{PageToken: bad}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListNodes(page token %.20q) = %v, want InvalidArgument", bad, err)
		}
	}
}
