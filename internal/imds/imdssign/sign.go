// Package imdssign mints Azure IMDS attested documents signed by a local CA
// for the IMDS emulator and for tests.
//
// It produces what Azure produces: base64 DER PKCS#7 SignedData with the JSON
// document embedded, only the signing leaf in the certificate bag, one
// SignerInfo, SHA-256 and no authenticated attributes. For an RSA leaf the
// digest algorithm is sha256WithRSAEncryption, the signature OID that Azure
// puts where a digest OID belongs, so verifiers are tested against the quirk
// they meet in production.
//
// Nothing here verifies anything; the verifier is package attest, which must
// never import this package.
package imdssign

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/smallstep/pkcs7"
)

// TimeLayout is the Go layout of the timeStamp values in an attested
// document, e.g. "11/20/18 22:07:39 -0000".
const TimeLayout = "01/02/06 15:04:05 -0700"

// Document is the signed JSON of an attested document, with Azure's field
// names. Marshal it with encoding/json and pass the bytes to Sign.
type Document struct {
	LicenseType    string    `json:"licenseType,omitempty"` // Azure Hybrid Benefit VMs only
	Nonce          string    `json:"nonce"`
	Plan           Plan      `json:"plan"`
	SKU            string    `json:"sku"`
	SubscriptionID string    `json:"subscriptionId"`
	TimeStamp      TimeStamp `json:"timeStamp"`
	VMID           string    `json:"vmId"`
}

// Plan is the Marketplace plan of the VM image; Azure sends empty strings
// for images without one.
type Plan struct {
	Name      string `json:"name"`
	Product   string `json:"product"`
	Publisher string `json:"publisher"`
}

// TimeStamp is the validity window of a document. It marshals both times in
// TimeLayout, in UTC.
type TimeStamp struct {
	CreatedOn time.Time
	ExpiresOn time.Time
}

// MarshalJSON encodes ts as Azure does: {"createdOn":"…","expiresOn":"…"}.
func (ts TimeStamp) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		CreatedOn string `json:"createdOn"`
		ExpiresOn string `json:"expiresOn"`
	}{FormatTime(ts.CreatedOn), FormatTime(ts.ExpiresOn)})
}

// FormatTime formats t in UTC with TimeLayout, writing the zero offset as
// "-0000" like Azure does.
func FormatTime(t time.Time) string {
	s := t.UTC().Format(TimeLayout)
	return strings.TrimSuffix(s, "+0000") + "-0000"
}

// Sign returns the base64 (standard encoding) DER PKCS#7 SignedData of
// content signed by key, whose public half must be leaf's. The leaf is the
// only certificate in the bag; intermediates are fetched by verifiers from
// the leaf's AIA URL, as for Azure. key may be RSA (signed like Azure, see
// the package comment) or ECDSA (id-sha256 with ecdsa-with-SHA256).
func Sign(content []byte, leaf *x509.Certificate, key crypto.Signer) (string, error) {
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return "", errors.New("sign attested document: key does not match the leaf certificate")
	}
	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		return "", fmt.Errorf("sign attested document: %w", err)
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	_, isRSA := key.Public().(*rsa.PublicKey)
	_, isECDSA := key.Public().(*ecdsa.PublicKey)
	switch {
	case isRSA:
		sd.SetEncryptionAlgorithm(pkcs7.OIDEncryptionAlgorithmRSA)
	case !isECDSA:
		return "", fmt.Errorf("sign attested document: unsupported key type %T", key.Public())
	}
	if err := sd.SignWithoutAttr(leaf, key, pkcs7.SignerInfoConfig{}); err != nil {
		return "", fmt.Errorf("sign attested document: %w", err)
	}
	if isRSA {
		// Without authenticated attributes the digest OID is not part of
		// what is signed, so rewriting it leaves the signature valid.
		raw := sd.GetSignedData()
		azureDigest := pkix.AlgorithmIdentifier{Algorithm: pkcs7.OIDEncryptionAlgorithmRSASHA256, Parameters: asn1.NullRawValue}
		raw.DigestAlgorithmIdentifiers = []pkix.AlgorithmIdentifier{azureDigest}
		raw.SignerInfos[0].DigestAlgorithm = azureDigest
		raw.SignerInfos[0].DigestEncryptionAlgorithm.Parameters = asn1.NullRawValue
	}
	der, err := sd.Finish()
	if err != nil {
		return "", fmt.Errorf("sign attested document: %w", err)
	}
	return base64.StdEncoding.EncodeToString(der), nil
}
