package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Limits of the token file format (see the package doc).
const (
	maxTokenFileSize = 64 << 10
	minTokenLength   = 16
	maxTokenLength   = 4096
	maxNameLength    = 64
)

// Role is what an admin caller may do.
type Role string

// Roles. A reader sees (readOnly: Status, Explain, ListAudit, ListNodes,
// GetHistory, ListKeySets, GetLog); an operator also
// changes releases and rollouts.
const (
	RoleOperator Role = "operator"
	RoleReader   Role = "reader"
)

// Allowed reports whether role may call the admin method (a gRPC full
// method name, such as adminv1.AdminService_Transition_FullMethodName).
// The Auth interceptor and the dashboard both decide by it.
func Allowed(role Role, method string) bool {
	return role == RoleOperator || readOnly[method]
}

// readOnly lists the admin methods a reader may call.
var readOnly = map[string]bool{
	"/nodehotfix.admin.v1.AdminService/Status":      true,
	"/nodehotfix.admin.v1.AdminService/Explain":     true,
	"/nodehotfix.admin.v1.AdminService/ListAudit":   true,
	"/nodehotfix.admin.v1.AdminService/ListNodes":   true,
	"/nodehotfix.admin.v1.AdminService/GetHistory":  true,
	"/nodehotfix.admin.v1.AdminService/ListKeySets": true,
	"/nodehotfix.admin.v1.AdminService/GetLog":      true,
}

// readerMethods names the methods of readOnly, for a refusal.
var readerMethods = func() string {
	names := make([]string, 0, len(readOnly))
	for m := range readOnly {
		names = append(names, path.Base(m))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}()

// Token is one accepted admin bearer token. Only its sha256 is kept.
type Token struct {
	// Name identifies the token's holder in the audit log; may be empty.
	Name string
	// Role is the token's; operator unless the line says reader.
	Role Role
	// Expires is when the token stops being accepted (its line's fourth
	// field); zero: never.
	Expires time.Time
	sum     [sha256.Size]byte
}

// Expired reports whether t is refused at now for its expiry.
func (t Token) Expired(now time.Time) bool {
	return !t.Expires.IsZero() && !now.Before(t.Expires)
}

// Actor kinds: every operator's audit identity starts with the kind of
// credential it signed in with (the autopilot's is autopilot.Actor).
const (
	TokenActor = "token:"
	CertActor  = "cert:"
)

// Actor returns the audit identity of the token's holder: "token:<name>",
// or "token:sha256:<first 8 hex digits of the token's sha256>" when unnamed.
func (t Token) Actor() string {
	if t.Name != "" {
		return TokenActor + t.Name
	}
	return TokenActor + "sha256:" + hex.EncodeToString(t.sum[:4])
}

// ParseTokens parses a server token file (see the package doc). Errors name
// the offending line but never echo its content.
func ParseTokens(data []byte) ([]Token, error) {
	lines, err := tokenLines(data)
	if err != nil {
		return nil, fmt.Errorf("parse admin tokens: %w", err)
	}
	tokens := make([]Token, 0, len(lines))
	seenSum := make(map[[sha256.Size]byte]int)
	seenName := make(map[string]int)
	for _, l := range lines {
		t := Token{Name: l.name, Role: l.role, Expires: l.expires, sum: sha256.Sum256([]byte(l.token))}
		if prev, dup := seenSum[t.sum]; dup {
			return nil, fmt.Errorf("parse admin tokens: line %d: same token as line %d", l.n, prev)
		}
		if prev, dup := seenName[t.Name]; dup && t.Name != "" {
			return nil, fmt.Errorf("parse admin tokens: line %d: name %q already used on line %d", l.n, t.Name, prev)
		}
		seenSum[t.sum], seenName[t.Name] = l.n, l.n
		tokens = append(tokens, t)
	}
	return tokens, nil
}

// ClientToken returns the bearer token a client sends, from a client token
// file: the same syntax as the server's, with exactly one token line whose
// optional name prefix is dropped.
func ClientToken(data []byte) (string, error) {
	lines, err := tokenLines(data)
	if err != nil {
		return "", fmt.Errorf("read admin token: %w", err)
	}
	if len(lines) != 1 {
		return "", fmt.Errorf("read admin token: %d token lines, want exactly 1", len(lines))
	}
	return lines[0].token, nil
}

type tokenLine struct {
	n           int
	name, token string
	role        Role
	expires     time.Time
}

// dateOnly is the expiry field's short form: that day's start, UTC.
const dateOnly = "2006-01-02"

// parseExpiry reads a token line's expiry: RFC 3339, or a date, which
// means the start of that day in UTC (the token is refused from then on).
func parseExpiry(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		if t, err = time.Parse(dateOnly, s); err != nil {
			return time.Time{}, false
		}
	}
	// A year before 2000 is a placeholder, not an expiry (0001-01-01 is
	// the zero time, which means "never expires" inside): refused, so a
	// line meant to retire a token cannot keep it valid forever.
	if t.Year() < 2000 {
		return time.Time{}, false
	}
	return t, true
}

// tokenLines returns the token lines of a token file, at least one.
func tokenLines(data []byte) ([]tokenLine, error) {
	if len(data) > maxTokenFileSize {
		return nil, fmt.Errorf("%d bytes exceeds the %d-byte limit", len(data), maxTokenFileSize)
	}
	var out []tokenLine
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		// [name:[role:]]token or name:role:token:expires; tokens never
		// hold ":", so the third ends the token and the expiry (RFC 3339,
		// with colons of its own) is the rest.
		role := RoleOperator
		name, token, named := strings.Cut(line, ":")
		if !named {
			name, token = "", line
		} else if !validName(name) {
			return nil, fmt.Errorf("line %d: name: want 1 to %d characters of [A-Za-z0-9._@-]", i+1, maxNameLength)
		}
		var expires time.Time
		if r, rest, ok := strings.Cut(token, ":"); ok {
			switch Role(r) {
			case RoleOperator, RoleReader:
				role, token = Role(r), rest
			case "":
				return nil, fmt.Errorf("line %d: role: empty; want operator or reader (name:role:token[:expires])", i+1)
			default:
				if len(r) >= minTokenLength {
					// Long enough to be the token itself (a line without
					// its role): never echoed.
					return nil, fmt.Errorf("line %d: the second field is not a role: want name:role:token[:expires], the role operator or reader", i+1)
				}
				return nil, fmt.Errorf("line %d: role %q: want operator or reader", i+1, r)
			}
			if tok, exp, ok := strings.Cut(token, ":"); ok {
				var valid bool
				if expires, valid = parseExpiry(strings.TrimSpace(exp)); !valid {
					return nil, fmt.Errorf("line %d: expiry: want RFC 3339 (2026-12-31T18:00:00Z) or a date (2026-12-31, that day's start in UTC)", i+1)
				}
				token = tok
			}
		}
		if !validToken(token) {
			return nil, fmt.Errorf("line %d: token: want %d to %d characters of [A-Za-z0-9._~+/=-]", i+1, minTokenLength, maxTokenLength)
		}
		out = append(out, tokenLine{n: i + 1, name: name, token: token, role: role, expires: expires})
	}
	if len(out) == 0 {
		return nil, errors.New("no tokens")
	}
	return out, nil
}

func validName(s string) bool {
	return len(s) >= 1 && len(s) <= maxNameLength && allIn(s, "._@-")
}

func validToken(s string) bool {
	return len(s) >= minTokenLength && len(s) <= maxTokenLength && allIn(s, "._~+/=-")
}

// allIn reports whether s holds only ASCII letters, digits and bytes of
// extra.
func allIn(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// Auth authenticates admin callers by verified client certificate or bearer
// token (see the package doc). It is immutable and safe for concurrent use.
type Auth struct {
	tokens atomic.Pointer[[]Token]
	log    *slog.Logger
}

// NewAuth returns an Auth accepting the given tokens (none: certificates
// only) and every client certificate the TLS layer verified. log records
// rejected calls; nil discards.
func NewAuth(tokens []Token, log *slog.Logger) *Auth {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Auth{log: log}
	a.SetTokens(tokens)
	return a
}

// SetTokens replaces the accepted tokens (a reload); calls in flight finish
// with the tokens they were checked against.
func (a *Auth) SetTokens(tokens []Token) {
	ts := slices.Clone(tokens)
	a.tokens.Store(&ts)
}

// Authenticate returns the actor of the call in ctx and its role, or an
// Unauthenticated status error. A verified client certificate is an
// operator's unless its subject's organizational unit is "reader".
func (a *Auth) Authenticate(ctx context.Context) (string, Role, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", "", status.Error(codes.Unauthenticated, "no peer information")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", "", status.Error(codes.Unauthenticated, "the admin API requires TLS")
	}
	return a.Identify(&ti.State, metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// Identify returns the actor and role of a caller on a TLS connection in
// state that sent the authorization values (none, or one "Bearer <token>"),
// or an Unauthenticated status error. Authenticate uses it for gRPC calls;
// the dashboard for its requests and logins.
func (a *Auth) Identify(state *tls.ConnectionState, authorization []string) (string, Role, error) {
	if state == nil {
		return "", "", status.Error(codes.Unauthenticated, "the admin API requires TLS")
	}
	// Only chains the handshake verified against the client CA count; a
	// certificate merely presented proves nothing.
	if len(state.VerifiedChains) > 0 && len(state.PeerCertificates) > 0 {
		c := state.PeerCertificates[0]
		role := RoleOperator
		if slices.Contains(c.Subject.OrganizationalUnit, string(RoleReader)) {
			role = RoleReader
		}
		return certActor(c), role, nil
	}
	switch len(authorization) {
	case 0:
		return "", "", status.Error(codes.Unauthenticated, "no credentials: send a bearer token or a client certificate")
	case 1:
	default:
		return "", "", status.Error(codes.Unauthenticated, "more than one authorization value")
	}
	scheme, token, ok := strings.Cut(authorization[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", "", status.Error(codes.Unauthenticated, `authorization: want "Bearer <token>"`)
	}
	return a.IdentifyToken(token)
}

// IdentifyToken returns the actor and role of a bearer token, or an
// Unauthenticated status error: tokens only, whatever the connection's
// certificate (the dashboard's sign-in form). A token past its expiry is
// refused with a message naming it (its actor) and when it expired, never
// the token.
func (a *Auth) IdentifyToken(token string) (string, Role, error) {
	if len(token) > maxTokenLength {
		return "", "", status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	actor, role, err := a.lookup(sha256.Sum256([]byte(token)), time.Now())
	if err != nil {
		return "", "", err
	}
	return actor, role, nil
}

// LookupToken returns the actor and role of the token whose sha256 is sum
// among the tokens accepted now, and whether there is one: a session
// started with a token checks it again on every request, so a token
// removed or demoted by a reload, or past its expiry, takes effect at
// once.
func (a *Auth) LookupToken(sum [sha256.Size]byte) (string, Role, bool) {
	actor, role, err := a.lookup(sum, time.Now())
	return actor, role, err == nil
}

// lookup is the one check of a token, by its sha256, against the tokens
// accepted at now: every call and sign-in goes through it.
func (a *Auth) lookup(sum [sha256.Size]byte, now time.Time) (string, Role, error) {
	match := -1
	// Compare against every token, without stopping early, so timing says
	// nothing about which token (if any) nearly matched.
	tokens := *a.tokens.Load()
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].sum[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", "", status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	t := tokens[match]
	if t.Expired(now) {
		// Only the holder of the secret gets here, so naming the token
		// tells nobody anything new and tells its holder what to renew.
		st := status.Newf(codes.Unauthenticated, "admin token %q expired at %s: ask for a new one (a line of lpsd's --admin-token-file with a later expiry, then SIGHUP)", t.Name, t.Expires.UTC().Format(time.RFC3339))
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonTokenExpired, Domain: ErrorDomain, Metadata: map[string]string{"name": t.Name}}); err == nil {
			st = d
		}
		return "", "", st.Err()
	}
	return t.Actor(), t.Role, nil
}

// ReasonTokenExpired is the ErrorInfo reason of a call refused for its
// token's expiry. Metadata: "name", the token's.
const ReasonTokenExpired = "TOKEN_EXPIRED"

// TokenExpired reports whether err refused a token for its expiry, so a
// caller may show its message (which names the token, never its secret).
func TokenExpired(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain && info.GetReason() == ReasonTokenExpired {
			return true
		}
	}
	return false
}

// certActor names a certificate holder: its subject CN, else its first DNS
// name, else a fingerprint prefix.
func certActor(c *x509.Certificate) string {
	name := c.Subject.CommonName
	if name == "" && len(c.DNSNames) > 0 {
		name = c.DNSNames[0]
	}
	if name == "" {
		sum := sha256.Sum256(c.Raw)
		name = "sha256:" + hex.EncodeToString(sum[:8])
	}
	return CertActor + strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, name)
}

// Unary is a grpc.UnaryServerInterceptor that rejects unauthenticated calls
// and puts the actor in the handler's context (ActorFrom).
func (a *Auth) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	actor, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(WithActor(ctx, actor), req)
}

// Stream is the grpc.StreamServerInterceptor counterpart of Unary.
func (a *Auth) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	actor, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &actorStream{ServerStream: ss, ctx: WithActor(ss.Context(), actor)})
}

func (a *Auth) authenticate(ctx context.Context, method string) (string, error) {
	actor, role, err := a.Authenticate(ctx)
	if err == nil && !Allowed(role, method) {
		err = status.Errorf(codes.PermissionDenied, "%s has the reader role: it may call %s only; changes need an operator token or certificate", actor, readerMethods)
	}
	if err != nil {
		addr := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		a.log.Warn("admin call rejected", "method", method, "peer", addr, "reason", status.Convert(err).Message())
	}
	return actor, err
}

type actorStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *actorStream) Context() context.Context { return s.ctx }

type actorKey struct{}

// WithActor returns ctx carrying an authenticated actor, for a caller that
// authenticated it itself (the Auth interceptor, the dashboard).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the authenticated actor the Auth interceptor put in ctx,
// and whether there is one.
func ActorFrom(ctx context.Context) (string, bool) {
	a, ok := ctx.Value(actorKey{}).(string)
	return a, ok && a != ""
}
