package translog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// Signature algorithm identifiers of C2SP signed-note keys.
const (
	algEd25519     = 0x01 // signed-note Ed25519: the log key
	algCosignature = 0x04 // tlog-cosignature cosignature/v1 Ed25519: witness keys
)

// cosignatureSize is the timestamped_signature of cosignature/v1: a
// big-endian u64 POSIX time and an Ed25519 signature.
const cosignatureSize = 8 + ed25519.SignatureSize

// maxKeyText bounds a vkey or skey, as the key-set file does (512 bytes).
const maxKeyText = 512

// GenerateLogKey returns a new Ed25519 signed-note key pair for the log
// named name, which is also the origin line of its checkpoints: skey
// ("PRIVATE+KEY+<name>+<hash>+<base64>") is secret, vkey
// ("<name>+<hash>+<base64>") is what nodes and witnesses trust.
func GenerateLogKey(name string) (skey, vkey string, err error) {
	if err := checkName(name); err != nil {
		return "", "", err
	}
	return note.GenerateKey(nil, name)
}

// GenerateWitnessKey returns a new cosignature/v1 key pair (algorithm 0x04)
// for the witness named name, in the same text forms as GenerateLogKey.
func GenerateWitnessKey(name string) (skey, vkey string, err error) {
	if err := checkName(name); err != nil {
		return "", "", err
	}
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return "", "", fmt.Errorf("generate witness key: %w", err)
	}
	h := keyHash(name, algCosignature, pub)
	skey = fmt.Sprintf("PRIVATE+KEY+%s+%08x+%s", name, h, base64.StdEncoding.EncodeToString(append([]byte{algCosignature}, priv.Seed()...)))
	return skey, formatVKey(name, h, algCosignature, pub), nil
}

// LogVerifier is a log's public key: a note.Verifier for signed-note
// Ed25519 signatures whose Name is the log's origin.
type LogVerifier struct {
	note.Verifier
	key ed25519.PublicKey
}

// PublicKey returns the Ed25519 public key.
func (v *LogVerifier) PublicKey() ed25519.PublicKey { return v.key }

// ParseLogKey parses a log's vkey ("<name>+<8 hex>+<base64 0x01 || key>").
// Errors are *VerifyError with ReasonMalformed.
func ParseLogKey(vkey string) (*LogVerifier, error) {
	_, _, key, err := parseVKey(vkey, algEd25519)
	if err != nil {
		return nil, verifyErr(ReasonMalformed, fmt.Errorf("log key: %w", err))
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, verifyErr(ReasonMalformed, fmt.Errorf("log key: %w", err))
	}
	return &LogVerifier{Verifier: v, key: key}, nil
}

// NewLogSigner parses a log's skey into the note.Signer that signs its
// checkpoints.
func NewLogSigner(skey string) (note.Signer, error) {
	if len(skey) > maxKeyText {
		return nil, errors.New("log signer key: too long")
	}
	s, err := note.NewSigner(strings.TrimSpace(skey))
	if err != nil {
		return nil, fmt.Errorf("log signer key: %w", err)
	}
	return s, nil
}

// LogVerifierOf returns the verifier of the log's skey (as NewLogSigner
// takes it): lpsd checks a checkpoint it is handed back (a monitor's
// export, to restore the log from) with the key it signs with, so its
// operator does not pass the public half a second time, or a wrong one.
func LogVerifierOf(skey string) (*LogVerifier, error) {
	s := strings.TrimSpace(skey)
	if len(s) > maxKeyText {
		return nil, errors.New("log signer key: too long")
	}
	rest, ok := strings.CutPrefix(s, "PRIVATE+KEY+")
	if !ok {
		return nil, errors.New(`log signer key: want "PRIVATE+KEY+<name>+<hash>+<key>"`)
	}
	name, hash, seed, err := parseKeyText(rest, algEd25519, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("log signer key: %w", err)
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	if keyHash(name, algEd25519, pub) != hash {
		return nil, fmt.Errorf("log signer key: key hash %08x does not match the key", hash)
	}
	return ParseLogKey(formatVKey(name, hash, algEd25519, pub))
}

// CosignatureVerifier is a witness's public key: a note.Verifier for
// tlog-cosignature cosignature/v1 signatures. Safe for concurrent use.
type CosignatureVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

// ParseWitnessKey parses a witness's vkey ("<name>+<8 hex>+<base64 0x04 ||
// key>"). Errors are *VerifyError with ReasonMalformed.
func ParseWitnessKey(vkey string) (*CosignatureVerifier, error) {
	name, hash, key, err := parseVKey(vkey, algCosignature)
	if err != nil {
		return nil, verifyErr(ReasonMalformed, fmt.Errorf("witness key: %w", err))
	}
	return &CosignatureVerifier{name: name, hash: hash, key: key}, nil
}

// Name returns the witness's name.
func (v *CosignatureVerifier) Name() string { return v.name }

// KeyHash returns the C2SP key ID: the first 4 bytes of SHA-256(name ||
// "\n" || 0x04 || key), big-endian.
func (v *CosignatureVerifier) KeyHash() uint32 { return v.hash }

// PublicKey returns the Ed25519 public key.
func (v *CosignatureVerifier) PublicKey() ed25519.PublicKey { return v.key }

// String returns the vkey.
func (v *CosignatureVerifier) String() string {
	return formatVKey(v.name, v.hash, algCosignature, v.key)
}

// Verify reports whether sig is a cosignature/v1 timestamped signature of
// the checkpoint text msg.
func (v *CosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != cosignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > math.MaxInt64 {
		return false
	}
	return ed25519.Verify(v.key, cosignedMessage(int64(t), msg), sig[8:])
}

// Cosigner signs checkpoints with a witness key as cosignature/v1. Safe for
// concurrent use.
type Cosigner struct {
	v    CosignatureVerifier
	priv ed25519.PrivateKey
	now  func() time.Time
}

// NewCosigner parses a witness's skey. now is the clock the timestamps
// come from; nil means time.Now.
func NewCosigner(skey string, now func() time.Time) (*Cosigner, error) {
	skey = strings.TrimSpace(skey)
	if len(skey) > maxKeyText {
		return nil, errors.New("witness signer key: too long")
	}
	rest, ok := strings.CutPrefix(skey, "PRIVATE+KEY+")
	if !ok {
		return nil, errors.New(`witness signer key: want "PRIVATE+KEY+<name>+<hash>+<key>"`)
	}
	name, hash, seed, err := parseKeyText(rest, algCosignature, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("witness signer key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	if keyHash(name, algCosignature, pub) != hash {
		return nil, fmt.Errorf("witness signer key: key hash %08x does not match the key", hash)
	}
	if now == nil {
		now = time.Now
	}
	return &Cosigner{v: CosignatureVerifier{name: name, hash: hash, key: pub}, priv: priv, now: now}, nil
}

// Name returns the witness's name.
func (c *Cosigner) Name() string { return c.v.name }

// KeyHash returns the witness key's C2SP key ID.
func (c *Cosigner) KeyHash() uint32 { return c.v.hash }

// Verifier returns the matching public key.
func (c *Cosigner) Verifier() *CosignatureVerifier { v := c.v; return &v }

// Sign returns the timestamped cosignature of msg, which must be checkpoint
// text: a witness key states consistency of checkpoints and signs nothing
// else.
func (c *Cosigner) Sign(msg []byte) ([]byte, error) {
	if _, err := ParseCheckpoint(msg); err != nil {
		return nil, fmt.Errorf("cosign: %w", err)
	}
	t := c.now().Unix()
	if t < 0 {
		return nil, fmt.Errorf("cosign: time %d before the epoch", t)
	}
	sig := make([]byte, 8, cosignatureSize)
	binary.BigEndian.PutUint64(sig, uint64(t))
	return append(sig, ed25519.Sign(c.priv, cosignedMessage(t, msg))...), nil
}

// cosignedMessage is what a cosignature/v1 signature covers.
func cosignedMessage(t int64, checkpoint []byte) []byte {
	b := make([]byte, 0, 40+len(checkpoint))
	b = append(b, "cosignature/v1\ntime "...)
	b = strconv.AppendInt(b, t, 10)
	b = append(b, '\n')
	return append(b, checkpoint...)
}

// cosignatureTime returns the timestamp of a cosignature line's base64
// signature (key hash || timestamp || signature).
func cosignatureTime(b64 string) (time.Time, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 4+cosignatureSize {
		return time.Time{}, errors.New("cosignature is not a cosignature/v1 timestamped signature")
	}
	t := binary.BigEndian.Uint64(raw[4:])
	if t > math.MaxInt64 {
		return time.Time{}, errors.New("cosignature time above 2^63-1")
	}
	return time.Unix(int64(t), 0).UTC(), nil
}

// keyHash is the C2SP signed-note key ID.
func keyHash(name string, alg byte, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', alg})
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func formatVKey(name string, hash uint32, alg byte, key []byte) string {
	return fmt.Sprintf("%s+%08x+%s", name, hash, base64.StdEncoding.EncodeToString(append([]byte{alg}, key...)))
}

// parseVKey parses a vkey of algorithm alg and checks its key hash.
func parseVKey(vkey string, alg byte) (string, uint32, ed25519.PublicKey, error) {
	if len(vkey) > maxKeyText {
		return "", 0, nil, errors.New("longer than 512 bytes")
	}
	name, hash, key, err := parseKeyText(vkey, alg, ed25519.PublicKeySize)
	if err != nil {
		return "", 0, nil, err
	}
	if keyHash(name, alg, key) != hash {
		return "", 0, nil, fmt.Errorf("key hash %08x does not match the key", hash)
	}
	return name, hash, key, nil
}

// parseKeyText splits "<name>+<8 lowercase hex>+<base64 alg || key>" with a
// key of size bytes.
func parseKeyText(s string, alg byte, size int) (name string, hash uint32, key []byte, err error) {
	// Base64 has '+' too: only the first two separate fields.
	parts := strings.SplitN(s, "+", 3)
	if len(parts) != 3 {
		return "", 0, nil, errors.New(`want "<name>+<hash>+<key>"`)
	}
	name = parts[0]
	if err := checkName(name); err != nil {
		return "", 0, nil, err
	}
	if len(parts[1]) != 8 || strings.ToLower(parts[1]) != parts[1] {
		return "", 0, nil, fmt.Errorf("key hash %q: want 8 lowercase hex digits", parts[1])
	}
	h, err := strconv.ParseUint(parts[1], 16, 32)
	if err != nil {
		return "", 0, nil, fmt.Errorf("key hash %q: want 8 lowercase hex digits", parts[1])
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		return "", 0, nil, fmt.Errorf("key: %w", err)
	}
	if len(raw) != 1+size || raw[0] != alg {
		return "", 0, nil, fmt.Errorf("key: want algorithm 0x%02x and %d bytes", alg, size)
	}
	return name, uint32(h), raw[1:], nil
}

// checkName enforces the signed-note key name rules: non-empty UTF-8
// without Unicode spaces or plus, and (ours) no control characters.
func checkName(name string) error {
	if name == "" || len(name) > 256 || !utf8.ValidString(name) {
		return fmt.Errorf("key name %q: want 1 to 256 bytes of UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || r == '+' || unicode.IsControl(r) {
			return fmt.Errorf("key name %q: contains a space, plus or control character", name)
		}
	}
	return nil
}
