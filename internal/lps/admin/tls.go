package admin

import (
	"crypto/tls"
	"crypto/x509"

	"nodehotfix/internal/lps"
)

// TLSConfig returns the admin listener's TLS configuration: TLS 1.3 only,
// serving cert. With clientCAs nil no client certificate is requested and
// callers authenticate by token. With clientCAs set, a client certificate
// must chain to them: it is required when acceptTokens is false, and
// optional (but still verified when presented) when it is true, so token
// holders can connect too. Pass the result to credentials.NewTLS, which adds
// the "h2" ALPN protocol.
func TLSConfig(cert *lps.CertSource, clientCAs *x509.CertPool, acceptTokens bool) *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: cert.Get,
		ClientAuth:     tls.NoClientCert,
	}
	if clientCAs != nil {
		c.ClientCAs = clientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if acceptTokens {
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return c
}
