// Package release implements signed hotfix releases: the offline-signed list
// of artifacts that make up one hotfix version.
//
// An operator signs one release per hotfix version with an ed25519 release
// key kept offline (lpsctl). The release travels, unchanged, inside the
// pointer document's "releases" array and the live-patching service's
// response. A node verifies it against the release public keys baked into its
// image before it downloads or runs anything, and then accepts an artifact
// only if its length and sha256 equal the signed ones.
//
// # Threat model
//
// The live-patching service, its TLS key, the blob store and DNS are online
// and may be compromised. Someone holding any of them:
//
//   - can choose which release-signed version a node gets, or withhold every
//     release (a denial of service the node survives by failing open);
//   - can replay an old release only until its not_after, which bounds an
//     indefinite freeze on old software;
//   - can never make a node run bytes no release key signed: the node checks
//     the signature, then the base and version against what it expects, then
//     the artifact's size and sha256 against the downloaded bytes.
//
// Only a release private key can mint a release, so it stays offline; a
// stolen one signs anything until images that trust it are retired, which is
// why rotation exists. This package does not stop a replay of an older,
// still unexpired release: the node's own gating (strictly newer than the
// baked agent, not revoked, hotfix.IsUpgrade) does. Expiry is only as good as
// the node's clock.
//
// Signatures are domain-separated: they cover a DSSE pre-authentication
// encoding that binds the payload type, so a signature over any other
// document (a future signed pointer, a raw payload, another project's DSSE
// envelope) never verifies as a release, even under the same key. Verify
// parses exactly the bytes whose signature it checked; nothing is
// re-serialised in between, and ambiguous JSON (duplicate or unknown keys,
// trailing data) is rejected rather than resolved.
//
// Key rotation: a node trusts a set of public keys, and one valid signature
// by any of them suffices. To rotate, ship images trusting the old and new
// keys, co-sign releases with both (AddSignature), then stop using the old
// key. Signatures are counted per distinct public key, never per key ID; a
// key ID only selects which trusted key to try.
//
// # Formats
//
// Release payload, the signed bytes (compact JSON as Sign writes it; any JSON
// whitespace verifies):
//
//	{"schema":1,"type":"nodehotfix-release","base":"202604.01",
//	 "version":"202604.01.3",
//	 "artifacts":{"linux/amd64":{"url":"https://…","sha256":"<64 lowercase hex>","size":12345}},
//	 "not_after":"2026-06-01T00:00:00Z"}
//
// Every key is required and no other key is allowed, at any level. not_after
// is RFC 3339 in UTC ("Z") at second precision.
//
// Envelope, what is published and served:
//
//	{"payloadType":"application/vnd.nodehotfix.release.v1+json",
//	 "payload":"<standard base64 of the payload bytes, padded>",
//	 "signatures":[{"keyid":"<KeyID>","sig":"<standard base64 of the 64-byte signature>"}]}
//
// Each signature is ed25519 over the DSSE pre-authentication encoding
//
//	"DSSEv1" SP len(payloadType) SP payloadType SP len(payload) SP payload
//
// where lengths are ASCII decimal byte counts and SP is one space.
//
// Public key set file (opt/azure/containers/aks-node-controller-release-keys.pub
// on a node), UTF-8 text of at most 64 KiB, one key per line:
//
//	# comment
//	nodehotfix-release-ed25519 <standard base64 of the 32-byte key> [comment]
//
// Fields are separated by spaces or tabs. Blank lines and lines whose first
// non-blank character is '#' are ignored. Control characters other than tab
// (including CR), invalid UTF-8 and any other line are errors.
//
// Private key file: a PEM "PRIVATE KEY" block holding the PKCS #8 encoding of
// the ed25519 key, which openssl reads ("openssl pkey -in key.pem").
//
// # Component configurations
//
// The same keys sign the configurations of components other than the agent
// (ComponentConfig, SignComponent, VerifyComponent), in envelopes of the
// same form with their own payload type,
// "application/vnd.nodehotfix.component-config.v1+json", and payloads of
// type "nodehotfix-component-config": the pre-authentication encoding binds it,
// so a component configuration never verifies as a release, nor the
// reverse. The service serves the configuration's JSON object with the
// envelope in one more member, ComponentEnvelopeKey (ServedComponent); a
// node splits it off (SplitServed), verifies it and uses only the
// configuration it signs. The same threshold applies.
package release
