package attest

import (
	"encoding/pem"
	"testing"
)

func TestParseCertificatesPEM(t *testing.T) {
	t.Parallel()
	fx := mustFixture(t)
	block := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	root, inter := block("CERTIFICATE", fx.ca.Root.Raw), block("CERTIFICATE", fx.ca.Intermediate.Raw)

	certs, err := ParseCertificatesPEM([]byte("\n" + root + "\n" + inter + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) != 2 || !certs[0].Equal(fx.ca.Root) || !certs[1].Equal(fx.ca.Intermediate) {
		t.Errorf("ParseCertificatesPEM returned %d certificates, want root and intermediate", len(certs))
	}
	if _, err := RootsFromPEM(fx.ca.RootPEM()); err != nil {
		t.Errorf("RootsFromPEM(imdssign root) = %v", err)
	}

	for name, in := range map[string]string{
		"empty":          "",
		"whitespace":     " \n\t",
		"garbage-after":  root + "garbage",
		"garbage-before": "garbage\n" + root,
		"private-key":    root + block("PRIVATE KEY", []byte{1}),
		"bad-der":        block("CERTIFICATE", []byte{0x30, 0x03, 1, 2, 3}),
	} {
		if _, err := ParseCertificatesPEM([]byte(in)); err == nil {
			t.Errorf("ParseCertificatesPEM(%s) succeeded, want error", name)
		}
	}
}
