package azureroots

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"testing"
)

func TestEmbeddedRoots(t *testing.T) {
	want := map[string]string{
		"DigiCert Global Root G2": "cb3ccbb76031e5e0138f8dd39a23f9de47ffc35e43c1144cea27d46a5ab1cb5f",
		"DigiCert Global Root CA": "4348a0e9444c78cb265e058d5e8944b4d84f9662bd26db257f8934a443c70161",
	}
	rest := PEM()
	got := map[string]string{}
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(c.Raw)
		got[c.Subject.CommonName] = hex.EncodeToString(sum[:])
		if !c.IsCA {
			t.Errorf("%s is not a CA", c.Subject.CommonName)
		}
	}
	for cn, fp := range want {
		if got[cn] != fp {
			t.Errorf("%s fingerprint = %q, want %q", cn, got[cn], fp)
		}
	}
	if len(got) != len(want) {
		t.Errorf("embedded %d roots, want %d", len(got), len(want))
	}
	Pool()
}
