// Package fetch downloads a release artifact, verifying its signed size and
// sha256 while streaming it to a caller-owned writer.
//
// # Threat model
//
// The artifact URL, size and sha256 come from a release manifest that the
// caller has already verified against a release key. Everything the network
// says is untrusted: DNS, the TLS peer (beyond the trust roots), the CDN,
// redirects, status codes, headers and the body. The only integrity
// guarantee is the signed size and digest; TLS is transport confidentiality
// and a first filter, not the trust anchor.
//
// Consequences:
//
//   - A body is accepted only if it has exactly the signed number of bytes
//     and their sha256 equals the signed digest. Content-Length is checked
//     early but never trusted: bytes are counted.
//   - The body is read through a limit of size+1 bytes into a fixed buffer,
//     so neither an endless body nor a large artifact grows memory.
//   - Compression is never negotiated and a response with a Content-Encoding
//     other than identity is refused, so a gzip bomb is never inflated.
//   - Only https is spoken, on the first request and on every redirect hop;
//     URLs with user info are refused. Redirects may go to any https host:
//     the bytes are verified by digest, and CDNs legitimately redirect to
//     other hosts. A plaintext hop is refused before it is requested, so
//     neither the path nor any query token leaks in clear.
//   - No proxy from the environment is used: a proxy variable planted in the
//     provisioning environment must not see or steer the download.
//   - Dial, TLS handshake and response headers each have a timeout; the body
//     is bounded by the caller's ctx and by a stall timeout that aborts when
//     no byte arrives for a while (slow retrieval).
//   - Error messages carry the URL without its query, which may hold an
//     access token.
//
// A *VerifyError means the server answered with something that contradicts
// the signed release (or the URL policy); any other error is a transport
// failure. The caller decides what each means for fallback. The caller owns
// the destination: on any error it must discard what was written, for
// example with atomicfile's Abort.
package fetch
