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

// EtcdPKI is a CA and the certificates of an etcd server on 127.0.0.1 and
// of its client (lpsd), as PEM files.
type EtcdPKI struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// MintEtcdPKI writes an EtcdPKI into dir (created if missing), each file
// mode 0600, valid for a day.
func MintEtcdPKI(dir string) (EtcdPKI, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return EtcdPKI{}, err
	}
	ca, caKey, err := NewCA("test etcd CA", 24*time.Hour)
	if err != nil {
		return EtcdPKI{}, err
	}
	caDER, now := ca.Raw, time.Now()
	write := func(name string, block *pem.Block) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, pem.EncodeToMemory(block), 0o600)
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return "", "", err
		}
		c, err := write(name+".crt", &pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err != nil {
			return "", "", err
		}
		k, err := write(name+".key", &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
		return c, k, err
	}
	var p EtcdPKI
	if p.CA, err = write("etcd-ca.crt", &pem.Block{Type: "CERTIFICATE", Bytes: caDER}); err != nil {
		return EtcdPKI{}, err
	}
	if p.ServerCert, p.ServerKey, err = leaf("etcd-server", 2, x509.ExtKeyUsageServerAuth); err != nil {
		return EtcdPKI{}, err
	}
	if p.ClientCert, p.ClientKey, err = leaf("lpsd", 3, x509.ExtKeyUsageClientAuth); err != nil {
		return EtcdPKI{}, err
	}
	return p, nil
}
