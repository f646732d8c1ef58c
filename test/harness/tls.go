package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ServiceName is the name the live-patching certificate must carry.
const ServiceName = "aks-security-patch.data.mcr.microsoft.com"

// TLSFiles is a minted cluster CA and a server certificate signed by it.
type TLSFiles struct {
	CAPEM    []byte
	CAFile   string
	CertFile string
	KeyFile  string
}

// NewCA makes a P-256 certificate authority named cn, valid from an hour
// ago for validFor: the one way tests here mint a CA.
func NewCA(cn string, validFor time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// MintTLS writes a CA and a server certificate for ServiceName, localhost
// and 127.0.0.1 into dir.
func MintTLS(dir string) (TLSFiles, error) {
	caCert, caKey, err := NewCA("nodehotfix test cluster CA", 30*24*time.Hour)
	if err != nil {
		return TLSFiles{}, err
	}
	caDER, now := caCert.Raw, time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TLSFiles{}, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ServiceName},
		DNSNames:    []string{ServiceName, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return TLSFiles{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{
		CAPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CAFile:   filepath.Join(dir, "cluster-ca.pem"),
		CertFile: filepath.Join(dir, "lps.crt"),
		KeyFile:  filepath.Join(dir, "lps.key"),
	}
	for path, data := range map[string][]byte{
		f.CAFile:   f.CAPEM,
		f.CertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		f.KeyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return TLSFiles{}, err
		}
	}
	return f, nil
}
