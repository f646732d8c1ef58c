package imdssign

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"
)

func TestNewCA(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	for _, intermediate := range []bool{false, true} {
		ca, err := NewCA(CAConfig{Intermediate: intermediate, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca.RootPEM()) {
			t.Fatal("RootPEM holds no certificate")
		}
		inters := x509.NewCertPool()
		if intermediate {
			inters.AddCert(ca.Intermediate)
		}
		_, err = ca.Leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inters,
			CurrentTime:   now,
			DNSName:       "eastus.metadata.azure.com",
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			t.Errorf("intermediate=%v: leaf does not verify: %v", intermediate, err)
		}
		var wantAIA []string
		if intermediate {
			wantAIA = []string{DefaultAIAURL}
		}
		if !slices.Equal(ca.Leaf.IssuingCertificateURL, wantAIA) {
			t.Errorf("intermediate=%v: AIA = %q, want %q", intermediate, ca.Leaf.IssuingCertificateURL, wantAIA)
		}
		if (ca.Intermediate != nil) != intermediate {
			t.Errorf("intermediate=%v: Intermediate = %v", intermediate, ca.Intermediate)
		}
	}
}

func TestNewCAEmptyNames(t *testing.T) {
	t.Parallel()
	if _, err := NewCA(CAConfig{DNSNames: []string{}}); err == nil {
		t.Error("NewCA with no DNS names succeeded, want error")
	}
}
