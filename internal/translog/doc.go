// Package translog implements the release transparency log's formats:
// checkpoints, cosignatures, proofs, the witness protocol.
//
// lpsd appends every release envelope, revocation record and key-set
// envelope to an append-only Merkle tree (RFC 6962 hashing, via
// golang.org/x/mod/sumdb/tlog), signs its tree head with a log key held
// by lpsd, and has independent witnesses cosign that head. A node refuses
// a release unless the bundle served with it proves, offline, that the
// release is in a tree the log signed and a quorum of witnesses recently
// saw as an extension of everything they saw before.
//
// # Formats
//
// Checkpoint (C2SP tlog-checkpoint): the note text
//
//	<origin>\n<size in decimal, no leading zeros>\n<base64 root hash>\n[extension lines]
//
// followed by a blank line and signature lines "— <key name> <base64(key
// hash || signature)>" (C2SP signed-note). ParseCheckpoint accepts one
// spelling of each value only, so two readers never see different trees
// in one text.
//
// Log key (signed-note Ed25519, algorithm 0x01): vkey
// "<name>+<8 hex key hash>+<base64(0x01 || public key)>", key hash the
// first 4 bytes of SHA-256(name || "\n" || 0x01 || key). The name is the
// log's origin. GenerateLogKey, ParseLogKey, NewLogSigner.
//
// Witness key (C2SP tlog-cosignature cosignature/v1, algorithm 0x04): the
// same vkey form with 0x04. A cosignature line's signature is an 8-byte
// big-endian POSIX time followed by an Ed25519 signature over
// "cosignature/v1\ntime <decimal time>\n" and the checkpoint's note text.
// GenerateWitnessKey, ParseWitnessKey, NewCosigner.
//
// Records: the exact bytes of an envelope or of a RevocationRecord
// ({"type":"nodehotfix-revocation","version":"…","time":"…Z"}, one
// canonical encoding); leaf hash tlog.RecordHash of them (LeafHash).
//
// Bundle: the JSON served with a document (see Bundle), at most
// MaxBundleSize bytes: the cosigned checkpoint, an audit path per record
// keyed by leaf hash and an optional consistency proof.
//
// Witness protocol (C2SP tlog-witness add-checkpoint): POST
// <prefix>/add-checkpoint with "old <size>\n", one base64 proof hash per
// line, a blank line and the signed checkpoint. 200 carries the
// cosignature line; 409 (text/x.tlog.size) the witness's size when old is
// not it, or a fork at the same size; 422 a proof that does not verify;
// 403 no valid log signature; 404 an unknown origin; 400 a malformed
// request; 413 an oversize one.
//
// # What each check defends against
//
//   - The log signature (Open, ReasonUnsigned) ties the tree head to the
//     log key in the node's key set: no one without it can invent a
//     tree. A key of the same name but another key hash is simply
//     unknown; a line that claims the log key's name and hash (a 32-bit
//     collision is cheap to grind) is verified and, failing, refuses the
//     whole note (ReasonBadSignature) rather than being skipped.
//   - Origin equal to the log key's name (ReasonOrigin): a log key that
//     also signs another log's heads cannot pass one for the other.
//   - A quorum of distinct witnesses (ReasonQuorum): lpsd holds the log
//     key, so it could sign two trees and show each to different nodes
//     (a split view) or drop a revocation from one. A witness cosigns
//     only a head consistent with the last one it cosigned, so a split
//     view needs the witnesses' keys as well. Witnesses count once per
//     public key, not per line or name: cosignature/v1 does not sign the
//     witness's name, so one key listed twice, or a witness repeating its
//     line, must not make up a quorum. A policy naming two keys one line
//     could match (same name and key hash) is refused (ReasonPolicy).
//   - Freshness (ReasonStale): without time, an old cosigned head (one
//     before a revocation) would stay valid forever. The Quorum-th newest
//     cosignature must be within MaxAge (default 24 h) and no later than
//     MaxClockSkew (5 min) ahead, so a witness with a clock far ahead
//     cannot keep a head fresh. Only as good as the node's clock.
//   - Inclusion (Bundle.Include, ReasonNotIncluded): the record's audit
//     path must lead to the opened checkpoint's root at that index and
//     size; a proof for another index, tree or checkpoint fails, as a
//     truncated or padded one does.
//   - Consistency (VerifyConsistency, Bundle.Consistent,
//     ReasonInconsistent, ReasonRollback): a node keeps the last
//     checkpoint it accepted and requires the next to extend it, so once
//     it has seen a revocation in the log, no later tree without it
//     verifies. Equal sizes need equal roots (a fork otherwise); a
//     smaller size is a rollback.
//   - Strict, size-capped parsing everywhere (ReasonMalformed): hostile
//     input costs bounded work, and ambiguous input (duplicate or unknown
//     JSON keys, non-canonical base64 or decimals) is refused, never
//     resolved.
//
// The Witness refuses forks loudly: a signed head that does not extend
// its state is logged at ERROR with the full note, which is evidence of
// log misbehaviour. Its state (one size and root per origin) is replaced
// atomically and durably before it answers, and check and update are one
// step, so racing requests cannot roll it back. A missing state file is
// trust on first use: the first checkpoint of each log is cosigned as it
// comes, since there is nothing to check it against; operators who lose
// the file should restore it rather than delete it. A state file that
// exists but does not decode stops the witness.
//
// Not defended here: a log and a quorum of witnesses colluding; a node
// whose clock is wrong; withholding (lpsd can refuse to serve anything,
// which nodes survive by failing open to their baked agent).
package translog
