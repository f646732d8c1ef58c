package admin

import (
	"crypto/tls"
	"testing"

	"google.golang.org/grpc/codes"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
)

func TestTLSConfigClientAuth(t *testing.T) {
	t.Parallel()
	p := sharedPKI()
	tests := []struct {
		name         string
		withCA       bool
		acceptTokens bool
		want         tls.ClientAuthType
	}{
		{"tokens-only", false, true, tls.NoClientCert},
		{"mtls-only", true, false, tls.RequireAndVerifyClientCert},
		{"both", true, true, tls.VerifyClientCertIfGiven},
	}
	for _, tt := range tests {
		pool := p.clientCAs
		if !tt.withCA {
			pool = nil
		}
		c := TLSConfig(lps.NewCertSource(p.server), pool, tt.acceptTokens)
		if got, _ := c.GetCertificate(nil); c.ClientAuth != tt.want || c.MinVersion != tls.VersionTLS13 || got == nil {
			t.Errorf("%s: ClientAuth %v MinVersion %x, want %v and TLS 1.3", tt.name, c.ClientAuth, c.MinVersion, tt.want)
		}
	}
}

func TestMTLSOnlyListenerRefusesTokenHolders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{requireMTLS: true})
	_, err := h.client(t, cred{token: "Bearer " + opsToken}).Status(t.Context(), &adminv1.StatusRequest{})
	wantCode(t, "token without a client certificate", err, codes.Unavailable)
	if _, err := h.client(t, cred{cert: &h.pki.alice}).Status(t.Context(), &adminv1.StatusRequest{}); err != nil {
		t.Errorf("Status with a verified client certificate: %v", err)
	}
}
