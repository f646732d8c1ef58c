package admin

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-0123456789abcdef"
	tests := []struct {
		name    string
		in      string
		actors  []string
		wantErr string
	}{
		{name: "named-unnamed-and-reader", in: tokenFile, actors: []string{"token:ops", must(ParseTokens([]byte(unnamedToken)))[0].Actor(), "token:watcher", "token:former"}},
		{name: "bad-role", in: "a:admin:" + secret, wantErr: `line 1: role "admin": want operator or reader`},
		{name: "crlf-and-spaces", in: "  # c\r\n  ci.bot@example:" + secret + "  \r\n", actors: []string{"token:ci.bot@example"}},
		{name: "empty", in: "# only a comment\n\n", wantErr: "no tokens"},
		{name: "short", in: "ops:0123456789", wantErr: "line 1: token"},
		{name: "bad-char", in: "\nops:" + secret + "!", wantErr: "line 2: token"},
		{name: "space-inside", in: secret + " " + secret, wantErr: "line 1: token"},
		{name: "bad-name", in: "o p:" + secret, wantErr: "line 1: name"},
		{name: "empty-name", in: ":" + secret, wantErr: "line 1: name"},
		{name: "dup-token", in: "a:" + secret + "\nb:" + secret, wantErr: "line 2: same token as line 1"},
		{name: "dup-name", in: "a:" + secret + "\na:" + secret + "x", wantErr: `line 2: name "a" already used on line 1`},
		{name: "too-large", in: strings.Repeat("#", maxTokenFileSize+1), wantErr: "exceeds"},
		{name: "expiry-rfc3339", in: "ci:operator:" + secret + ":2026-12-31T18:00:00+01:00", actors: []string{"token:ci"}},
		{name: "expiry-date", in: "ci:reader:" + secret + ":2026-12-31\n", actors: []string{"token:ci"}},
		{name: "expiry-malformed", in: "ci:operator:" + secret + ":2026-12-32", wantErr: "line 1: expiry: want RFC 3339"},
		{name: "expiry-empty", in: "ci:operator:" + secret + ":", wantErr: "line 1: expiry"},
		{name: "expiry-no-zone", in: "ci:operator:" + secret + ":2026-12-31T18:00:00", wantErr: "line 1: expiry"},
		// The zero time means no expiry inside: a line meant to retire a
		// token must never keep it valid forever.
		{name: "expiry-zero-date", in: "ci:operator:" + secret + ":0001-01-01", wantErr: "line 1: expiry"},
		{name: "expiry-zero-instant", in: "ci:operator:" + secret + ":0001-01-01T00:00:00Z", wantErr: "line 1: expiry"},
		{name: "expiry-without-role", in: "ci:" + secret + ":2026-12-31", wantErr: "line 1: the second field is not a role"},
		{name: "empty-role", in: "ci::" + secret, wantErr: "line 1: role: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			toks, err := ParseTokens([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTokens(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("ParseTokens error %q reveals the token", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTokens(%q): %v", tt.in, err)
			}
			var actors []string
			for _, tok := range toks {
				actors = append(actors, tok.Actor())
			}
			if strings.Join(actors, ",") != strings.Join(tt.actors, ",") {
				t.Errorf("ParseTokens(%q) actors = %v, want %v", tt.in, actors, tt.actors)
			}
		})
	}
}

// TestParseTokensExpiry: the fourth field is when the token is refused
// from: RFC 3339 as written, a date as that day's start in UTC; none
// means never.
func TestParseTokensExpiry(t *testing.T) {
	t.Parallel()
	toks := must(ParseTokens([]byte("a:operator:" + opsToken + ":2026-12-31T18:00:00+01:00\nb:reader:" + readerToken + ":2026-12-31\nc:" + unnamedToken + "\n")))
	want := []time.Time{time.Date(2026, 12, 31, 17, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC), {}}
	for i, tok := range toks {
		if !tok.Expires.Equal(want[i]) {
			t.Errorf("token %s expires %v, want %v", tok.Name, tok.Expires, want[i])
		}
	}
	if toks[0].Expired(want[0].Add(-time.Second)) || !toks[0].Expired(want[0]) || toks[2].Expired(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Error("Expired: want false before the expiry, true from it on, never without one")
	}
	// A client's file may be a line cut from the server's, expiry and all.
	if got, err := ClientToken([]byte("a:operator:" + opsToken + ":2026-12-31\n")); err != nil || got != opsToken {
		t.Errorf("ClientToken of a line with an expiry = %q, %v", got, err)
	}
}

// TestTokenExpiresMidSession: one lookup decides for calls, sign-ins and
// sessions: a token is accepted until its expiry and refused from then on,
// with a message naming it and when it expired, never the token; a
// session it started ends with it. The bubble's clock moves; nothing waits.
func TestTokenExpiresMidSession(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		expires := time.Now().Add(time.Hour)
		a := NewAuth(must(ParseTokens([]byte("ops:operator:"+opsToken+":"+expires.UTC().Format(time.RFC3339)+"\nforever:"+unnamedToken+"\n"))), nil)
		sum := sha256.Sum256([]byte(opsToken))
		call := func() error {
			_, _, err := a.Identify(&tls.ConnectionState{}, []string{"Bearer " + opsToken})
			return err
		}
		if err := call(); err != nil {
			t.Fatalf("a call before the expiry: %v", err)
		}
		if _, _, ok := a.LookupToken(sum); !ok {
			t.Fatal("a session's lookup before the expiry: refused")
		}
		time.Sleep(time.Until(expires))
		err := call()
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), `admin token "ops" expired at `+expires.UTC().Format(time.RFC3339)) || strings.Contains(err.Error(), opsToken) {
			t.Errorf("a call at the expiry: %v; want Unauthenticated naming the token and when, not the token", err)
		}
		if _, _, err := a.IdentifyToken(opsToken); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
			t.Errorf("a sign-in at the expiry: %v", err)
		}
		if _, _, ok := a.LookupToken(sum); ok {
			t.Error("a session's lookup after the expiry: accepted")
		}
		if actor, _, err := a.IdentifyToken(unnamedToken); err != nil || actor == "" {
			t.Errorf("a token without an expiry: %q, %v", actor, err)
		}
	})
}

func TestClientToken(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ops:" + opsToken + "\n":         opsToken,
		"# mine\n" + unnamedToken + "\n": unnamedToken,
	} {
		if got, err := ClientToken([]byte(in)); err != nil || got != want {
			t.Errorf("ClientToken(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{tokenFile, "", "short"} {
		if _, err := ClientToken([]byte(in)); err == nil {
			t.Errorf("ClientToken(%q) succeeded, want an error", in)
		}
	}
}

func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{tokenFile, "a:" + opsToken, opsToken + "\n" + opsToken, "#\n", ":x", "a:b:c" + opsToken, "a:reader:" + opsToken + ":2026-12-31T18:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		toks, err := ParseTokens([]byte(in))
		if err != nil {
			return
		}
		if len(toks) == 0 {
			t.Fatal("ParseTokens accepted a file with no tokens")
		}
		seen := make(map[string]bool)
		for _, tok := range toks {
			a := tok.Actor()
			if !strings.HasPrefix(a, "token:") || seen[a] && tok.Name != "" {
				t.Fatalf("bad or duplicate actor %q", a)
			}
			seen[a] = true
		}
		if _, err := ClientToken([]byte(in)); (err == nil) != (len(toks) == 1) {
			t.Fatalf("ClientToken error %v for a file of %d tokens", err, len(toks))
		}
	})
}

// tlsPeer returns ctx as the TLS layer would set it up for a caller.
func tlsPeer(ctx context.Context, state tls.ConnectionState) context.Context {
	return peer.NewContext(ctx, &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		AuthInfo: credentials.TLSInfo{State: state},
	})
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	a := NewAuth(must(ParseTokens([]byte(tokenFile))), nil)
	alice := sharedPKI().alice.Leaf
	verified := tls.ConnectionState{PeerCertificates: []*x509.Certificate{alice}, VerifiedChains: [][]*x509.Certificate{{alice}}}
	presented := tls.ConnectionState{PeerCertificates: []*x509.Certificate{alice}}
	md := func(vals ...string) metadata.MD {
		m := metadata.MD{}
		for _, v := range vals {
			m.Append("authorization", v)
		}
		return m
	}
	tests := []struct {
		name  string
		tls   *tls.ConnectionState // nil: plaintext peer
		md    metadata.MD
		actor string // "" means rejected with Unauthenticated
	}{
		{name: "token", tls: &tls.ConnectionState{}, md: md("Bearer " + opsToken), actor: "token:ops"},
		{name: "lowercase-scheme", tls: &tls.ConnectionState{}, md: md("bearer " + opsToken), actor: "token:ops"},
		{name: "verified-cert", tls: &verified, actor: "cert:alice"},
		{name: "cert-wins", tls: &verified, md: md("Bearer " + opsToken), actor: "cert:alice"},
		{name: "cert-beats-bad-token", tls: &verified, md: md("Bearer wrong"), actor: "cert:alice"},
		{name: "presented-not-verified", tls: &presented},
		{name: "no-credentials", tls: &tls.ConnectionState{}},
		{name: "wrong-token", tls: &tls.ConnectionState{}, md: md("Bearer " + opsToken + "x")},
		{name: "token-prefix", tls: &tls.ConnectionState{}, md: md("Bearer " + opsToken[:len(opsToken)-1])},
		{name: "named-form", tls: &tls.ConnectionState{}, md: md("Bearer ops:" + opsToken)},
		{name: "raw-token", tls: &tls.ConnectionState{}, md: md(opsToken)},
		{name: "basic-scheme", tls: &tls.ConnectionState{}, md: md("Basic " + opsToken)},
		{name: "two-values", tls: &tls.ConnectionState{}, md: md("Bearer "+opsToken, "Bearer "+opsToken)},
		{name: "oversized", tls: &tls.ConnectionState{}, md: md("Bearer " + strings.Repeat("a", maxTokenLength+1))},
		{name: "plaintext", md: md("Bearer " + opsToken)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.NewIncomingContext(t.Context(), tt.md)
			if tt.tls != nil {
				ctx = tlsPeer(ctx, *tt.tls)
			} else {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{}})
			}
			got, _, err := a.Authenticate(ctx)
			if tt.actor == "" {
				if status.Code(err) != codes.Unauthenticated {
					t.Errorf("Authenticate = %q, %v; want Unauthenticated", got, err)
				}
				return
			}
			if err != nil || got != tt.actor {
				t.Errorf("Authenticate = %q, %v; want %q", got, err, tt.actor)
			}
		})
	}
}

// TestEveryMethodRejectsUnauthenticated calls every AdminService method
// over the real TLS listener with each kind of bad credential.
func TestEveryMethodRejectsUnauthenticated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	creds := []struct {
		name string
		c    cred
		// handshake: the TLS layer refuses the connection, so the call
		// fails with Unavailable before any RPC.
		handshake bool
	}{
		{name: "no-credentials"},
		{name: "wrong-token", c: cred{token: "Bearer " + strings.Repeat("x", 32)}},
		{name: "not-bearer", c: cred{token: opsToken}},
		{name: "expired-token", c: cred{token: "Bearer " + expiredToken}},
		{name: "rogue-cert", c: cred{cert: &h.pki.rogue}, handshake: true},
		{name: "rogue-cert-with-wrong-token", c: cred{cert: &h.pki.rogue, token: "Bearer nope"}, handshake: true},
	}
	good := h.conn(t, cred{token: "Bearer " + opsToken})
	for _, cr := range creds {
		cc := h.conn(t, cr.c)
		for _, m := range adminv1.AdminService_ServiceDesc.Methods {
			method := "/" + adminv1.AdminService_ServiceDesc.ServiceName + "/" + m.MethodName
			err := cc.Invoke(t.Context(), method, &emptypb.Empty{}, &emptypb.Empty{})
			want := codes.Unauthenticated
			if cr.handshake {
				want = codes.Unavailable
			}
			if got := status.Code(err); got != want {
				t.Errorf("%s with %s: %v, want %v", m.MethodName, cr.name, err, want)
			}
			// The same call with a good token reaches the handler.
			if err := good.Invoke(t.Context(), method, &emptypb.Empty{}, &emptypb.Empty{}); status.Code(err) == codes.Unauthenticated {
				t.Errorf("%s with a valid token: %v", m.MethodName, err)
			}
		}
	}
	if entries, _ := h.store.Audit(t.Context(), 0, 10); len(entries) != 0 {
		t.Errorf("audit log has %d entries after rejected calls, want 0", len(entries))
	}
	_, err := h.client(t, cred{token: "Bearer " + expiredToken}).Status(t.Context(), &adminv1.StatusRequest{})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `admin token "former" expired at 2020-01-01T00:00:00Z`) || strings.Contains(msg, expiredToken) {
		t.Errorf("an expired token's refusal says %q; want its name and expiry, never the token", msg)
	}
}
