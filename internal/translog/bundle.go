package translog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/jsonobj"
)

// MaxBundleSize caps a served proof bundle. A proof in a tree of 2^40
// records is 40 hashes (about 1.9 KiB in JSON), so 32 KiB holds the
// checkpoint, a consistency proof and a dozen inclusion proofs while
// bounding decoding work on hostile input.
const MaxBundleSize = 32 << 10

// maxProofHashes is the longest proof of a tree of at most 2^63 records.
const maxProofHashes = 63

// maxProofs bounds the inclusion proofs of one bundle.
const maxProofs = 64

// Keys of the bundle's JSON objects.
const (
	keyCheckpoint  = "checkpoint"
	keyProofs      = "proofs"
	keyConsistency = "consistency"
	keyIndex       = "index"
	keyHashes      = "hashes"
	keyFrom        = "from"
)

// Bundle is what lpsd serves with a document so a node can check, offline,
// that its records are in the log: a signed checkpoint, an inclusion proof
// per record and, optionally, a consistency proof from the size the node
// declared. On the wire:
//
//	{"checkpoint":"<signed note>",
//	 "proofs":{"<base64 leaf hash>":{"index":N,"hashes":["<base64>",…]}},
//	 "consistency":{"from":N,"hashes":["<base64>",…]}}
//
// "consistency" is omitted when there is no proof to give.
type Bundle struct {
	// Checkpoint is the signed checkpoint note, cosigned by witnesses.
	Checkpoint []byte
	// Proofs maps a record's leaf hash (LeafHash) to its inclusion proof.
	Proofs map[tlog.Hash]InclusionProof
	// Consistency is nil or a proof from an earlier size to Checkpoint's.
	Consistency *ConsistencyProof
}

// InclusionProof is an RFC 6962 audit path of the record at Index.
type InclusionProof struct {
	Index  int64
	Hashes tlog.RecordProof
}

// ConsistencyProof is an RFC 6962 consistency proof from the tree of size
// From.
type ConsistencyProof struct {
	From   int64
	Hashes tlog.TreeProof
}

type proofJSON struct {
	Index  *int64   `json:"index,omitempty"`
	From   *int64   `json:"from,omitempty"`
	Hashes []string `json:"hashes"`
}

// Marshal returns the wire form of b, keys in a fixed order.
func (b Bundle) Marshal() ([]byte, error) {
	if len(b.Proofs) > maxProofs {
		return nil, fmt.Errorf("marshal bundle: %d proofs, limit %d", len(b.Proofs), maxProofs)
	}
	proofs := make(map[string]proofJSON, len(b.Proofs))
	for h, p := range b.Proofs {
		proofs[h.String()] = proofJSON{Index: &p.Index, Hashes: hashStrings(p.Hashes)}
	}
	v := struct {
		Checkpoint  string               `json:"checkpoint"`
		Proofs      map[string]proofJSON `json:"proofs"`
		Consistency *proofJSON           `json:"consistency,omitempty"`
	}{Checkpoint: string(b.Checkpoint), Proofs: proofs}
	if c := b.Consistency; c != nil {
		v.Consistency = &proofJSON{From: &c.From, Hashes: hashStrings(c.Hashes)}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("marshal bundle: %w", err)
	}
	if out.Len() > MaxBundleSize {
		return nil, fmt.Errorf("marshal bundle: %d bytes, limit %d", out.Len(), MaxBundleSize)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

func hashStrings(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	return out
}

// ParseBundle decodes a bundle strictly: at most MaxBundleSize bytes, no
// unknown, missing or duplicate keys, canonical base64 hashes, at most 63
// hashes per proof. It checks shape only; Open verifies the checkpoint and
// Include and Consistent the proofs. Errors are *VerifyError with
// ReasonMalformed.
func ParseBundle(raw []byte) (Bundle, error) {
	b, err := parseBundle(raw)
	if err != nil {
		return Bundle{}, verifyErr(ReasonMalformed, fmt.Errorf("bundle: %w", err))
	}
	return b, nil
}

func parseBundle(raw []byte) (Bundle, error) {
	if len(raw) > MaxBundleSize {
		return Bundle{}, fmt.Errorf("%d bytes, limit %d", len(raw), MaxBundleSize)
	}
	m, err := objectFields(raw, []string{keyCheckpoint, keyProofs}, keyConsistency)
	if err != nil {
		return Bundle{}, err
	}
	var b Bundle
	var cp string
	if err := decodeValue(m, keyCheckpoint, &cp); err != nil {
		return Bundle{}, err
	}
	if len(cp) > MaxNoteSize {
		return Bundle{}, fmt.Errorf("checkpoint is %d bytes, limit %d", len(cp), MaxNoteSize)
	}
	b.Checkpoint = []byte(cp)
	proofs, err := jsonobj.Members(m[keyProofs])
	if err != nil {
		return Bundle{}, fmt.Errorf("key %q: %w", keyProofs, err)
	}
	if len(proofs) > maxProofs {
		return Bundle{}, fmt.Errorf("%d proofs, limit %d", len(proofs), maxProofs)
	}
	b.Proofs = make(map[tlog.Hash]InclusionProof, len(proofs))
	for _, f := range proofs {
		leaf, err := parseHash(f.Key)
		if err != nil {
			return Bundle{}, fmt.Errorf("proof key: %w", err)
		}
		idx, hashes, err := decodeProof(f.Value, keyIndex)
		if err != nil {
			return Bundle{}, fmt.Errorf("proof of %s: %w", f.Key, err)
		}
		b.Proofs[leaf] = InclusionProof{Index: idx, Hashes: hashes}
	}
	if raw, ok := m[keyConsistency]; ok {
		from, hashes, err := decodeProof(raw, keyFrom)
		if err != nil {
			return Bundle{}, fmt.Errorf("key %q: %w", keyConsistency, err)
		}
		b.Consistency = &ConsistencyProof{From: from, Hashes: hashes}
	}
	return b, nil
}

// decodeProof decodes {"<posKey>":N,"hashes":[…]} with N ≥ 0.
func decodeProof(raw json.RawMessage, posKey string) (int64, []tlog.Hash, error) {
	m, err := objectFields(raw, []string{posKey, keyHashes})
	if err != nil {
		return 0, nil, err
	}
	var n int64
	var strs []string
	if err := errors.Join(decodeValue(m, posKey, &n), decodeValue(m, keyHashes, &strs)); err != nil {
		return 0, nil, err
	}
	if n < 0 {
		return 0, nil, fmt.Errorf("key %q: %d is negative", posKey, n)
	}
	if len(strs) > maxProofHashes {
		return 0, nil, fmt.Errorf("%d hashes, limit %d", len(strs), maxProofHashes)
	}
	hashes := make([]tlog.Hash, len(strs))
	for i, s := range strs {
		if hashes[i], err = parseHash(s); err != nil {
			return 0, nil, fmt.Errorf("hash %d: %w", i, err)
		}
	}
	return n, hashes, nil
}

// Include checks that record is in the log at checkpoint c, which must be
// the checkpoint Open returned for b.Checkpoint, and returns its index.
// Errors are *VerifyError: ReasonNotIncluded (no proof for the record, a
// proof for another index or tree, c not b's checkpoint) or
// ReasonMalformed.
func (b Bundle) Include(c Checkpoint, record []byte) (int64, error) {
	if err := b.isCheckpoint(c); err != nil {
		return 0, err
	}
	leaf := LeafHash(record)
	p, ok := b.Proofs[leaf]
	if !ok {
		return 0, verifyErrf(ReasonNotIncluded, "no proof for leaf %s", leaf)
	}
	if p.Index >= c.Size {
		return 0, verifyErrf(ReasonNotIncluded, "leaf %s: index %d not below tree size %d", leaf, p.Index, c.Size)
	}
	if err := tlog.CheckRecord(p.Hashes, c.Size, c.Hash, p.Index, leaf); err != nil {
		return 0, verifyErrf(ReasonNotIncluded, "leaf %s at index %d of tree size %d: %v", leaf, p.Index, c.Size, err)
	}
	return p.Index, nil
}

// Consistent checks that c, the checkpoint Open returned for b.Checkpoint,
// extends old, the last checkpoint the caller kept. An equal size needs an
// equal hash and no proof; a larger one needs b.Consistency from old.Size.
// Errors are as VerifyConsistency's, or ReasonNotIncluded when c is not
// b's checkpoint, or ReasonInconsistent when the bundle has no proof from
// old's size.
func (b Bundle) Consistent(old, c Checkpoint) error {
	if err := b.isCheckpoint(c); err != nil {
		return err
	}
	var proof tlog.TreeProof
	if old.Size != c.Size && old.Size != 0 && old.Size < c.Size {
		if b.Consistency == nil || b.Consistency.From != old.Size {
			return verifyErrf(ReasonInconsistent, "no consistency proof from size %d to %d", old.Size, c.Size)
		}
		proof = b.Consistency.Hashes
	}
	return VerifyConsistency(old, c, proof)
}

// isCheckpoint checks that c is the checkpoint b carries.
func (b Bundle) isCheckpoint(c Checkpoint) error {
	text, err := noteText(b.Checkpoint)
	if err != nil {
		return err
	}
	bc, err := ParseCheckpoint(text)
	if err != nil {
		return err
	}
	if bc.Origin != c.Origin || bc.Size != c.Size || bc.Hash != c.Hash {
		return verifyErrf(ReasonNotIncluded, "proofs are for %s size %d, not the checkpoint given (size %d)", bc.Origin, bc.Size, c.Size)
	}
	return nil
}

// VerifyConsistency checks that the tree of checkpoint newer is an
// append-only extension of old's: same origin, and proof an RFC 6962
// consistency proof from old.Size to newer.Size (empty when old is empty
// or the sizes are equal; then equal sizes need equal hashes). Errors are
// *VerifyError: ReasonOrigin, ReasonRollback (newer is smaller) or
// ReasonInconsistent (a fork, or a proof that does not verify).
func VerifyConsistency(old, newer Checkpoint, proof tlog.TreeProof) error {
	if old.Origin != newer.Origin {
		return verifyErrf(ReasonOrigin, "origin %q, then %q", old.Origin, newer.Origin)
	}
	switch {
	case newer.Size < old.Size:
		return verifyErrf(ReasonRollback, "%s: size %d after size %d", old.Origin, newer.Size, old.Size)
	case old.Size == newer.Size:
		if old.Hash != newer.Hash || len(proof) != 0 {
			return verifyErrf(ReasonInconsistent, "%s: fork at size %d: root %s and %s", old.Origin, old.Size, old.Hash, newer.Hash)
		}
		return nil
	case old.Size == 0:
		if len(proof) != 0 {
			return verifyErrf(ReasonInconsistent, "%s: proof from the empty tree must be empty", old.Origin)
		}
		if old.Hash != emptyTreeHash() {
			return verifyErrf(ReasonInconsistent, "%s: size 0 with root %s, not the empty tree's", old.Origin, old.Hash)
		}
		return nil
	}
	if err := tlog.CheckTree(proof, newer.Size, newer.Hash, old.Size, old.Hash); err != nil {
		return verifyErrf(ReasonInconsistent, "%s: size %d root %s is not an extension of size %d root %s: %v",
			old.Origin, newer.Size, newer.Hash, old.Size, old.Hash, err)
	}
	return nil
}

func emptyTreeHash() tlog.Hash {
	h, _ := tlog.TreeHash(0, nil) // never reads for size 0
	return h
}

// Prove builds the bundle for the signed checkpoint signed: an inclusion
// proof of each record at indexes and, when 0 < from < size, a consistency
// proof from size from. r reads the log's stored hashes
// (tlog.StoredHashIndex numbering) and must hold the tree at the
// checkpoint's size.
func Prove(r tlog.HashReader, signed []byte, indexes []int64, from int64) (Bundle, error) {
	text, err := noteText(signed)
	if err != nil {
		return Bundle{}, err
	}
	c, err := ParseCheckpoint(text)
	if err != nil {
		return Bundle{}, err
	}
	b := Bundle{Checkpoint: signed, Proofs: make(map[tlog.Hash]InclusionProof, len(indexes))}
	for _, i := range slices.Sorted(slices.Values(indexes)) {
		if i < 0 || i >= c.Size {
			return Bundle{}, fmt.Errorf("prove record %d: outside tree size %d", i, c.Size)
		}
		hs, err := r.ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
		if err != nil || len(hs) != 1 {
			return Bundle{}, fmt.Errorf("prove record %d: read leaf hash: %v", i, err)
		}
		p, err := tlog.ProveRecord(c.Size, i, r)
		if err != nil {
			return Bundle{}, fmt.Errorf("prove record %d in tree size %d: %w", i, c.Size, err)
		}
		b.Proofs[hs[0]] = InclusionProof{Index: i, Hashes: p}
	}
	if from > 0 && from < c.Size {
		p, err := tlog.ProveTree(c.Size, from, r)
		if err != nil {
			return Bundle{}, fmt.Errorf("prove tree size %d from %d: %w", c.Size, from, err)
		}
		b.Consistency = &ConsistencyProof{From: from, Hashes: p}
	}
	return b, nil
}

// noteText returns the text of a signed note without checking signatures.
func noteText(msg []byte) ([]byte, error) {
	if len(msg) > MaxNoteSize {
		return nil, verifyErrf(ReasonMalformed, "signed checkpoint is %d bytes, limit %d", len(msg), MaxNoteSize)
	}
	_, err := note.Open(msg, nil)
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		return nil, verifyErrf(ReasonMalformed, "signed checkpoint: %v", err)
	}
	return []byte(unverified.Note.Text), nil
}

// objectFields decodes a JSON object with all of the required keys, any of
// the optional ones and no other. Keys match case-sensitively, unlike
// encoding/json.
func objectFields(data []byte, required []string, optional ...string) (map[string]json.RawMessage, error) {
	fields, err := jsonobj.Members(data)
	if err != nil {
		return nil, err
	}
	m := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if !slices.Contains(required, f.Key) && !slices.Contains(optional, f.Key) {
			return nil, fmt.Errorf("unknown key %q", f.Key)
		}
		m[f.Key] = f.Value
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("missing key %q", k)
		}
	}
	return m, nil
}

// decodeValue unmarshals m[key] into v; a null is an error, not a zero
// value.
func decodeValue(m map[string]json.RawMessage, key string, v any) error {
	raw := bytes.TrimSpace(m[key])
	if len(raw) == 0 || string(raw) == "null" {
		return fmt.Errorf("key %q: missing or null", key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return nil
}
