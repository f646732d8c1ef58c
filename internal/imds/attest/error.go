package attest

import "fmt"

// Reason says which check rejected a document. The set is fixed and small so
// that it can label metrics; see the package documentation for the gRPC code
// each one should map to.
type Reason string

// The reasons, in the order Verify checks them.
const (
	ReasonTooLarge     Reason = "too-large"     // token longer than MaxTokenSize, not decoded
	ReasonMalformed    Reason = "malformed"     // not strict base64 or not PKCS#7 SignedData
	ReasonSigner       Reason = "signer"        // not exactly one SignerInfo with its certificate in the bag
	ReasonAlgorithm    Reason = "algorithm"     // digest not SHA-256/384/512, or an unknown signature algorithm
	ReasonSAN          Reason = "san"           // signer has no DNS SAN under an allowed domain
	ReasonSignature    Reason = "signature"     // content signature does not verify with the signer's key
	ReasonChain        Reason = "chain"         // signer does not chain to a root, is expired, or lacks serverAuth
	ReasonIntermediate Reason = "intermediate"  // the intermediate could not be fetched from the AIA URL
	ReasonContent      Reason = "content"       // signed JSON malformed, ambiguous or missing a required field
	ReasonNotYetValid  Reason = "not-yet-valid" // createdOn is later than now plus skew
	ReasonExpired      Reason = "expired"       // expiresOn (or MaxAge) is earlier than now minus skew
	ReasonSubscription Reason = "subscription"  // subscriptionId not in AllowedSubscriptions
	ReasonReplay       Reason = "replay"        // document already accepted MaxUses times
)

// Reasons returns every Reason, for pre-registering metric labels.
func Reasons() []Reason {
	return []Reason{
		ReasonTooLarge, ReasonMalformed, ReasonSigner, ReasonAlgorithm, ReasonSAN,
		ReasonSignature, ReasonChain, ReasonIntermediate, ReasonContent,
		ReasonNotYetValid, ReasonExpired, ReasonSubscription, ReasonReplay,
	}
}

// Error is the only error type Verify returns. Its message carries the
// reason and a detail for the server log; it never contains the token or
// values taken from the document, and it is not meant for the client.
type Error struct {
	Reason Reason
	Err    error // detail; may wrap a context error for ReasonIntermediate
}

func (e *Error) Error() string {
	return fmt.Sprintf("attested document rejected (%s): %v", e.Reason, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func reject(r Reason, err error) *Error {
	return &Error{Reason: r, Err: err}
}
