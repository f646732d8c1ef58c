package lps

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/imds/attest"
)

// verifierFunc is a verifier; nil accepts every token as testVMID.
type verifierFunc func(ctx context.Context, token string) (attest.Identity, error)

func (f verifierFunc) Verify(ctx context.Context, token string) (attest.Identity, error) {
	if f == nil {
		return attest.Identity{VMID: testVMID, SubscriptionID: testSub}, nil
	}
	return f(ctx, token)
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   string
		wantOK bool
	}{
		{"raw", []string{"MIIabc+/="}, "MIIabc+/=", true},
		{"bearer", []string{"Bearer MIIabc"}, "MIIabc", true},
		{"bearer-lower", []string{"bearer MIIabc"}, "MIIabc", true},
		// Left for the verifier to reject as malformed.
		{"bearer-only", []string{"Bearer "}, "Bearer ", true},
		{"absent", nil, "", false},
		{"empty", []string{""}, "", false},
		{"two", []string{"a", "b"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			md := metadata.MD{}
			for _, v := range tt.values {
				md.Append("authorization", v)
			}
			got, ok := bearerToken(metadata.NewIncomingContext(t.Context(), md))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("bearerToken(%q) = %q, %v, want %q, %v", tt.values, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestRejectionCodes pins the code of every attest reason: only codes the
// reference client treats as "no hotfix", except our own outage.
func TestRejectionCodes(t *testing.T) {
	t.Parallel()
	for _, r := range attest.Reasons() {
		want := codes.Unauthenticated
		switch r {
		case attest.ReasonSubscription:
			want = codes.PermissionDenied
		case attest.ReasonIntermediate:
			want = codes.Unavailable
		}
		err := fmt.Errorf("wrapped: %w", &attest.Error{Reason: r, Err: errors.New("detail")})
		o := rejection(err)
		if o != string(r) || outcomeCodes[o] != want {
			t.Errorf("reason %s: outcome %q code %v, want %q %v", r, o, outcomeCodes[o], r, want)
		}
	}
	for _, err := range []error{errors.New("not an attest error"), &attest.Error{Reason: "new-reason"}} {
		if o := rejection(err); o != outcomeUnknown || outcomeCodes[o] != codes.Unauthenticated {
			t.Errorf("rejection(%v) = %q (%v), want %q (Unauthenticated)", err, o, outcomeCodes[o], outcomeUnknown)
		}
	}
}

// TestAuthenticate runs the interceptor chain the server installs without
// a socket.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	info := &grpc.UnaryServerInfo{FullMethod: "/akslivepatching.v1.LivePatchingService/GetComponentConfig"}
	v := verifierFunc(func(_ context.Context, token string) (attest.Identity, error) {
		switch token {
		case "good":
			return attest.Identity{VMID: testVMID, SubscriptionID: testSub}, nil
		case "panic":
			panic("boom")
		default:
			return attest.Identity{}, &attest.Error{Reason: attest.ReasonSignature, Err: errors.New("bad")}
		}
	})
	tests := []struct {
		name     string
		auth     []string
		handler  grpc.UnaryHandler
		wantCode codes.Code
		outcome  string // counted by the interceptors; "" if only the handler counts
	}{
		{"accepted", []string{"good"}, nil, codes.OK, ""},
		{"rejected", []string{"forged"}, nil, codes.Unauthenticated, "signature"},
		{"no-token", nil, nil, codes.Unauthenticated, outcomeNoToken},
		{"verifier-panic", []string{"panic"}, nil, codes.Internal, outcomePanic},
		{"handler-panic", []string{"good"}, func(context.Context, any) (any, error) { panic("handler bug") }, codes.Internal, outcomePanic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(nil)
			log := testLog(t)
			auth, rec := authenticate(v, m, log), recoverPanics(m, log)
			var got attest.Identity
			handler := tt.handler
			if handler == nil {
				handler = func(ctx context.Context, _ any) (any, error) {
					got, _ = identityFrom(ctx)
					return "ok", nil
				}
			}
			md := metadata.MD{}
			for _, a := range tt.auth {
				md.Append("authorization", a)
			}
			ctx := metadata.NewIncomingContext(t.Context(), md)
			_, err := rec(ctx, nil, info, func(ctx context.Context, req any) (any, error) {
				return auth(ctx, req, info, handler)
			})
			if st := status.Convert(err); st.Code() != tt.wantCode || (err != nil && st.Message() != statusText[tt.wantCode]) {
				t.Fatalf("status = %v %q, want %v", st.Code(), st.Message(), tt.wantCode)
			}
			if tt.wantCode == codes.OK && got.VMID != testVMID {
				t.Errorf("handler saw identity %+v, want VMID %s", got, testVMID)
			}
			want := map[string]uint64{}
			if tt.outcome != "" {
				want[tt.outcome] = 1
			}
			if diff := cmp.Diff(want, m.Counts()); diff != "" {
				t.Errorf("Counts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
