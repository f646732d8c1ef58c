package attest

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"time"

	"nodehotfix/internal/uuid"

	"github.com/smallstep/pkcs7"
)

// MaxTokenSize caps the base64 token, checked before decoding; a real
// document is a few KiB.
const MaxTokenSize = 16 << 10

// Defaults for the zero values of Config.
const (
	DefaultSkew            = 2 * time.Minute
	DefaultMaxUses         = 8
	DefaultReplayCacheSize = 65536
)

// DefaultSANDomains are the public cloud's metadata domain. Government,
// 21Vianet and other clouds use their own (metadata.azure.us, …).
func DefaultSANDomains() []string { return []string{"metadata.azure.com"} }

// DefaultAIAHosts are the hosts Microsoft publishes its intermediates on.
func DefaultAIAHosts() []string { return []string{"www.microsoft.com"} }

// Config configures a Verifier. Only Roots is required; every other zero
// value means the documented default.
type Config struct {
	// Roots are the trust anchors (for Azure: DigiCert Global Root G2,
	// Microsoft TLS RSA Root G2, and DigiCert Global Root CA for 21Vianet).
	// Required. Anyone who can issue a certificate under one of them with a
	// SAN under SANDomains can attest as any VM.
	Roots *x509.CertPool
	// Intermediates are offered to chain building, never trusted as roots,
	// so chains build without fetching (pre-bundled or emulator
	// intermediates). nil: none.
	Intermediates []*x509.Certificate
	// SANDomains: the signer needs a DNS SAN equal to one of them or ending
	// in "." plus one of them. The CN is ignored. nil: DefaultSANDomains.
	SANDomains []string

	// DisableAIA turns off fetching intermediates from the signer's AIA CA
	// Issuers URL; chains must then build from Intermediates.
	DisableAIA bool
	// AIAHosts are the hosts, as "host" or "host:port", an intermediate may
	// be fetched from, checked again on every redirect. nil: DefaultAIAHosts.
	AIAHosts []string
	// AIATransport performs the fetches. nil: a dedicated transport that
	// uses no proxy. The client around it adds a 5 s timeout and the host
	// checks; bodies are capped at 64 KiB.
	AIATransport http.RoundTripper

	// Skew is the clock difference tolerated against the document's
	// timestamps. 0: DefaultSkew.
	Skew time.Duration
	// MaxAge, if set, also rejects documents created more than MaxAge (plus
	// Skew) ago, whatever their expiresOn. 0: only expiresOn counts.
	MaxAge time.Duration
	// AllowedSubscriptions are the subscription IDs (UUIDs, any case) whose
	// VMs may attest. Empty: all.
	AllowedSubscriptions []string

	// MaxUses is how many times one document is accepted while it is valid.
	// 1 is strict single use (challenge mode). 0: DefaultMaxUses.
	MaxUses int
	// ReplayCacheSize bounds the documents remembered for MaxUses, about
	// 150 bytes each. 0: DefaultReplayCacheSize.
	ReplayCacheSize int

	// Now is the clock. nil: time.Now.
	Now func() time.Time
}

// Identity is what a verified document says about the VM. Every field comes
// from the signed content.
type Identity struct {
	VMID           string // lower-case UUID
	SubscriptionID string // lower-case UUID
	SKU            string
	LicenseType    string
	Nonce          string // for challenge mode, compared by the caller
	Plan           Plan
	CreatedOn      time.Time
	ExpiresOn      time.Time
	Uses           int // acceptances of this document so far, this one included
}

// Plan is the VM image's Marketplace plan; empty strings without one.
type Plan struct {
	Name, Product, Publisher string
}

// Verifier verifies attested documents. It is safe for concurrent use.
type Verifier struct {
	roots   *x509.CertPool
	domains []string
	inter   *intermediates
	skew    time.Duration
	maxAge  time.Duration
	subs    map[string]bool // empty: all allowed
	maxUses int
	replay  *replayCache
	chains  *chainCache
	now     func() time.Time
}

// New returns a Verifier for cfg, or an error if cfg is invalid.
func New(cfg Config) (*Verifier, error) {
	if cfg.Roots == nil {
		return nil, errors.New("new attested document verifier: no roots")
	}
	if cfg.Skew < 0 || cfg.MaxAge < 0 || cfg.MaxUses < 0 || cfg.ReplayCacheSize < 0 {
		return nil, errors.New("new attested document verifier: negative Skew, MaxAge, MaxUses or ReplayCacheSize")
	}
	for _, c := range cfg.Intermediates {
		if c == nil {
			return nil, errors.New("new attested document verifier: nil intermediate")
		}
	}
	v := &Verifier{
		roots:   cfg.Roots,
		skew:    cmpOr(cfg.Skew, DefaultSkew),
		maxAge:  cfg.MaxAge,
		maxUses: cmpOr(cfg.MaxUses, DefaultMaxUses),
		replay:  newReplayCache(cmpOr(cfg.ReplayCacheSize, DefaultReplayCacheSize)),
		chains:  newChainCache(),
		now:     cfg.Now,
	}
	if v.now == nil {
		v.now = time.Now
	}
	domains := cfg.SANDomains
	if domains == nil {
		domains = DefaultSANDomains()
	}
	if len(domains) == 0 {
		return nil, errors.New("new attested document verifier: empty SANDomains")
	}
	for _, d := range domains {
		d = strings.ToLower(d)
		if d == "" || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || strings.ContainsAny(d, "*/: ") {
			return nil, fmt.Errorf("new attested document verifier: invalid SAN domain %q", d)
		}
		v.domains = append(v.domains, d)
	}
	v.subs = make(map[string]bool, len(cfg.AllowedSubscriptions))
	for _, s := range cfg.AllowedSubscriptions {
		id, ok := uuid.Canonical(s)
		if !ok {
			return nil, fmt.Errorf("new attested document verifier: allowed subscription %q is not a UUID", s)
		}
		v.subs[id] = true
	}
	hosts := cfg.AIAHosts
	if hosts == nil {
		hosts = DefaultAIAHosts()
	}
	v.inter = newIntermediates(cfg.Intermediates, hosts, cfg.AIATransport, !cfg.DisableAIA)
	return v, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Verify checks the attested-document token (the base64 "signature" of the
// IMDS response) and returns the identity it attests. Every failure is an
// *Error. ctx bounds the intermediate fetch, the only I/O.
//
// The checks, in order: size; strict base64; PKCS#7 parse (panics
// recovered); exactly one SignerInfo whose certificate is in the bag (the
// signer); a SHA-2 digest; the signer's SAN; the content signature by that
// signer; the signer's chain to Roots at the current time with serverAuth,
// through configured, cached or AIA-fetched intermediates, never through bag
// certificates; the content; its validity window; the subscription; replay.
func (v *Verifier) Verify(ctx context.Context, token string) (Identity, error) {
	now := v.now()
	if len(token) > MaxTokenSize {
		return Identity{}, reject(ReasonTooLarge, fmt.Errorf("token of %d bytes exceeds %d", len(token), MaxTokenSize))
	}
	// Strict still skips CR and LF; a token never contains them.
	if strings.ContainsAny(token, "\r\n") {
		return Identity{}, reject(ReasonMalformed, errors.New("token contains a line break"))
	}
	der, err := base64.StdEncoding.Strict().DecodeString(token)
	if err != nil || len(der) == 0 {
		return Identity{}, reject(ReasonMalformed, errors.New("token is not standard base64"))
	}
	// The library drops bytes after the first element; DER input (what Azure
	// sends) gets that checked here, BER is left to the library.
	var outer asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &outer); err == nil && len(rest) > 0 {
		return Identity{}, reject(ReasonMalformed, errors.New("trailing data after PKCS#7"))
	}
	s, err := parseSigned(der)
	if err != nil {
		return Identity{}, err
	}
	alg, err := signatureAlgorithm(s.info.digest, s.info.enc)
	if err != nil {
		return Identity{}, reject(ReasonAlgorithm, err)
	}
	if !v.sanAllowed(s.signer) {
		return Identity{}, reject(ReasonSAN, errors.New("signer has no DNS SAN under an allowed domain"))
	}
	if err := verifySignature(s, alg, now); err != nil {
		return Identity{}, reject(ReasonSignature, err)
	}
	if err := v.verifyChain(ctx, s.signer, now); err != nil {
		return Identity{}, err
	}

	d, err := parseContent(s.p7.Content)
	if err != nil {
		return Identity{}, reject(ReasonContent, err)
	}
	if d.createdOn.After(now.Add(v.skew)) {
		return Identity{}, reject(ReasonNotYetValid, errors.New("createdOn is in the future"))
	}
	end := d.expiresOn
	if v.maxAge > 0 && d.createdOn.Add(v.maxAge).Before(end) {
		end = d.createdOn.Add(v.maxAge)
	}
	end = end.Add(v.skew)
	if now.After(end) {
		return Identity{}, reject(ReasonExpired, errors.New("document expired"))
	}
	if len(v.subs) > 0 && !v.subs[d.subscriptionID] {
		return Identity{}, reject(ReasonSubscription, errors.New("subscription not allowed"))
	}
	// Keyed by the signed bytes, not the token: the unsigned parts of a token
	// (bag, encoding) can be varied to make a "new" token for the same document.
	uses := v.replay.use(sha256.Sum256(s.p7.Content), end, now)
	if uses > v.maxUses {
		return Identity{}, reject(ReasonReplay, fmt.Errorf("document accepted %d times already", v.maxUses))
	}
	return Identity{
		VMID:           d.vmID,
		SubscriptionID: d.subscriptionID,
		SKU:            d.sku,
		LicenseType:    d.licenseType,
		Nonce:          d.nonce,
		Plan:           d.plan,
		CreatedOn:      d.createdOn,
		ExpiresOn:      d.expiresOn,
		Uses:           uses,
	}, nil
}

// signed is a parsed token with its only signer resolved.
type signed struct {
	p7     *pkcs7.PKCS7
	signer *x509.Certificate
	info   signerInfo
}

// signerInfo is what Verify needs of the SignerInfo, copied out of the
// library's unexported type.
type signerInfo struct {
	digest, enc     asn1.ObjectIdentifier // digestAlgorithm, digestEncryptionAlgorithm
	hasAuthAttrs    bool
	encryptedDigest []byte
}

// parseSigned parses der and resolves its signer. The library has panicked
// on malformed input before (smallstep/pkcs7#62), so it runs under recover.
func parseSigned(der []byte) (signed, error) {
	var s signed
	err := safely(func() error {
		p7, err := pkcs7.Parse(der)
		if err != nil {
			return reject(ReasonMalformed, err)
		}
		if len(p7.Signers) != 1 {
			return reject(ReasonSigner, fmt.Errorf("%d signers, want 1", len(p7.Signers)))
		}
		signer := p7.GetOnlySigner()
		if signer == nil {
			return reject(ReasonSigner, errors.New("signer certificate not in the bag"))
		}
		si := p7.Signers[0]
		s = signed{p7: p7, signer: signer}
		s.info = signerInfo{
			digest:          si.DigestAlgorithm.Algorithm,
			enc:             si.DigestEncryptionAlgorithm.Algorithm,
			hasAuthAttrs:    len(si.AuthenticatedAttributes) > 0,
			encryptedDigest: si.EncryptedDigest,
		}
		return nil
	})
	var e *Error
	switch {
	case err == nil:
		return s, nil
	case errors.As(err, &e):
		return signed{}, e
	default:
		return signed{}, reject(ReasonMalformed, err)
	}
}

// safely runs f, turning a panic into an error.
func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if re, ok := r.(runtime.Error); ok {
				err = fmt.Errorf("pkcs7 panic: %w", re)
			} else {
				err = errors.New("pkcs7 panic")
			}
		}
	}()
	return f()
}

// signatureAlgorithm maps a SignerInfo's digest and signature algorithms to
// the one x509 algorithm the content signature is checked with. Only SHA-2
// digests pass. A signature OID naming a hash must name the digest's hash,
// so the library's laxer mapping (which lets one OID override the other)
// never decides.
func signatureAlgorithm(digest, enc asn1.ObjectIdentifier) (x509.SignatureAlgorithm, error) {
	type pair struct {
		digest, rsaSig, ecdsaSig asn1.ObjectIdentifier
		rsa, ecdsa               x509.SignatureAlgorithm
	}
	for _, p := range []pair{
		{pkcs7.OIDDigestAlgorithmSHA256, pkcs7.OIDEncryptionAlgorithmRSASHA256, pkcs7.OIDDigestAlgorithmECDSASHA256, x509.SHA256WithRSA, x509.ECDSAWithSHA256},
		{pkcs7.OIDDigestAlgorithmSHA384, pkcs7.OIDEncryptionAlgorithmRSASHA384, pkcs7.OIDDigestAlgorithmECDSASHA384, x509.SHA384WithRSA, x509.ECDSAWithSHA384},
		{pkcs7.OIDDigestAlgorithmSHA512, pkcs7.OIDEncryptionAlgorithmRSASHA512, pkcs7.OIDDigestAlgorithmECDSASHA512, x509.SHA512WithRSA, x509.ECDSAWithSHA512},
	} {
		// Azure puts sha256WithRSAEncryption where the digest OID belongs.
		rsaAsDigest := digest.Equal(p.rsaSig)
		if !digest.Equal(p.digest) && !rsaAsDigest {
			continue
		}
		switch {
		case enc.Equal(pkcs7.OIDEncryptionAlgorithmRSA), enc.Equal(p.rsaSig):
			return p.rsa, nil
		case enc.Equal(p.ecdsaSig) && !rsaAsDigest:
			return p.ecdsa, nil
		}
		return 0, fmt.Errorf("signature algorithm %s not allowed with digest %s", enc, digest)
	}
	return 0, fmt.Errorf("digest algorithm %s not allowed", digest)
}

// verifySignature checks the content signature with s.signer, the same
// certificate the SAN and chain checks look at.
func verifySignature(s signed, alg x509.SignatureAlgorithm, now time.Time) error {
	if !s.info.hasAuthAttrs {
		return s.signer.CheckSignature(alg, s.p7.Content, s.info.encryptedDigest)
	}
	// With authenticated attributes the signature covers them, and their
	// messageDigest must match the content; the library checks both,
	// resolving the signer by the same issuer and serial as GetOnlySigner.
	// A nil trust store skips its chain check: verifyChain does ours.
	return safely(func() error { return s.p7.VerifyWithChainAtTime(nil, now) })
}

// sanAllowed reports whether one of c's DNS SANs is an allowed domain or a
// subdomain of one.
func (v *Verifier) sanAllowed(c *x509.Certificate) bool {
	for _, name := range c.DNSNames {
		name = strings.ToLower(name)
		for _, d := range v.domains {
			if name == d {
				return true
			}
			if sub, ok := strings.CutSuffix(name, "."+d); ok && sub != "" && !strings.HasSuffix(sub, ".") {
				return true
			}
		}
	}
	return false
}

// verifyChain verifies that leaf chains to a root at now with serverAuth. If
// the known intermediates do not suffice it fetches the one at leaf's AIA URL
// and, once a chain through it verifies, caches it.
func (v *Verifier) verifyChain(ctx context.Context, leaf *x509.Certificate, now time.Time) error {
	if v.chains.verified(leaf, now) {
		return nil
	}
	opts := x509.VerifyOptions{
		Roots:         v.roots,
		Intermediates: v.inter.current(),
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	chains, err := leaf.Verify(opts)
	if err == nil {
		v.chains.add(chains[0])
		return nil
	}
	if !intermediateMissing(err, leaf) {
		return reject(ReasonChain, err)
	}
	aia := v.inter.issuerURL(leaf)
	if aia == "" {
		return reject(ReasonChain, fmt.Errorf("%w (no allowed AIA URL to fetch an intermediate from)", err))
	}
	if v.inter.cached(aia, now) != nil {
		return reject(ReasonChain, err) // the intermediate from aia was in the pool already
	}
	c, err := v.inter.fetch(ctx, aia, now)
	if err != nil {
		return reject(ReasonIntermediate, err)
	}
	opts.Intermediates = opts.Intermediates.Clone()
	opts.Intermediates.AddCert(c)
	chains, err = leaf.Verify(opts)
	if err != nil {
		return reject(ReasonChain, err)
	}
	v.inter.add(aia, c)
	v.chains.add(chains[0])
	return nil
}

// intermediateMissing reports whether a chain error may be cured by a fresh
// intermediate: no issuer was found, or the one found (say, a preloaded
// intermediate that has since expired) is invalid. Errors about the leaf
// itself are final.
func intermediateMissing(err error, leaf *x509.Certificate) bool {
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		return true
	}
	var invalid x509.CertificateInvalidError
	return errors.As(err, &invalid) && invalid.Cert != nil && !invalid.Cert.Equal(leaf)
}
