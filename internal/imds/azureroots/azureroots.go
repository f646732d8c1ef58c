// Package azureroots embeds the public roots that Azure attested documents
// chain to, the default trust anchors of lpsd's attestation verifier.
//
// Included: DigiCert Global Root G2 (SHA-256 fingerprint cb3ccbb7…1cb5f,
// until 2038; the root of both the older "Microsoft Azure RSA TLS Issuing
// CA" hierarchy and, through its cross-signature, of Microsoft TLS RSA Root
// G2) and DigiCert Global Root CA (until 2031; used in 21Vianet). Chains
// through the cross-signed Microsoft TLS RSA Root G2 need that
// cross-certificate as an intermediate (lpsd --imds-intermediates) because
// the AIA fetch resolves only the leaf's issuer. The self-signed Microsoft
// TLS RSA Root G2 is not embedded; add it with --imds-roots where wanted.
package azureroots

import (
	"crypto/x509"
	_ "embed"
)

//go:embed roots.pem
var pemData []byte

// PEM returns the embedded roots in PEM.
func PEM() []byte { return append([]byte(nil), pemData...) }

// Pool returns a new pool holding the embedded roots.
func Pool() *x509.CertPool {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemData) {
		panic("azureroots: embedded roots do not parse")
	}
	return p
}
