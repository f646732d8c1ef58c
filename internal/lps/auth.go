package lps

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"nodehotfix/internal/imds/attest"
)

// verifyTimeout bounds one verification, the intermediate fetch included
// (attest caps that at 5 s itself); the node gives up after 3 s anyway.
const verifyTimeout = 5 * time.Second

// verifier checks an attested-document token; *attest.Verifier is one.
type verifier interface {
	// Verify returns the identity the token attests, or an error, an
	// *attest.Error for every rejection attest knows.
	Verify(ctx context.Context, token string) (attest.Identity, error)
}

type identityKey struct{}

func withIdentity(ctx context.Context, id attest.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityFrom returns the verified caller identity authenticate put in ctx.
func identityFrom(ctx context.Context) (attest.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(attest.Identity)
	return id, ok
}

// authenticate returns the interceptor that admits a call only with a valid
// attested document: the single "authorization" metadata value, the raw
// base64 token the reference client sends. A "Bearer " prefix (any case) is
// tolerated and stripped, for hand-made calls (grpcurl); base64 has no
// space, so the prefix cannot be part of a token.
//
// It guards every unary method of the server, which carries the
// node-facing service; the one streaming method, the health service's
// Watch, needs no attestation, as Check does not (server.go). Any other
// method that needs none belongs on another server.
//
// A rejection carries no detail on the wire (statusText), is logged with
// its reason and counted per reason. Codes: PermissionDenied for a
// subscription not allowed, Unavailable when the intermediate could not be
// fetched (our outage: the node may fall back), Unauthenticated for
// everything else, including the malformed and oversized tokens attest
// suggests InvalidArgument for: the reference client turns InvalidArgument
// into a hard failure, and a broken token is no reason for that.
func authenticate(v verifier, m *Metrics, log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, "/"+healthpb.Health_ServiceDesc.ServiceName+"/") {
			// Probes carry no attested document; the health answer says
			// nothing about any node.
			return handler(ctx, req)
		}
		token, ok := bearerToken(ctx)
		if !ok {
			log.Info("request rejected", "outcome", outcomeNoToken, "method", info.FullMethod, "peer", peerAddr(ctx))
			return nil, fail(m, outcomeNoToken)
		}
		vctx, cancel := context.WithTimeout(ctx, verifyTimeout)
		start := time.Now()
		id, err := v.Verify(vctx, token)
		m.observeVerify(time.Since(start), err == nil)
		cancel()
		if err != nil {
			o := rejection(err)
			level := slog.LevelInfo
			if o == string(attest.ReasonIntermediate) {
				level = slog.LevelWarn
			}
			log.Log(ctx, level, "attested document rejected", "outcome", o, "method", info.FullMethod, "peer", peerAddr(ctx), "err", err)
			return nil, fail(m, o)
		}
		return handler(withIdentity(ctx, id), req)
	}
}

// bearerToken returns the token of the single "authorization" value.
func bearerToken(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", false
	}
	tok := vals[0]
	if len(tok) > len("bearer ") && strings.EqualFold(tok[:len("bearer ")], "bearer ") {
		tok = tok[len("bearer "):]
	}
	return tok, tok != ""
}

// rejection returns the outcome for a verification error: its attest
// reason, or outcomeUnknown.
func rejection(err error) string {
	var ae *attest.Error
	if errors.As(err, &ae) && knownOutcome(string(ae.Reason)) {
		return string(ae.Reason)
	}
	return outcomeUnknown
}

// Recover returns the outermost interceptor of lpsd's gRPC servers (the
// node-facing one and the admin API): grpc-go does not recover handler
// panics, so without it one bad request would crash the process. A panic
// is logged with its stack and the call answered with answer's error.
func Recover(log *slog.Logger, answer func() error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic serving request", "method", info.FullMethod, "peer", peerAddr(ctx), "panic", r, "stack", string(debug.Stack()))
				resp, err = nil, answer()
			}
		}()
		return handler(ctx, req)
	}
}

// recoverPanics is the node-facing server's Recover: the panic is counted
// as an outcome and the node gets Internal.
func recoverPanics(m *Metrics, log *slog.Logger) grpc.UnaryServerInterceptor {
	return Recover(log, func() error { return fail(m, outcomePanic) })
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
