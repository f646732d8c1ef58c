// Package attest verifies Azure IMDS attested documents on the server.
//
// A node proves it is an Azure VM by sending the "signature" of its IMDS
// attested-data response: base64 DER PKCS#7 SignedData whose embedded JSON
// (vmId, subscriptionId, timeStamp, …) is signed by a Microsoft leaf
// certificate for *.metadata.azure.com. Only the leaf is in the bag; its
// intermediate is published at the leaf's AIA URL.
//
// # Threat model
//
// The token is attacker input: anyone can send any bytes. An attacker wins by
// getting an identity accepted that Azure did not sign, or by crashing or
// stalling the service. What Verify does against each known way in:
//
//   - Identity from unsigned bytes (SPIRE aws_iid, 1.14.6): the identity is
//     parsed from p7.Content only, after the signature and chain checks.
//   - Signer confusion (SPIRE azure_imds, 1.14.7): the bag is unordered and
//     attacker-chosen. The signer is the certificate the single SignerInfo
//     names (GetOnlySigner), and that one object is SAN-checked,
//     chain-verified and used to check the signature. Bag certificates are
//     never roots and never intermediates.
//   - pkcs7.Verify is not verification: it accepts any self-signed signer
//     (it returns nil for Microsoft's own expired MD5 sample, kept in
//     testdata as a negative vector). Chains are verified with crypto/x509
//     against Config.Roots at the request time (not the signer's claimed
//     signing time), requiring serverAuth.
//   - Weak algorithms: the content signature is not chain verification, and
//     crypto/x509 still accepts SHA-1 there. Only SHA-256/384/512 digests
//     pass, including Azure's sha256WithRSAEncryption-as-digest quirk, and
//     a signature OID naming another hash than the digest is rejected.
//   - Parser panics (smallstep/pkcs7 v0.2.1 on 2-byte inputs): the token is
//     capped at MaxTokenSize before decoding and the library runs under
//     recover. v0.2.3, which we use, contains the fix; the recover stays,
//     and lpsd still needs a recovery interceptor for everything else.
//   - Ambiguous JSON: encoding/json keeps the last duplicate key and matches
//     names case-insensitively, so the fields we use are read by a strict
//     walker that rejects duplicates and case-variant twins. Unknown fields
//     are allowed because Microsoft adds fields over time.
//   - Timestamps: parsed in exactly TimeLayout; a parse failure rejects,
//     never yields a zero time. createdOn ≤ now+Skew and now ≤
//     expiresOn+Skew (and createdOn+MaxAge+Skew when set).
//   - Lookalike names: a DNS SAN must equal a configured domain or end in
//     "." plus it (eastus.metadata.azure.com, not
//     metadata.azure.com.evil.net or evilmetadata.azure.com); the CN is
//     ignored.
//
// # Order of checks
//
// Cheap, local checks come first and the only I/O (the AIA fetch) last, so
// only a well-formed document with an allowed SAN and a valid signature by
// its own signer can make us fetch: size, base64, parse, one signer,
// algorithm, SAN, content signature, chain, content, validity window,
// subscription, replay. A document failing several checks reports the first.
//
// # Intermediates and AIA
//
// Chains are built from Config.Intermediates plus a cache of intermediates
// fetched before. Only when that fails with "unknown authority" is the
// leaf's AIA CA Issuers URL fetched, and only from an allowlisted host
// (default www.microsoft.com) over http or https, re-checked on every
// redirect, within 5 s and the caller's ctx, with the body capped at 64 KiB,
// DER or PEM, exactly one CA certificate. At most two fetches run at once.
// A fetched intermediate is cached by URL only after a chain through it
// verified, so the cache holds nothing that does not chain to a root; it is
// bounded and an entry is refetched once its certificate expires. Roots are
// parsed once, by the caller. Intermediates are not pinned: Microsoft rotates
// them without notice. A failed fetch is ReasonIntermediate, distinct from
// ReasonChain, because it is an outage rather than a forgery.
//
// # Replay
//
// An attested document is a bearer token until it expires, and IMDS caches
// documents for hours and hands the same one to every process on the VM. A
// node legitimately presents the same document more than once: when it
// retries an RPC whose response was lost, and when check-hotfix runs again
// (re-provisioning, reboot) and IMDS returns its cached document. Strict
// single use would turn those into rejections, which the node treats as
// "no hotfix", while buying little: the response is not secret and is the
// same for every caller with that identity, and the thief of a document can
// only learn what that VM would get.
//
// So by default a document is accepted up to MaxUses (8) times while it is
// valid and rejected with ReasonReplay after that; the cap bounds how far
// one leaked document can be replayed. MaxUses 1 is strict single use, for
// challenge mode, where lpsd issues the nonce, compares it with
// Identity.Nonce and a retrying node fetches a new document. Per-VM or
// per-peer rate limits belong in lpsd's interceptors.
//
// The counter is keyed by SHA-256 of the signed content, not of the token:
// the unsigned parts of a token (bag order, extra certificates, BER
// re-encoding, ECDSA signature malleability) can be varied to produce a new
// token for the same document, but not a new signed content. The content
// contains the vmId, so the key also identifies the VM. An entry lives until
// the document would be rejected as expired anyway.
//
// The cache holds at most ReplayCacheSize entries (about 150 bytes each).
// Expired entries are dropped first; when every entry is live, the one
// closest to expiry is evicted, losing the least remaining protection. An
// evicted document's count restarts, so under a flood of distinct valid
// documents a document can be accepted more than MaxUses times. That is
// safe because an evicted document must still pass every other check and
// buys only the same non-secret response, and a flood needs that many
// genuine Azure-signed documents from allowed subscriptions (entries are
// added only after every other check passed). Counts are per Verifier, so
// with several lpsd replicas the bound is MaxUses per replica.
//
// # Errors
//
// Every rejection is an *Error with a Reason from a fixed set, for logs and
// per-reason metrics; its message never contains the token or values from
// the document. Suggested gRPC codes: ReasonTooLarge and ReasonMalformed →
// InvalidArgument; ReasonSubscription → PermissionDenied;
// ReasonIntermediate → Unavailable (our outage, not the node's fault); all
// others → Unauthenticated. Return no detail to the client. A rise in
// ReasonChain or ReasonSAN is the signal that Microsoft rotated its CAs.
package attest
