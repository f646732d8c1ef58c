// Package tiles publishes and reads the release transparency log as C2SP
// tlog-tiles.
//
// The log's records are the exact bytes of release envelopes, key-set
// envelopes and revocation records; leaf hashes are tlog.RecordHash of those
// bytes and the tree is RFC 6962's (golang.org/x/mod/sumdb/tlog). Handler
// serves a log read-only over HTTP: /checkpoint (the latest cosigned
// checkpoint, a C2SP tlog-checkpoint signed note), hash tiles of height 8
// at /tile/<L>/<N>[.p/<W>] and entry bundles at /tile/entries/<N>[.p/<W>].
// Export writes the same files to a directory, for any static web server.
//
// # Threat model
//
// Whoever serves the tiles (lpsd, a mirror, a CDN, a directory someone
// copied) is untrusted. Client trusts only the log's note verifier key: it
// accepts a checkpoint only with a valid log signature whose key name is
// the checkpoint's origin, and every tile only once tlog.TileHashReader has
// authenticated it against that checkpoint's root hash. Every entry is
// accepted only if its tlog.RecordHash equals the authenticated leaf hash at
// its index, so a server cannot add, drop, reorder or alter records, nor
// serve a different tree than the one the log key signed. Every response is
// bounded: checkpoints to MaxCheckpointSize, tiles to their exact size and
// entry bundles to MaxBundleSize.
//
// What one reader cannot see alone is a log that shows different trees to
// different readers (a fork). A monitor keeps the last checkpoint it
// verified (WriteState) and checks that the next one extends it: a
// checkpoint of the same size with another hash, or a larger one that is not
// consistent with the kept one, is a *ForkError, which is proof, signed by
// the log key, that the log forked. The first run has nothing to compare and
// trusts what it sees (trust on first use); witnesses, which compare
// checkpoints across readers, are internal/translog's job. A checkpoint
// smaller than the kept one is a *StaleError: a lagging mirror or a
// rollback, not proof of a fork.
//
// Checkpoints are opened by translog.Open under the Client's Policy, so a
// monitor can require what nodes require: a quorum of fresh witness
// cosignatures. What records claim is not trusted either: Describe decodes
// them unverified, and Monitor, given a root key set (the baked file),
// walks the key-set records the log holds from it with release.KeySet.Next
// and checks every release against the set in force before it
// (release.KeySet.Signers): a release under its threshold or a link that
// does not verify is flagged, since lpsd publishes neither.
package tiles
