package translog

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// DefaultMaxAge is the maximum checkpoint age when a Policy leaves MaxAge
// zero: the contract's max_checkpoint_age default.
const DefaultMaxAge = 24 * time.Hour

// MaxClockSkew is how far in the future a cosignature may be and still
// count: clocks disagree by seconds, not minutes, and a cosignature dated
// later than that would keep a checkpoint "fresh" past its real age.
const MaxClockSkew = 5 * time.Minute

// Policy is what a node trusts a checkpoint on. The zero Quorum requires no
// witness; then MaxAge is not checked either, since only cosignatures carry
// time.
type Policy struct {
	// Log is the log's key (ParseLogKey); its name is the origin.
	Log note.Verifier
	// Witnesses are cosignature/v1 keys (ParseWitnessKey). A key listed
	// twice, under any names, is one witness.
	Witnesses []note.Verifier
	// Quorum is how many distinct witnesses must have cosigned within
	// MaxAge; 0 requires none.
	Quorum int
	// MaxAge bounds the age of the Quorum-th newest cosignature; 0 means
	// DefaultMaxAge.
	MaxAge time.Duration
}

// NewPolicy builds a Policy from key text, as a key set carries it: a log
// vkey, witness vkeys, the quorum and the maximum age (0: DefaultMaxAge).
// Errors are *VerifyError with ReasonMalformed (a key) or ReasonPolicy.
func NewPolicy(logKey string, witnesses []string, quorum int, maxAge time.Duration) (Policy, error) {
	lv, err := ParseLogKey(logKey)
	if err != nil {
		return Policy{}, err
	}
	p := Policy{Log: lv, Quorum: quorum, MaxAge: maxAge}
	for _, w := range witnesses {
		wv, err := ParseWitnessKey(w)
		if err != nil {
			return Policy{}, err
		}
		p.Witnesses = append(p.Witnesses, wv)
	}
	if _, err := p.index(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Cosignature is one verified witness cosignature of a checkpoint.
type Cosignature struct {
	// Name and KeyHash identify the witness key.
	Name    string
	KeyHash uint32
	// Time is when the witness cosigned, in whole seconds.
	Time time.Time
}

// policyIndex is a validated Policy.
type policyIndex struct {
	verifiers note.Verifiers
	// witness maps a signature line's key to the witness's identity:
	// its public key, so one key under two names counts once.
	witness map[nameHash]string
	maxAge  time.Duration
}

type nameHash struct {
	name string
	hash uint32
}

// index validates p. Two distinct keys that one signature line could name
// (same name and key hash) are refused: which one verifies would be
// ambiguous, and a collision is cheap to grind for a 32-bit key hash.
func (p Policy) index() (policyIndex, error) {
	if p.Log == nil {
		return policyIndex{}, verifyErrf(ReasonPolicy, "no log key")
	}
	if p.Quorum < 0 || p.MaxAge < 0 {
		return policyIndex{}, verifyErrf(ReasonPolicy, "quorum %d, max age %v: negative", p.Quorum, p.MaxAge)
	}
	ix := policyIndex{witness: make(map[nameHash]string), maxAge: p.MaxAge}
	if ix.maxAge == 0 {
		ix.maxAge = DefaultMaxAge
	}
	logID := nameHash{p.Log.Name(), p.Log.KeyHash()}
	logKey := ""
	if lv, ok := p.Log.(*LogVerifier); ok {
		logKey = string(lv.PublicKey())
	}
	list := []note.Verifier{p.Log}
	distinct := map[string]bool{}
	for _, w := range p.Witnesses {
		cv, ok := w.(*CosignatureVerifier)
		if !ok || cv == nil {
			return policyIndex{}, verifyErrf(ReasonPolicy, "witness %q: not a cosignature/v1 key", nameOf(w))
		}
		id := nameHash{cv.name, cv.hash}
		key := string(cv.key)
		if key == logKey {
			return policyIndex{}, verifyErrf(ReasonPolicy, "witness %s+%08x: the log key is no witness", cv.name, cv.hash)
		}
		if id == logID {
			return policyIndex{}, verifyErrf(ReasonPolicy, "witness %s+%08x: same name and key hash as the log key", cv.name, cv.hash)
		}
		if prev, ok := ix.witness[id]; ok {
			if prev != key {
				return policyIndex{}, verifyErrf(ReasonPolicy, "witnesses %s+%08x: two keys with one name and key hash", cv.name, cv.hash)
			}
			continue // the same vkey listed twice
		}
		ix.witness[id] = key
		distinct[key] = true
		list = append(list, cv)
	}
	if p.Quorum > len(distinct) {
		return policyIndex{}, verifyErrf(ReasonPolicy, "quorum %d above the %d distinct witness keys", p.Quorum, len(distinct))
	}
	ix.verifiers = note.VerifierList(list...)
	return ix, nil
}

func nameOf(v note.Verifier) string {
	if v == nil {
		return "<nil>"
	}
	return v.Name()
}

// Open verifies a signed checkpoint note against p at time now and returns
// the checkpoint, whose Note is a copy of msg, with its verified
// cosignatures, newest first. It requires,
// in order:
//
//   - at most MaxNoteSize bytes of a well-formed signed note whose text is a
//     checkpoint (ReasonMalformed);
//   - no line naming a trusted key with a signature that does not verify
//     (ReasonBadSignature): lines of unknown keys are ignored, as the note
//     format requires;
//   - a valid signature by p.Log (ReasonUnsigned);
//   - the origin equal to p.Log's name (ReasonOrigin);
//   - when p.Quorum > 0, cosignatures by at least Quorum distinct witness
//     public keys (ReasonQuorum), and at least Quorum of them dated within
//     [now-MaxAge, now+MaxClockSkew] (ReasonStale): the Quorum-th newest
//     cosignature is fresh. A zero now is ReasonStale.
//
// A witness that signed twice counts once (the first line is the one
// verified). Every error is a *VerifyError; p's own problems are
// ReasonPolicy. Open is safe for concurrent use.
func Open(msg []byte, p Policy, now time.Time) (Checkpoint, []Cosignature, error) {
	if len(msg) > MaxNoteSize {
		return Checkpoint{}, nil, verifyErrf(ReasonMalformed, "signed checkpoint is %d bytes, limit %d", len(msg), MaxNoteSize)
	}
	ix, err := p.index()
	if err != nil {
		return Checkpoint{}, nil, err
	}
	n, err := note.Open(msg, ix.verifiers)
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		if _, perr := ParseCheckpoint([]byte(unverified.Note.Text)); perr != nil {
			return Checkpoint{}, nil, perr
		}
		return Checkpoint{}, nil, verifyErrf(ReasonUnsigned, "no signature by log key %s+%08x", p.Log.Name(), p.Log.KeyHash())
	case errors.As(err, &invalid):
		return Checkpoint{}, nil, verifyErrf(ReasonBadSignature, "signature line of %s+%08x does not verify", invalid.Name, invalid.Hash)
	case err != nil:
		return Checkpoint{}, nil, verifyErr(ReasonMalformed, fmt.Errorf("signed checkpoint: %w", err))
	}
	c, err := ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, nil, err
	}
	c.Note = bytes.Clone(msg)
	logID := nameHash{p.Log.Name(), p.Log.KeyHash()}
	if !slices.ContainsFunc(n.Sigs, func(s note.Signature) bool { return (nameHash{s.Name, s.Hash}) == logID }) {
		return Checkpoint{}, nil, verifyErrf(ReasonUnsigned, "no signature by log key %s+%08x", p.Log.Name(), p.Log.KeyHash())
	}
	if c.Origin != p.Log.Name() {
		return Checkpoint{}, nil, verifyErrf(ReasonOrigin, "origin %q, log key is %q", c.Origin, p.Log.Name())
	}
	var cosigs []Cosignature
	newest := map[string]time.Time{} // per witness public key
	for _, s := range n.Sigs {
		key, ok := ix.witness[nameHash{s.Name, s.Hash}]
		if !ok {
			continue
		}
		t, err := cosignatureTime(s.Base64)
		if err != nil {
			return Checkpoint{}, nil, verifyErr(ReasonMalformed, fmt.Errorf("cosignature of %s+%08x: %w", s.Name, s.Hash, err))
		}
		cosigs = append(cosigs, Cosignature{Name: s.Name, KeyHash: s.Hash, Time: t})
		if prev, ok := newest[key]; !ok || t.After(prev) {
			newest[key] = t
		}
	}
	slices.SortStableFunc(cosigs, func(a, b Cosignature) int { return b.Time.Compare(a.Time) })
	if p.Quorum == 0 {
		return c, cosigs, nil
	}
	if len(newest) < p.Quorum {
		return Checkpoint{}, nil, verifyErrf(ReasonQuorum, "%d distinct witnesses cosigned, quorum %d", len(newest), p.Quorum)
	}
	if now.IsZero() {
		return Checkpoint{}, nil, verifyErrf(ReasonStale, "no current time to check cosignature age against")
	}
	oldest, latest := now.Add(-ix.maxAge), now.Add(MaxClockSkew)
	fresh, future := 0, 0
	for _, t := range newest {
		switch {
		case t.After(latest):
			future++
		case !t.Before(oldest):
			fresh++
		}
	}
	if fresh < p.Quorum {
		return Checkpoint{}, nil, verifyErrf(ReasonStale, "%d of %d witnesses cosigned within %v of %s (%d in the future), quorum %d",
			fresh, len(newest), ix.maxAge, now.UTC().Format(time.RFC3339), future, p.Quorum)
	}
	return c, cosigs, nil
}
