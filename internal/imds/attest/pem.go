package attest

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ParseCertificatesPEM parses a PEM bundle strictly: at least one block,
// every block a CERTIFICATE that parses, and nothing but whitespace between
// or after the blocks. Use it for the roots and intermediates files given to
// lpsd, where a silently skipped certificate would be a silent outage.
func ParseCertificatesPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		rest = bytes.TrimSpace(rest)
		if len(rest) == 0 {
			break
		}
		// pem.Decode skips text before a block; we do not.
		var block *pem.Block
		if bytes.HasPrefix(rest, []byte("-----BEGIN ")) {
			block, rest = pem.Decode(rest)
		}
		if block == nil {
			return nil, fmt.Errorf("parse PEM certificate %d: not a PEM block", len(certs)+1)
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) > 0 {
			return nil, fmt.Errorf("parse PEM certificate %d: want a CERTIFICATE block without headers, got %q", len(certs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse PEM certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("parse PEM certificates: no certificate")
	}
	return certs, nil
}

// RootsFromPEM returns a pool of the certificates in a PEM bundle parsed by
// ParseCertificatesPEM, for Config.Roots.
func RootsFromPEM(data []byte) (*x509.CertPool, error) {
	certs, err := ParseCertificatesPEM(data)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}
