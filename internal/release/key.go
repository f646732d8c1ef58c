package release

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MaxKeySetSize caps a public key set file; real ones hold a few keys.
const MaxKeySetSize = 64 << 10

// keyAlgorithm opens every public key line, so a key meant for something
// else (an ssh key, a future pointer key) is never read as a release key.
const keyAlgorithm = "nodehotfix-release-ed25519"

const (
	pemTypePrivateKey     = "PRIVATE KEY"
	maxPrivateKeyFileSize = 64 << 10
)

// KeySet is a set of distinct trusted release public keys. The zero KeySet
// trusts nothing, so Verify rejects every envelope with it. A KeySet is
// immutable and safe for concurrent use.
type KeySet struct {
	keys []ed25519.PublicKey // distinct, in first-seen order
	byID map[string][]ed25519.PublicKey
}

// NewKeySet returns the set of the given keys, without duplicates. It fails
// if keys is empty or any key is not ed25519.PublicKeySize bytes long. The
// keys are copied.
func NewKeySet(keys ...ed25519.PublicKey) (KeySet, error) {
	if len(keys) == 0 {
		return KeySet{}, errors.New("make release key set: no keys")
	}
	ks := KeySet{byID: make(map[string][]ed25519.PublicKey)}
	seen := make(map[string]bool)
	for i, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return KeySet{}, fmt.Errorf("make release key set: key %d: %d bytes, want %d", i, len(k), ed25519.PublicKeySize)
		}
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		k = bytes.Clone(k)
		ks.keys = append(ks.keys, k)
		id := KeyID(k)
		ks.byID[id] = append(ks.byID[id], k)
	}
	return ks, nil
}

// KeyIDs returns the IDs of the keys in ks, in the order they were added.
func (ks KeySet) KeyIDs() []string {
	ids := make([]string, len(ks.keys))
	for i, k := range ks.keys {
		ids[i] = KeyID(k)
	}
	return ids
}

// ParseKeySet parses a public key set file (see the package doc). It fails,
// naming the line, on any line that is neither blank, a comment nor a
// well-formed key line, and fails if data exceeds MaxKeySetSize or holds no
// key. Repeated keys count once.
func ParseKeySet(data []byte) (KeySet, error) {
	if len(data) > MaxKeySetSize {
		return KeySet{}, fmt.Errorf("parse release keys: %d bytes exceeds the %d-byte limit", len(data), MaxKeySetSize)
	}
	var keys []ed25519.PublicKey
	for i, line := range strings.Split(string(data), "\n") {
		k, err := parseKeyLine(line)
		if err != nil {
			return KeySet{}, fmt.Errorf("parse release keys: line %d: %w", i+1, err)
		}
		if k != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return KeySet{}, errors.New("parse release keys: no keys")
	}
	return NewKeySet(keys...)
}

// parseKeyLine returns the key on line, or nil for a blank or comment line.
func parseKeyLine(line string) (ed25519.PublicKey, error) {
	if !utf8.ValidString(line) {
		return nil, errors.New("invalid UTF-8")
	}
	for _, r := range line {
		// A stray CR or NUL usually means a mangled file; refuse rather than
		// guess which bytes the author meant.
		if r != '\t' && (r < ' ' || r == 0x7f) {
			return nil, fmt.Errorf("control character %U", r)
		}
	}
	line = strings.TrimLeft(line, " \t")
	if line == "" || line[0] == '#' {
		return nil, nil
	}
	algo, rest := cutField(line)
	if algo != keyAlgorithm {
		return nil, fmt.Errorf("key type %q: want %q", algo, keyAlgorithm)
	}
	enc, _ := cutField(rest)
	if enc == "" {
		return nil, errors.New("missing key")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("decode key: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key is %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// cutField splits s at its first run of spaces or tabs.
func cutField(s string) (field, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], " \t")
}

// MarshalPublicKey returns pub as one line of a public key set file, ending in
// a newline. Control characters in comment become spaces so the comment can
// never start another line. pub must be a valid ed25519 public key; any other
// length gives a line ParseKeySet rejects.
func MarshalPublicKey(pub ed25519.PublicKey, comment string) []byte {
	comment = strings.ToValidUTF8(comment, "?")
	comment = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, comment)
	comment = strings.TrimSpace(comment)
	line := keyAlgorithm + " " + base64.StdEncoding.EncodeToString(pub)
	if comment != "" {
		line += " " + comment
	}
	return []byte(line + "\n")
}

// KeyID returns the ID of a public key: the first 16 hex digits of the sha256
// of its raw bytes. An ID names a key in an envelope so a verifier knows which
// key to try; it is not a secret and proves nothing.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateKey returns a new release key pair with entropy from rand, or from
// a secure source if rand is nil.
func GenerateKey(rand io.Reader) (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, nil, fmt.Errorf("generate release key: %w", err)
	}
	return pub, priv, nil
}

// MarshalPrivateKey returns priv as a PEM "PRIVATE KEY" block (PKCS #8). The
// result is secret: write it with mode 0600.
func MarshalPrivateKey(priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("marshal release private key: %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("marshal release private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemTypePrivateKey, Bytes: der}), nil
}

// ParsePrivateKey parses a private key file written by MarshalPrivateKey or
// "openssl genpkey -algorithm ed25519". The file must hold exactly one
// unencrypted PEM "PRIVATE KEY" block with an ed25519 key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	if len(data) > maxPrivateKeyFileSize {
		return nil, fmt.Errorf("parse release private key: %d bytes exceeds the %d-byte limit", len(data), maxPrivateKeyFileSize)
	}
	block, rest := pem.Decode(data)
	switch {
	case block == nil:
		return nil, errors.New("parse release private key: no PEM block")
	case block.Type != pemTypePrivateKey:
		return nil, fmt.Errorf("parse release private key: PEM type %q, want %q", block.Type, pemTypePrivateKey)
	case len(block.Headers) != 0:
		return nil, errors.New("parse release private key: PEM headers (encrypted keys are not supported)")
	case len(bytes.TrimSpace(rest)) != 0:
		return nil, errors.New("parse release private key: data after the PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse release private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse release private key: %T, want ed25519", k)
	}
	return priv, nil
}
