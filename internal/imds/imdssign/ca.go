package imdssign

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// DefaultAIAURL is where a CA with an intermediate says the intermediate is
// published. It is on the host verifiers allow by default, so tests can
// serve it from a stub transport. An emulator sets CAConfig.AIAURL to a URL
// it serves and has the verifier allow that host, or preloads the
// intermediate in the verifier instead.
const DefaultAIAURL = "http://www.microsoft.com/pkiops/certs/imds-emulator-intermediate.crt"

// leafKeyBits is the size of the leaf's RSA key, as on Azure's leaves.
const leafKeyBits = 2048

// CAConfig describes the certificates NewCA mints. The zero value gives a
// root and a leaf for "eastus.metadata.azure.com", valid for a year from an
// hour ago.
type CAConfig struct {
	// DNSNames are the leaf's SANs; the first is also its CN.
	// nil: {"eastus.metadata.azure.com", "metadata.azure.com"}, like Azure's.
	DNSNames []string
	// Intermediate puts an intermediate CA between the root and the leaf and
	// sets the leaf's AIA CA Issuers URL to AIAURL, where whoever serves the
	// documents must publish Intermediate.Raw (DER).
	Intermediate bool
	// AIAURL is the leaf's IssuingCertificateURL when Intermediate is set.
	// "": DefaultAIAURL.
	AIAURL string
	// NotBefore and NotAfter bound every certificate.
	// Zero: an hour before now, and a year after NotBefore.
	NotBefore, NotAfter time.Time
}

// CA is a root, an optional intermediate and a leaf that signs documents.
// The keys are exported so tests can issue further certificates.
type CA struct {
	Root    *x509.Certificate
	RootKey crypto.Signer
	// Intermediate and IntermediateKey are nil unless CAConfig.Intermediate.
	Intermediate    *x509.Certificate
	IntermediateKey crypto.Signer
	Leaf            *x509.Certificate
	LeafKey         crypto.Signer // RSA, so documents carry Azure's digest OID
}

// NewCA mints a CA as described by cfg: ECDSA P-256 root and intermediate,
// and an RSA-2048 leaf with serverAuth and the SANs.
func NewCA(cfg CAConfig) (*CA, error) {
	if cfg.DNSNames == nil {
		cfg.DNSNames = []string{"eastus.metadata.azure.com", "metadata.azure.com"}
	}
	if len(cfg.DNSNames) == 0 {
		return nil, errors.New("new imds CA: no DNS names")
	}
	if cfg.AIAURL == "" {
		cfg.AIAURL = DefaultAIAURL
	}
	if cfg.NotBefore.IsZero() {
		cfg.NotBefore = time.Now().Add(-time.Hour)
	}
	if cfg.NotAfter.IsZero() {
		cfg.NotAfter = cfg.NotBefore.AddDate(1, 0, 0)
	}

	ca := &CA{}
	var err error
	ca.Root, ca.RootKey, err = issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "IMDS Emulator Root CA"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil, nil, cfg, false)
	if err != nil {
		return nil, fmt.Errorf("new imds CA: root: %w", err)
	}
	parent, parentKey := ca.Root, ca.RootKey
	var aia []string
	if cfg.Intermediate {
		ca.Intermediate, ca.IntermediateKey, err = issue(&x509.Certificate{
			Subject:               pkix.Name{CommonName: "IMDS Emulator Issuing CA 01"},
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			BasicConstraintsValid: true,
			IsCA:                  true,
			MaxPathLenZero:        true,
		}, ca.Root, ca.RootKey, cfg, false)
		if err != nil {
			return nil, fmt.Errorf("new imds CA: intermediate: %w", err)
		}
		parent, parentKey = ca.Intermediate, ca.IntermediateKey
		aia = []string{cfg.AIAURL}
	}
	ca.Leaf, ca.LeafKey, err = issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: cfg.DNSNames[0]},
		DNSNames:              cfg.DNSNames,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IssuingCertificateURL: aia,
	}, parent, parentKey, cfg, true)
	if err != nil {
		return nil, fmt.Errorf("new imds CA: leaf: %w", err)
	}
	return ca, nil
}

// Sign signs content with the CA's leaf; see the package-level Sign.
func (ca *CA) Sign(content []byte) (string, error) {
	return Sign(content, ca.Leaf, ca.LeafKey)
}

// RootPEM returns the root certificate in PEM, the trust bundle a verifier
// of this CA's documents needs (lpsd's --imds-roots).
func (ca *CA) RootPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw})
}

// issue signs tmpl with parentKey as parent (self-signed when parent is nil)
// for a new RSA key when rsaKey is set, else a new P-256 key.
func issue(tmpl, parent *x509.Certificate, parentKey crypto.Signer, cfg CAConfig, rsaKey bool) (*x509.Certificate, crypto.Signer, error) {
	var key crypto.Signer
	var err error
	if rsaKey {
		key, err = rsa.GenerateKey(rand.Reader, leafKeyBits)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = cfg.NotBefore, cfg.NotAfter
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}
