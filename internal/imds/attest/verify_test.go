package attest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/smallstep/pkcs7"

	"nodehotfix/internal/imds/imdssign"
	"nodehotfix/internal/uuid"
)

var testNow = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

const (
	testVMID   = "02aab8a4-74ef-476e-8182-f6d2ba4166a6"
	testSub    = "8d10da13-8125-4ba9-a717-bf7490507b3d"
	anotherSub = "11111111-2222-3333-4444-555555555555"
)

// fixture is minted once per test binary: RSA key generation is slow.
type fixture struct {
	ca     *imdssign.CA // root → intermediate → RSA leaf, AIA at imdssign.DefaultAIAURL
	roots  *x509.CertPool
	direct *imdssign.CA // root → leaf, its root in roots too
	other  *imdssign.CA // a CA nobody pinned
}

var fixtures = sync.OnceValues(func() (fixture, error) {
	validity := imdssign.CAConfig{NotBefore: testNow.Add(-24 * time.Hour), NotAfter: testNow.AddDate(1, 0, 0)}
	var fx fixture
	var err error
	withInter := validity
	withInter.Intermediate = true
	if fx.ca, err = imdssign.NewCA(withInter); err != nil {
		return fx, err
	}
	if fx.direct, err = imdssign.NewCA(validity); err != nil {
		return fx, err
	}
	if fx.other, err = imdssign.NewCA(validity); err != nil {
		return fx, err
	}
	fx.roots = x509.NewCertPool()
	fx.roots.AddCert(fx.ca.Root)
	fx.roots.AddCert(fx.direct.Root)
	return fx, nil
})

func mustFixture(t testing.TB) fixture {
	t.Helper()
	fx, err := fixtures()
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

// baseConfig verifies offline: the intermediate is preloaded and AIA is off.
func baseConfig(fx fixture) Config {
	return Config{
		Roots:         fx.roots,
		Intermediates: []*x509.Certificate{fx.ca.Intermediate},
		DisableAIA:    true,
		Now:           func() time.Time { return testNow },
	}
}

func mustNew(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func validDoc() imdssign.Document {
	return imdssign.Document{
		Nonce:          "abcdefghij0123456789ABCDEFGHIJKL",
		Plan:           imdssign.Plan{Name: "p", Product: "q", Publisher: "r"},
		SKU:            "ubuntu-24_04-lts",
		SubscriptionID: testSub,
		TimeStamp:      imdssign.TimeStamp{CreatedOn: testNow.Add(-time.Minute), ExpiresOn: testNow.Add(6 * time.Hour)},
		VMID:           testVMID,
	}
}

func content(t testing.TB, mod func(*imdssign.Document)) []byte {
	t.Helper()
	d := validDoc()
	if mod != nil {
		mod(&d)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustSign(t testing.TB, data []byte, leaf *x509.Certificate, key crypto.Signer) string {
	t.Helper()
	tok, err := imdssign.Sign(data, leaf, key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// signRaw builds a token with the library directly, for the shapes
// imdssign refuses to make: digest as given, then mutate before Finish.
func signRaw(t testing.TB, data []byte, leaf *x509.Certificate, key crypto.Signer, digest asn1.ObjectIdentifier, mutate func(*pkcs7.SignedData)) string {
	t.Helper()
	sd, err := pkcs7.NewSignedData(data)
	if err != nil {
		t.Fatal(err)
	}
	sd.SetDigestAlgorithm(digest)
	if err := sd.SignWithoutAttr(leaf, key, pkcs7.SignerInfoConfig{}); err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(sd)
	}
	der, err := sd.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// mintLeaf issues an ECDSA certificate from tmpl under parent (self-signed
// when parent is nil), defaulting serial, validity and serverAuth.
func mintLeaf(t testing.TB, tmpl *x509.Certificate, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber == nil {
		if tmpl.SerialNumber, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
			t.Fatal(err)
		}
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = testNow.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = testNow.Add(24 * time.Hour)
	}
	if tmpl.ExtKeyUsage == nil {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func wantReason(t *testing.T, err error, want Reason) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Verify error = %v, want *Error with reason %q", err, want)
	}
	if e.Reason != want {
		t.Errorf("Verify reason = %q (%v), want %q", e.Reason, err, want)
	}
}

func TestVerifyValid(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	v := mustNew(t, baseConfig(fx))
	got, err := v.Verify(t.Context(), mustSign(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey))
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{
		VMID:           testVMID,
		SubscriptionID: testSub,
		SKU:            "ubuntu-24_04-lts",
		Nonce:          "abcdefghij0123456789ABCDEFGHIJKL",
		Plan:           Plan{Name: "p", Product: "q", Publisher: "r"},
		CreatedOn:      testNow.Add(-time.Minute),
		ExpiresOn:      testNow.Add(6 * time.Hour),
		Uses:           1,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("Verify identity mismatch (-want +got):\n%s", diff)
	}
}

func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	ecLeaf := func(names ...string) func(t *testing.T) string {
		return func(t *testing.T) string {
			leaf, key := mintLeaf(t, &x509.Certificate{Subject: pkix.Name{CommonName: "x"}, DNSNames: names}, fx.ca.Intermediate, fx.ca.IntermediateKey)
			return mustSign(t, content(t, nil), leaf, key)
		}
	}
	withContent := func(raw string) func(t *testing.T) string {
		return func(t *testing.T) string { return mustSign(t, []byte(raw), fx.ca.Leaf, fx.ca.LeafKey) }
	}
	withDoc := func(mod func(*imdssign.Document)) func(t *testing.T) string {
		return func(t *testing.T) string { return mustSign(t, content(t, mod), fx.ca.Leaf, fx.ca.LeafKey) }
	}
	tests := []struct {
		name  string
		token func(t *testing.T) string
		cfg   func(*Config)
	}{
		{name: "direct-root", token: func(t *testing.T) string {
			return mustSign(t, content(t, nil), fx.direct.Leaf, fx.direct.LeafKey)
		}},
		{name: "san-eastus", token: ecLeaf("eastus.metadata.azure.com")},
		{name: "san-two-labels", token: ecLeaf("a.b.metadata.azure.com")},
		{name: "san-apex", token: ecLeaf("metadata.azure.com")},
		{name: "san-upper-case", token: ecLeaf("EastUS.Metadata.Azure.COM")},
		{name: "san-second-name", token: ecLeaf("example.com", "westus.metadata.azure.com")},
		{name: "san-other-cloud-configured", token: ecLeaf("usgovvirginia.metadata.azure.us"), cfg: func(c *Config) {
			c.SANDomains = []string{"metadata.azure.com", "metadata.azure.us"}
		}},
		{name: "sha384-digest", token: func(t *testing.T) string {
			leaf, key := mintLeaf(t, &x509.Certificate{DNSNames: []string{"eastus.metadata.azure.com"}}, fx.ca.Intermediate, fx.ca.IntermediateKey)
			return signRaw(t, content(t, nil), leaf, key, pkcs7.OIDDigestAlgorithmSHA384, nil)
		}},
		{name: "authenticated-attributes", token: func(t *testing.T) string {
			// The library rejects a signingTime outside the signer's validity,
			// and it stamps the real clock, so this leaf is valid for decades.
			leaf, key := mintLeaf(t, &x509.Certificate{
				DNSNames:  []string{"eastus.metadata.azure.com"},
				NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
				NotAfter:  time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
			}, fx.ca.Intermediate, fx.ca.IntermediateKey)
			sd, err := pkcs7.NewSignedData(content(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
			if err := sd.AddSigner(leaf, key, pkcs7.SignerInfoConfig{}); err != nil {
				t.Fatal(err)
			}
			der, err := sd.Finish()
			if err != nil {
				t.Fatal(err)
			}
			return base64.StdEncoding.EncodeToString(der)
		}},
		{name: "expires-at-skew-edge", token: withDoc(func(d *imdssign.Document) {
			d.TimeStamp = imdssign.TimeStamp{CreatedOn: testNow.Add(-time.Hour), ExpiresOn: testNow.Add(-DefaultSkew)}
		})},
		{name: "created-at-skew-edge", token: withDoc(func(d *imdssign.Document) {
			d.TimeStamp = imdssign.TimeStamp{CreatedOn: testNow.Add(DefaultSkew), ExpiresOn: testNow.Add(time.Hour)}
		})},
		{name: "within-max-age", token: withDoc(nil), cfg: func(c *Config) { c.MaxAge = 5 * time.Minute }},
		{name: "allowed-subscription-any-case", token: withDoc(nil), cfg: func(c *Config) {
			c.AllowedSubscriptions = []string{anotherSub, strings.ToUpper(testSub)}
		}},
		{name: "upper-case-ids", token: withDoc(func(d *imdssign.Document) {
			d.VMID, d.SubscriptionID = strings.ToUpper(testVMID), strings.ToUpper(testSub)
		})},
		{name: "unknown-fields", token: withContent(`{"vmId":"` + testVMID + `","subscriptionId":"` + testSub + `",` +
			`"timeStamp":{"createdOn":"08/01/26 11:59:00 -0000","expiresOn":"08/01/26 18:00:00 -0000","zone":1},` +
			`"newField":{"nested":[1,2,{"vmId":"x"}]},"sku":"s","sku2":"t"}`)},
		{name: "minimal-fields", token: withContent(`{"vmId":"` + testVMID + `","subscriptionId":"` + testSub + `",` +
			`"timeStamp":{"createdOn":"08/01/26 11:59:00 -0000","expiresOn":"08/01/26 18:00:00 -0000"}}`)},
		{name: "azure-offset-form", token: withContent(`{"vmId":"` + testVMID + `","subscriptionId":"` + testSub + `",` +
			`"timeStamp":{"createdOn":"08/01/26 13:59:00 +0200","expiresOn":"08/01/26 18:00:00 +0000"}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig(fx)
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			id, err := mustNew(t, cfg).Verify(t.Context(), tt.token(t))
			if err != nil {
				t.Fatalf("Verify: %v, want success", err)
			}
			if id.VMID != testVMID || id.SubscriptionID != testSub {
				t.Errorf("Verify identity = %+v, want vmId %s subscription %s", id, testVMID, testSub)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	b64 := func(b ...byte) func(*testing.T) string {
		return func(*testing.T) string { return base64.StdEncoding.EncodeToString(b) }
	}
	literal := func(s string) func(*testing.T) string { return func(*testing.T) string { return s } }
	withDoc := func(mod func(*imdssign.Document)) func(t *testing.T) string {
		return func(t *testing.T) string { return mustSign(t, content(t, mod), fx.ca.Leaf, fx.ca.LeafKey) }
	}
	withContent := func(raw string) func(t *testing.T) string {
		return func(t *testing.T) string { return mustSign(t, []byte(raw), fx.ca.Leaf, fx.ca.LeafKey) }
	}
	okTimeStamp := `"timeStamp":{"createdOn":"08/01/26 11:59:00 -0000","expiresOn":"08/01/26 18:00:00 -0000"}`
	ids := `"vmId":"` + testVMID + `","subscriptionId":"` + testSub + `"`
	ecLeaf := func(tmpl *x509.Certificate) func(t *testing.T) string {
		return func(t *testing.T) string {
			leaf, key := mintLeaf(t, tmpl, fx.ca.Intermediate, fx.ca.IntermediateKey)
			return mustSign(t, content(t, nil), leaf, key)
		}
	}
	// rsaLeaf re-signs with the fixture's RSA leaf, mutating the SignerInfo.
	rsaLeaf := func(digest asn1.ObjectIdentifier, mutate func(*pkcs7.SignedData)) func(t *testing.T) string {
		return func(t *testing.T) string {
			return signRaw(t, content(t, nil), fx.ca.Leaf, fx.ca.LeafKey, digest, mutate)
		}
	}
	setDigest := func(oid asn1.ObjectIdentifier) func(*pkcs7.SignedData) {
		return func(sd *pkcs7.SignedData) { sd.GetSignedData().SignerInfos[0].DigestAlgorithm.Algorithm = oid }
	}
	setEnc := func(oid asn1.ObjectIdentifier) func(*pkcs7.SignedData) {
		return func(sd *pkcs7.SignedData) {
			sd.GetSignedData().SignerInfos[0].DigestEncryptionAlgorithm.Algorithm = oid
		}
	}
	valid := withDoc(nil)
	tampered := content(t, func(d *imdssign.Document) { d.VMID = "99999999-2222-3333-4444-555555555555" })

	tests := []struct {
		name  string
		token func(t *testing.T) string
		cfg   func(*Config)
		want  Reason
	}{
		// §5 row 11: garbage and the BER crashers, without a panic.
		{"garbage-base64", literal("%%% not base64 %%%"), nil, ReasonMalformed},
		{"empty", literal(""), nil, ReasonMalformed},
		{"url-alphabet", literal("MIE-_w=="), nil, ReasonMalformed},
		{"missing-padding", literal("MIE"), nil, ReasonMalformed},
		{"line-break", func(t *testing.T) string { tok := valid(t); return tok[:64] + "\n" + tok[64:] }, nil, ReasonMalformed},
		{"not-pkcs7", b64([]byte("hello, world")...), nil, ReasonMalformed},
		{"crasher-30-81", b64(0x30, 0x81), nil, ReasonMalformed},
		{"crasher-30-84-01", b64(0x30, 0x84, 0x01), nil, ReasonMalformed},
		{"crasher-1f-80", b64(0x1F, 0x80), nil, ReasonMalformed},
		{"crasher-1f-05", b64(0x1F, 0x05), nil, ReasonMalformed},
		{"crasher-30-82-06", b64(0x30, 0x82, 0x06), nil, ReasonMalformed},
		{"trailing-der", func(t *testing.T) string {
			der, _ := base64.StdEncoding.DecodeString(valid(t))
			return base64.StdEncoding.EncodeToString(append(der, 0))
		}, nil, ReasonMalformed},

		// Row 12: the size cap applies before decoding (this is not base64).
		{"too-large-garbage", literal(strings.Repeat("!", MaxTokenSize+1)), nil, ReasonTooLarge},
		{"too-large-base64", literal(strings.Repeat("A", MaxTokenSize+4)), nil, ReasonTooLarge},

		// Row 13: a self-signed, SHA-1, CN-only, expired "Azure" leaf.
		{"sha1-cn-only-self-signed-expired", func(t *testing.T) string {
			leaf, key := mintLeaf(t, &x509.Certificate{
				Subject:            pkix.Name{CommonName: "testsubdomain.metadata.azure.com"},
				SignatureAlgorithm: x509.ECDSAWithSHA1,
				NotBefore:          testNow.AddDate(-8, 0, 0),
				NotAfter:           testNow.AddDate(-7, 0, 0),
			}, nil, nil)
			return mustSign(t, content(t, nil), leaf, key)
		}, nil, ReasonSAN},

		// Row 14: signer confusion, SPIRE's regression recipe.
		{"signer-confusion", func(t *testing.T) string {
			attacker, key := mintLeaf(t, &x509.Certificate{DNSNames: []string{"eastus.metadata.azure.com"}}, nil, nil)
			sd, err := pkcs7.NewSignedData(content(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			sd.AddCertificate(fx.ca.Leaf) // the genuine leaf first in the bag
			sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
			if err := sd.SignWithoutAttr(attacker, key, pkcs7.SignerInfoConfig{}); err != nil {
				t.Fatal(err)
			}
			der, err := sd.Finish()
			if err != nil {
				t.Fatal(err)
			}
			return base64.StdEncoding.EncodeToString(der)
		}, nil, ReasonChain},
		{"signer-confusion-same-issuer-serial", func(t *testing.T) string {
			// An attacker certificate claiming the genuine leaf's issuer and
			// serial: whichever of the two the SignerInfo resolves to, the
			// signature, SAN and chain are all checked on that one.
			attacker, key := mintLeaf(t, &x509.Certificate{
				SerialNumber: fx.ca.Leaf.SerialNumber,
				RawSubject:   fx.ca.Intermediate.RawSubject,
				DNSNames:     []string{"eastus.metadata.azure.com"},
			}, nil, nil)
			sd, err := pkcs7.NewSignedData(content(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			sd.AddCertificate(fx.ca.Leaf)
			sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
			if err := sd.SignWithoutAttr(attacker, key, pkcs7.SignerInfoConfig{}); err != nil {
				t.Fatal(err)
			}
			der, err := sd.Finish()
			if err != nil {
				t.Fatal(err)
			}
			return base64.StdEncoding.EncodeToString(der)
		}, nil, ReasonSignature},

		// Row 15: zero or two SignerInfos, or a signer missing from the bag.
		{"no-signers", func(t *testing.T) string {
			sd, err := pkcs7.NewSignedData(content(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			sd.AddCertificate(fx.ca.Leaf)
			der, err := sd.Finish()
			if err != nil {
				t.Fatal(err)
			}
			return base64.StdEncoding.EncodeToString(der)
		}, nil, ReasonSigner},
		{"two-signers", func(t *testing.T) string {
			sd, err := pkcs7.NewSignedData(content(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
			for range 2 {
				if err := sd.SignWithoutAttr(fx.ca.Leaf, fx.ca.LeafKey, pkcs7.SignerInfoConfig{}); err != nil {
					t.Fatal(err)
				}
			}
			der, err := sd.Finish()
			if err != nil {
				t.Fatal(err)
			}
			return base64.StdEncoding.EncodeToString(der)
		}, nil, ReasonSigner},
		{"signer-not-in-bag", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, func(sd *pkcs7.SignedData) {
			sd.GetSignedData().SignerInfos[0].IssuerAndSerialNumber.SerialNumber = big.NewInt(42)
		}), nil, ReasonSigner},

		// Row 16: SAN lookalikes and the wrong cloud.
		{"san-suffix-attack", ecLeaf(&x509.Certificate{DNSNames: []string{"metadata.azure.com.evil.net"}}), nil, ReasonSAN},
		{"san-no-dot", ecLeaf(&x509.Certificate{DNSNames: []string{"evilmetadata.azure.com"}}), nil, ReasonSAN},
		{"san-cn-only", ecLeaf(&x509.Certificate{Subject: pkix.Name{CommonName: "metadata.azure.com"}}), nil, ReasonSAN},
		{"san-other-cloud", ecLeaf(&x509.Certificate{DNSNames: []string{"eastus.metadata.azure.us"}}), nil, ReasonSAN},
		{"san-empty-label", ecLeaf(&x509.Certificate{DNSNames: []string{"x..metadata.azure.com"}}), nil, ReasonSAN},

		// Row 17: unpinned root, expired leaf, weak or mismatched algorithms.
		{"unpinned-root", func(t *testing.T) string {
			return mustSign(t, content(t, nil), fx.other.Leaf, fx.other.LeafKey)
		}, nil, ReasonChain},
		{"intermediate-not-available", valid, func(c *Config) { c.Intermediates = nil }, ReasonChain},
		{"expired-leaf", ecLeaf(&x509.Certificate{
			DNSNames: []string{"eastus.metadata.azure.com"}, NotBefore: testNow.AddDate(-1, 0, 0), NotAfter: testNow.Add(-time.Hour),
		}), nil, ReasonChain},
		{"client-auth-only-leaf", ecLeaf(&x509.Certificate{
			DNSNames: []string{"eastus.metadata.azure.com"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}), nil, ReasonChain},
		{"sha1-digest", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA1, nil), nil, ReasonAlgorithm},
		{"md5-digest", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setDigest(asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 5})), nil, ReasonAlgorithm},
		{"sha1-with-rsa-as-digest", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setDigest(pkcs7.OIDEncryptionAlgorithmRSASHA1)), nil, ReasonAlgorithm},
		{"sha224-digest", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setDigest(pkcs7.OIDDigestAlgorithmSHA224)), nil, ReasonAlgorithm},
		{"signature-oid-names-sha1", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setEnc(pkcs7.OIDEncryptionAlgorithmRSASHA1)), nil, ReasonAlgorithm},
		{"signature-oid-names-other-sha2", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setEnc(pkcs7.OIDEncryptionAlgorithmRSASHA512)), nil, ReasonAlgorithm},
		{"ecdsa-with-rsa-digest-oid", func(t *testing.T) string {
			leaf, key := mintLeaf(t, &x509.Certificate{DNSNames: []string{"eastus.metadata.azure.com"}}, fx.ca.Intermediate, fx.ca.IntermediateKey)
			return signRaw(t, content(t, nil), leaf, key, pkcs7.OIDDigestAlgorithmSHA256, setDigest(pkcs7.OIDEncryptionAlgorithmRSASHA256))
		}, nil, ReasonAlgorithm},
		{"dsa-signature-oid", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setEnc(pkcs7.OIDDigestAlgorithmDSA)), nil, ReasonAlgorithm},

		// The signature must cover exactly the embedded content.
		{"tampered-content", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, func(sd *pkcs7.SignedData) {
			setContent(sd, tampered)
		}), nil, ReasonSignature},
		{"wrong-key-type-for-oid", rsaLeaf(pkcs7.OIDDigestAlgorithmSHA256, setEnc(pkcs7.OIDDigestAlgorithmECDSASHA256)), nil, ReasonSignature},
		{"authenticated-attributes-digest-mismatch", func(t *testing.T) string {
			leaf, key := mintLeaf(t, &x509.Certificate{
				DNSNames:  []string{"eastus.metadata.azure.com"},
				NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
				NotAfter:  time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
			}, fx.ca.Intermediate, fx.ca.IntermediateKey)
			sd, err := pkcs7.NewSignedData(content(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
			if err := sd.AddSigner(leaf, key, pkcs7.SignerInfoConfig{}); err != nil {
				t.Fatal(err)
			}
			setContent(sd, content(t, func(d *imdssign.Document) { d.SKU = "other" }))
			der, err := sd.Finish()
			if err != nil {
				t.Fatal(err)
			}
			return base64.StdEncoding.EncodeToString(der)
		}, nil, ReasonSignature},

		// Row 18: validity window and timestamp format.
		{"expired-document", withDoc(func(d *imdssign.Document) {
			d.TimeStamp = imdssign.TimeStamp{CreatedOn: testNow.Add(-time.Hour), ExpiresOn: testNow.Add(-DefaultSkew - time.Second)}
		}), nil, ReasonExpired},
		{"created-in-future", withDoc(func(d *imdssign.Document) {
			d.TimeStamp = imdssign.TimeStamp{CreatedOn: testNow.Add(DefaultSkew + time.Second), ExpiresOn: testNow.Add(time.Hour)}
		}), nil, ReasonNotYetValid},
		{"older-than-max-age", withDoc(func(d *imdssign.Document) {
			d.TimeStamp = imdssign.TimeStamp{CreatedOn: testNow.Add(-2 * time.Hour), ExpiresOn: testNow.Add(4 * time.Hour)}
		}), func(c *Config) { c.MaxAge = time.Hour }, ReasonExpired},
		{"rfc3339-timestamp", withContent(`{` + ids + `,"timeStamp":{"createdOn":"2026-08-01T11:59:00Z","expiresOn":"2026-08-01T18:00:00Z"}}`), nil, ReasonContent},
		{"fractional-seconds", withContent(`{` + ids + `,"timeStamp":{"createdOn":"08/01/26 11:59:00.5 -0000","expiresOn":"08/01/26 18:00:00 -0000"}}`), nil, ReasonContent},
		{"no-timestamp", withContent(`{` + ids + `}`), nil, ReasonContent},
		{"no-expiresOn", withContent(`{` + ids + `,"timeStamp":{"createdOn":"08/01/26 11:59:00 -0000"}}`), nil, ReasonContent},
		{"empty-createdOn", withContent(`{` + ids + `,"timeStamp":{"createdOn":"","expiresOn":"08/01/26 18:00:00 -0000"}}`), nil, ReasonContent},
		{"expires-before-created", withContent(`{` + ids + `,"timeStamp":{"createdOn":"08/01/26 11:59:00 -0000","expiresOn":"08/01/26 11:58:00 -0000"}}`), nil, ReasonContent},
		{"timestamp-number", withContent(`{` + ids + `,"timeStamp":{"createdOn":1785585540,"expiresOn":"08/01/26 18:00:00 -0000"}}`), nil, ReasonContent},

		// Row 20: identity fields and ambiguity.
		{"vmid-not-uuid", withDoc(func(d *imdssign.Document) { d.VMID = "my-vm" }), nil, ReasonContent},
		{"vmid-braced", withDoc(func(d *imdssign.Document) { d.VMID = "{" + testVMID + "}" }), nil, ReasonContent},
		{"vmid-empty", withDoc(func(d *imdssign.Document) { d.VMID = "" }), nil, ReasonContent},
		{"vmid-null", withContent(`{"vmId":null,"subscriptionId":"` + testSub + `",` + okTimeStamp + `}`), nil, ReasonContent},
		{"subscription-not-uuid", withDoc(func(d *imdssign.Document) { d.SubscriptionID = "prod" }), nil, ReasonContent},
		{"subscription-missing", withContent(`{"vmId":"` + testVMID + `",` + okTimeStamp + `}`), nil, ReasonContent},
		{"duplicate-subscriptionId", withContent(`{"subscriptionId":"` + anotherSub + `",` + ids + `,` + okTimeStamp + `}`), nil, ReasonContent},
		{"duplicate-vmId", withContent(`{` + ids + `,"vmId":"` + testVMID + `",` + okTimeStamp + `}`), nil, ReasonContent},
		{"case-variant-vmId", withContent(`{` + ids + `,"VMID":"99999999-2222-3333-4444-555555555555",` + okTimeStamp + `}`), nil, ReasonContent},
		{"duplicate-createdOn", withContent(`{` + ids + `,"timeStamp":{"createdOn":"08/01/26 11:59:00 -0000","createdOn":"08/01/26 11:59:00 -0000","expiresOn":"08/01/26 18:00:00 -0000"}}`), nil, ReasonContent},
		{"duplicate-timeStamp", withContent(`{` + ids + `,` + okTimeStamp + `,` + okTimeStamp + `}`), nil, ReasonContent},
		{"plan-not-object", withContent(`{` + ids + `,"plan":"x",` + okTimeStamp + `}`), nil, ReasonContent},
		{"trailing-json", withContent(`{` + ids + `,` + okTimeStamp + `}{}`), nil, ReasonContent},
		{"not-an-object", withContent(`[]`), nil, ReasonContent},
		{"empty-content", withContent(``), nil, ReasonContent},
		{"subscription-not-allowed", valid, func(c *Config) { c.AllowedSubscriptions = []string{anotherSub} }, ReasonSubscription},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig(fx)
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			id, err := mustNew(t, cfg).Verify(t.Context(), tt.token(t))
			if err == nil {
				t.Fatalf("Verify = %+v, want rejection %q", id, tt.want)
			}
			wantReason(t, err, tt.want)
			if id != (Identity{}) {
				t.Errorf("Verify returned identity %+v with an error", id)
			}
		})
	}
}

// setContent replaces the embedded content after signing.
func setContent(sd *pkcs7.SignedData, data []byte) {
	inner, _ := asn1.Marshal(data) // an OCTET STRING always marshals
	sd.GetSignedData().ContentInfo.Content = asn1.RawValue{Class: 2, Tag: 0, Bytes: inner, IsCompound: true}
}

// TestMicrosoftSample keeps Microsoft's published sample document as a
// golden negative: a self-signed, MD5, CN-only test certificate that expired
// in 2018. The library's Verify accepts it; ours must not, even at the time
// it was valid and with its own certificate as a root.
func TestMicrosoftSample(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/microsoft-sample.b64")
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	der, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		t.Fatal(err)
	}
	p7, err := pkcs7.Parse(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := p7.Verify(); err != nil {
		t.Fatalf("pkcs7 Verify() = %v; the pitfall this test documents is that it returns nil", err)
	}
	fx := mustFixture(t)
	sampleRoots := x509.NewCertPool()
	sampleRoots.AddCert(p7.Certificates[0])
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"pinned-roots-now", baseConfig(fx)},
		{"own-root-in-2018", Config{
			Roots:      sampleRoots,
			DisableAIA: true,
			Now:        func() time.Time { return time.Date(2018, 11, 20, 22, 8, 0, 0, time.UTC) },
		}},
	} {
		_, err := mustNew(t, tc.cfg).Verify(t.Context(), token)
		if err == nil {
			t.Fatalf("%s: Verify(microsoft sample) succeeded, want rejection", tc.name)
		}
		wantReason(t, err, ReasonSAN)
	}
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	roots := x509.NewCertPool()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no-roots", Config{}},
		{"empty-domains", Config{Roots: roots, SANDomains: []string{}}},
		{"dot-domain", Config{Roots: roots, SANDomains: []string{".metadata.azure.com"}}},
		{"wildcard-domain", Config{Roots: roots, SANDomains: []string{"*.metadata.azure.com"}}},
		{"bad-subscription", Config{Roots: roots, AllowedSubscriptions: []string{"prod"}}},
		{"nil-intermediate", Config{Roots: roots, Intermediates: []*x509.Certificate{nil}}},
		{"negative-skew", Config{Roots: roots, Skew: -time.Second}},
		{"negative-uses", Config{Roots: roots, MaxUses: -1}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("New(%s) succeeded, want error", tc.name)
		}
	}
}

var crashers = [][]byte{{0x30, 0x81}, {0x30, 0x84, 0x01}, {0x1F, 0x80}, {0x1F, 0x05}, {0x30, 0x82, 0x06}}

// fuzzSeeds returns valid tokens and the Microsoft sample.
func fuzzSeeds(f *testing.F, fx fixture) []string {
	seeds := []string{
		mustSign(f, content(f, nil), fx.ca.Leaf, fx.ca.LeafKey),
		mustSign(f, content(f, nil), fx.direct.Leaf, fx.direct.LeafKey),
	}
	raw, err := os.ReadFile("testdata/microsoft-sample.b64")
	if err != nil {
		f.Fatal(err)
	}
	return append(seeds, strings.TrimSpace(string(raw)))
}

// fuzzVerify returns a check that Verify never panics, fails only with a
// known *Error, and accepts only canonical identities.
func fuzzVerify(f *testing.F, fx fixture) func(t *testing.T, token string) {
	cfg := baseConfig(fx)
	cfg.MaxUses = 1 << 30
	v := mustNew(f, cfg)
	reasons := map[Reason]bool{}
	for _, r := range Reasons() {
		reasons[r] = true
	}
	return func(t *testing.T, token string) {
		id, err := v.Verify(t.Context(), token)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !reasons[e.Reason] {
				t.Fatalf("Verify error %v is not an *Error with a known reason", err)
			}
			return
		}
		if _, ok := uuid.Canonical(id.VMID); !ok || id.VMID != strings.ToLower(id.VMID) {
			t.Fatalf("accepted identity has vmId %q, want a lower-case UUID", id.VMID)
		}
	}
}

// FuzzVerify fuzzes the token as sent, base64 included.
func FuzzVerify(f *testing.F) {
	fx := mustFixture(f)
	for _, in := range crashers {
		f.Add(base64.StdEncoding.EncodeToString(in))
		f.Add(string(in))
	}
	for _, s := range fuzzSeeds(f, fx) {
		f.Add(s)
	}
	check := fuzzVerify(f, fx)
	f.Fuzz(check)
}

// FuzzVerifyDER fuzzes the decoded PKCS#7, so mutations reach the parser
// and the checks behind it instead of failing base64.
func FuzzVerifyDER(f *testing.F) {
	fx := mustFixture(f)
	for _, in := range crashers {
		f.Add(in)
	}
	for _, s := range fuzzSeeds(f, fx) {
		der, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(der)
	}
	check := fuzzVerify(f, fx)
	f.Fuzz(func(t *testing.T, der []byte) {
		check(t, base64.StdEncoding.EncodeToString(der))
	})
}
