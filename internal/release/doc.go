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
// The live-patching service (lpsd), its TLS key, its store, the blob store
// and DNS are online and may be compromised; release keys are offline, held
// by distinct people; the transparency log's key is lpsd's; witnesses are
// run by others (internal/translog). A node trusts only its image's key set
// and what it verified and kept since (internal/node/trust). What each
// attacker can and cannot do, with the test that shows it (e2e:
// test/e2e/trust_test.go TestIntegrationReleaseTrust):
//
//   - (a) One release key, of a set of threshold k ≥ 2: signs nothing a node
//     or lpsd accepts (ReasonBelowThreshold; e2e "signed once", admin
//     TestPublishBelowThreshold, TestVerifyThreshold). The other holders
//     rotate the key out (TestPublishKeySet; e2e "rotate twice").
//   - (b) k release keys: sign any release and any rotation. With the log
//     required (the key set's policy), a node runs it only once it is in the
//     log under a witnessed checkpoint, so it is public: lpsctl log lists
//     every release with its verified signers (e2e "missing from the log",
//     tiles TestMonitorWalk). Retiring the keys needs a new image only if k
//     of them are lost to the attacker.
//   - (c) lpsd with its TLS and log keys: chooses which logged release a
//     node gets, serves one VM and not another, withholds everything (the
//     node fails open), and withholds a revocation from a node that never saw
//     it, until the release's not_after; all of it from releases that are in
//     the log. It cannot serve a release missing from the log or proven
//     under another checkpoint (e2e), a checkpoint its witnesses did not
//     cosign within max_checkpoint_age (e2e "stale", "without its witness"),
//     a tree inconsistent with one a node or witness kept (e2e "forked";
//     translog TestWitnessRefusesForks), a key-set chain shorter than a
//     node's (e2e "rolled-back key set"), or a release a node was shown
//     revoked (e2e, trust TestRevocationsKept).
//   - (d) The log key alone: signs checkpoints nobody serves, which nodes
//     refuse without the witnesses' cosignatures (e2e "without its
//     witness").
//   - (e) lpsd and one witness, with a quorum of 1: can show a node that
//     kept no checkpoint (a fresh image) a split view: a tree with a release
//     honest monitors never see. A node that kept a checkpoint refuses it as
//     a fork (e2e "a forked log" is cosigned by the witness's own key). A
//     quorum of 2 independent witnesses closes this; the key set's policy
//     sets it.
//
// Images baked before this work verify one signature by any baked key and
// know no log or chain: for them (a) is (b), and only (c)'s "cannot serve
// unsigned bytes" holds. Their key files carry no directives; a fleet moves
// past them only by retiring those images.
//
// This package does not stop a replay of an older, still unexpired
// release: the node's own gating (strictly newer than the baked agent, not
// revoked, hotfix.IsUpgrade) does. Expiry is only as good as the node's
// clock, and so is a checkpoint's freshness.
//
// Signatures are domain-separated: they cover a DSSE pre-authentication
// encoding that binds the payload type, so a signature over any other
// document (a future signed pointer, a raw payload, another project's DSSE
// envelope) never verifies as a release, even under the same key. Verify
// parses exactly the bytes whose signature it checked; nothing is
// re-serialised in between, and ambiguous JSON (duplicate or unknown keys,
// trailing data) is rejected rather than resolved.
//
// # Thresholds
//
// Signatures are counted per distinct public key, never per key ID or per
// signature entry (go-tuf #369, #733): a key ID only selects which trusted
// key to try, a key listed twice in a file counts once (and a threshold
// above the number of distinct keys is a parse error), a key-set document
// listing a key twice is refused, and only canonical key encodings are
// accepted, so keys that differ as bytes are different keys. A signature
// over another payload or payload type is no signature of this one. A
// refusal for too few signatures (ReasonBelowThreshold) names the key IDs
// whose signature verified and how many more are needed; Signers says who
// has signed any envelope. Holders co-sign offline, in any order, with
// AddSignature.
//
// # Rotation
//
// A node's image is baked with a key set of version 1 (or the version its
// file declares). A signed key-set document (a link) declares the next
// version: its keys, threshold, expiry and log policy. Next accepts a link
// only if its version is exactly one above the current set's (never equal
// or lower: ReasonRollback; never skipping: ReasonVersionGap), it is signed
// by the current set's threshold of the current keys AND by its own
// threshold of its own keys, and it has not expired. Walk applies up to
// MaxChain links in order and checks only the newest link's expiry against
// now: an older link may have expired since, as TUF roots may; a set in use
// must not have. Next and Walk keep no state: persisting the highest
// version verified and refusing lower ones on later boots is the caller's
// job. A removed key stops counting from the version that removes it; a
// lost or stolen key is removed by a rotation its fellow holders sign.
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
// on a node), UTF-8 text of at most 64 KiB, one key or directive per line:
//
//	# comment
//	nodehotfix-release-ed25519 <standard base64 of the 32-byte key> [comment]
//	nodehotfix-keyset-version N          (default 1)
//	nodehotfix-threshold K               (default 1; 1 to 8 and at most the distinct keys)
//	nodehotfix-log-key VKEY              (the log's note verifier key)
//	nodehotfix-witness VKEY              (repeatable, distinct)
//	nodehotfix-witness-quorum Q          (default 0; at most the witnesses)
//	nodehotfix-max-checkpoint-age D      (default 24h with a log key; e.g. 12h, 2d)
//	nodehotfix-require-log
//
// Fields are separated by spaces or tabs. Blank lines and lines whose first
// non-blank character is '#' are ignored. Control characters other than tab
// (including CR), invalid UTF-8 and any other line are errors. Directives
// take exactly their one argument (none for require-log), no comment, and
// each may appear once, except witness; numbers are plain decimal. The
// witness lines and everything but the log key need a log key. VKEYs are
// one token of printable ASCII, at most 512 bytes; internal/translog
// parses them. A file without directives (every file written before them)
// is version 1, threshold 1, no log policy. A baked set does not expire.
//
// Key-set envelope: as a release's, with payload type
// "application/vnd.nodehotfix.keyset.v1+json", at most 16 KiB and 16
// signatures (two thresholds' worth), and the payload
//
//	{"schema":1,"type":"nodehotfix-keyset","version":2,
//	 "expires":"2027-06-01T00:00:00Z","threshold":2,
//	 "keys":["<standard base64 of a 32-byte key>",…],
//	 "log":{"key":"VKEY","witnesses":["VKEY",…],"quorum":1,
//	        "max_checkpoint_age_seconds":86400,"required":true}}
//
// decoded as strictly as a release's. log is omitted when there is no log
// policy and otherwise carries every member. version is 2 or more, keys
// are 1 to 16 distinct keys, threshold 1 to 8 and at most len(keys).
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
