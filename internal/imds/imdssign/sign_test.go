package imdssign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"
)

func TestDocumentJSON(t *testing.T) {
	t.Parallel()
	created := time.Date(2018, 11, 20, 22, 7, 39, 0, time.UTC)
	doc := Document{
		Nonce:          "1234566766",
		SKU:            "2019-Datacenter",
		SubscriptionID: "8d10da13-8125-4ba9-a717-bf7490507b3d",
		TimeStamp:      TimeStamp{CreatedOn: created, ExpiresOn: created.Add(45 * time.Second)},
		VMID:           "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
	}
	got, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"nonce":"1234566766","plan":{"name":"","product":"","publisher":""},"sku":"2019-Datacenter",` +
		`"subscriptionId":"8d10da13-8125-4ba9-a717-bf7490507b3d",` +
		`"timeStamp":{"createdOn":"11/20/18 22:07:39 -0000","expiresOn":"11/20/18 22:08:24 -0000"},` +
		`"vmId":"02aab8a4-74ef-476e-8182-f6d2ba4166a6"}`
	if string(got) != want {
		t.Errorf("json.Marshal(doc) =\n%s\nwant\n%s", got, want)
	}
}

func TestFormatTime(t *testing.T) {
	t.Parallel()
	in := time.Date(2026, 8, 1, 14, 0, 5, 0, time.FixedZone("x", 2*3600))
	got := FormatTime(in)
	if want := "08/01/26 12:00:05 -0000"; got != want {
		t.Errorf("FormatTime(%v) = %q, want %q", in, got, want)
	}
	back, err := time.Parse(TimeLayout, got)
	if err != nil || !back.Equal(in) {
		t.Errorf("time.Parse(TimeLayout, %q) = %v, %v; want %v", got, back, err, in)
	}
}

func TestSignAzureShape(t *testing.T) {
	t.Parallel()
	ca, err := NewCA(CAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	content := []byte(`{"vmId":"x"}`)
	sig, err := ca.Sign(content)
	if err != nil {
		t.Fatal(err)
	}
	p7 := mustParse(t, sig)
	if string(p7.Content) != string(content) {
		t.Errorf("content = %q, want %q", p7.Content, content)
	}
	if len(p7.Certificates) != 1 || !p7.Certificates[0].Equal(ca.Leaf) {
		t.Errorf("bag holds %d certificates, want only the leaf", len(p7.Certificates))
	}
	if len(p7.Signers) != 1 {
		t.Fatalf("%d signers, want 1", len(p7.Signers))
	}
	si := p7.Signers[0]
	if len(si.AuthenticatedAttributes) != 0 {
		t.Errorf("%d authenticated attributes, want none", len(si.AuthenticatedAttributes))
	}
	if !si.DigestAlgorithm.Algorithm.Equal(pkcs7.OIDEncryptionAlgorithmRSASHA256) {
		t.Errorf("digest algorithm = %v, want sha256WithRSAEncryption (Azure's quirk)", si.DigestAlgorithm.Algorithm)
	}
	if !si.DigestEncryptionAlgorithm.Algorithm.Equal(pkcs7.OIDEncryptionAlgorithmRSA) {
		t.Errorf("digest encryption algorithm = %v, want rsaEncryption", si.DigestEncryptionAlgorithm.Algorithm)
	}
	if p7.GetOnlySigner() != p7.Certificates[0] {
		t.Error("GetOnlySigner is not the leaf")
	}
	if err := ca.Leaf.CheckSignature(x509.SHA256WithRSA, p7.Content, si.EncryptedDigest); err != nil {
		t.Errorf("leaf.CheckSignature: %v", err)
	}
}

func TestSignECDSA(t *testing.T) {
	t.Parallel()
	leaf, key := selfSigned(t)
	sig, err := Sign([]byte("{}"), leaf, key)
	if err != nil {
		t.Fatal(err)
	}
	p7 := mustParse(t, sig)
	if got := p7.Signers[0].DigestAlgorithm.Algorithm; !got.Equal(pkcs7.OIDDigestAlgorithmSHA256) {
		t.Errorf("digest algorithm = %v, want id-sha256", got)
	}
	if err := p7.Verify(); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
}

func TestSignKeyMismatch(t *testing.T) {
	t.Parallel()
	leaf, _ := selfSigned(t)
	_, other := selfSigned(t)
	if _, err := Sign([]byte("{}"), leaf, other); err == nil {
		t.Error("Sign with a key that is not the leaf's succeeded, want error")
	}
}

func mustParse(t *testing.T, sig string) *pkcs7.PKCS7 {
	t.Helper()
	der, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil {
		t.Fatal(err)
	}
	p7, err := pkcs7.Parse(der)
	if err != nil {
		t.Fatal(err)
	}
	return p7
}

func selfSigned(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
