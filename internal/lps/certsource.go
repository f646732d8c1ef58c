package lps

import (
	"crypto/tls"
	"sync/atomic"
)

// CertSource is a certificate a reload may replace; handshakes in flight
// keep the one they started with.
type CertSource struct {
	cur atomic.Pointer[tls.Certificate]
}

// NewCertSource returns a source serving c.
func NewCertSource(c tls.Certificate) *CertSource {
	s := &CertSource{}
	s.Set(c)
	return s
}

// Set replaces the certificate.
func (s *CertSource) Set(c tls.Certificate) { s.cur.Store(&c) }

// Get is a tls.Config GetCertificate.
func (s *CertSource) Get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cur.Load(), nil }
