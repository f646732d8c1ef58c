// Package mint issues attested documents for simulated nodes, one per VM,
// signed by a local metadata-service CA the service under test trusts.
package mint

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"runtime"
	"sync"
	"time"

	"nodehotfix/internal/imds/imdssign"
)

// Subscription is the subscription every simulated node belongs to.
const Subscription = "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a"

// Leaf says which key signs documents.
type Leaf string

// Leaves. RSA is what Azure uses (RSA-2048, its digest-OID quirk); ECDSA
// (P-256) mints about fifty times faster, for runs that need many
// documents and do not measure the signature check.
const (
	RSA   Leaf = "rsa"
	ECDSA Leaf = "ecdsa"
)

// Minter signs documents. It is safe for concurrent use.
type Minter struct {
	ca       *imdssign.CA
	leaf     *x509.Certificate
	key      crypto.Signer
	validity time.Duration
}

// New mints a CA (root and RSA leaf, as imdssign.NewCA does) and, for
// ECDSA, an extra P-256 leaf under the same root with the same SANs.
// Documents are valid for validity from the moment they are signed.
func New(leaf Leaf, validity time.Duration) (*Minter, error) {
	ca, err := imdssign.NewCA(imdssign.CAConfig{})
	if err != nil {
		return nil, err
	}
	m := &Minter{ca: ca, leaf: ca.Leaf, key: ca.LeafKey, validity: validity}
	switch leaf {
	case RSA:
	case ECDSA:
		if m.leaf, m.key, err = ecdsaLeaf(ca); err != nil {
			return nil, fmt.Errorf("mint ecdsa leaf: %w", err)
		}
	default:
		return nil, fmt.Errorf("unknown leaf %q (want rsa or ecdsa)", leaf)
	}
	return m, nil
}

func ecdsaLeaf(ca *imdssign.CA) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: ca.Leaf.Subject.CommonName},
		DNSNames:              ca.Leaf.DNSNames,
		NotBefore:             ca.Leaf.NotBefore,
		NotAfter:              ca.Leaf.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Root, key.Public(), ca.RootKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// RootPEM is the trust bundle verifiers of these documents need.
func (m *Minter) RootPEM() []byte { return m.ca.RootPEM() }

// Token returns the base64 PKCS#7 signature of a fresh document for vmID,
// what the metadata service returns as "signature".
func (m *Minter) Token(vmID string) (string, error) {
	now := time.Now().UTC()
	doc := imdssign.Document{
		Nonce:          now.Format("20060102-150405"),
		SKU:            "22_04-lts-gen2",
		SubscriptionID: Subscription,
		TimeStamp:      imdssign.TimeStamp{CreatedOn: now, ExpiresOn: now.Add(m.validity)},
		VMID:           vmID,
	}
	content, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	return imdssign.Sign(content, m.leaf, m.key)
}

// Tokens signs one document per vmID on every CPU and returns them in the
// order of vmIDs.
func (m *Minter) Tokens(vmIDs []string) ([]string, error) {
	out := make([]string, len(vmIDs))
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(vmIDs); i += workers {
				tok, err := m.Token(vmIDs[i])
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				out[i] = tok
			}
		})
	}
	wg.Wait()
	return out, firstErr
}

// VMID returns a deterministic version-4-shaped UUID for (seed, i), so a
// run's population, and with it every rollout bucket, is reproducible.
func VMID(seed string, i int) string {
	b := sha256.Sum256(fmt.Appendf(nil, "%s/%d", seed, i))
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// VMIDs returns VMID(seed, i) for i in [0, n).
func VMIDs(seed string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = VMID(seed, i)
	}
	return out
}
