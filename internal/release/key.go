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
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"nodehotfix/internal/duration"
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

// KeySet is a set of distinct trusted release public keys, with the
// threshold of them a document must be signed by, the key-set version it
// is, when it expires and its log policy. The zero KeySet trusts nothing,
// so Verify rejects every envelope with it. A KeySet is immutable and safe
// for concurrent use.
type KeySet struct {
	keys []ed25519.PublicKey // distinct, in first-seen order
	byID map[string][]ed25519.PublicKey
	// version and threshold are 0 in the zero KeySet, read as 1.
	version   int64
	threshold int
	expires   time.Time
	log       LogPolicy
}

// NewKeySet returns the set of the given keys, without duplicates: version
// 1, threshold 1, no expiry and no log policy. It fails if keys is empty or
// any key is not a canonical ed25519 public key encoding. The keys are
// copied.
func NewKeySet(keys ...ed25519.PublicKey) (KeySet, error) {
	if len(keys) == 0 {
		return KeySet{}, errors.New("make release key set: no keys")
	}
	distinct, err := dedupKeys(keys)
	if err != nil {
		return KeySet{}, fmt.Errorf("make release key set: %w", err)
	}
	return newKeySet(KeySetDocument{Version: 1, Threshold: 1, Keys: distinct}), nil
}

// dedupKeys checks keys and returns them without repeats, first-seen order.
func dedupKeys(keys []ed25519.PublicKey) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	seen := make(map[string]bool)
	for i, k := range keys {
		if err := checkPublicKey(k); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, k)
		}
	}
	return out, nil
}

// checkPublicKey accepts only the one encoding of a point: 32 bytes, y
// below the field prime and not ±1. Every other point has exactly one
// encoding then, so keys that differ as bytes are distinct keys and can
// never be counted twice towards a threshold; y = ±1 are the two points
// whose x is 0 (and whose sign bit is free), of small order and useless as
// keys.
func checkPublicKey(k ed25519.PublicKey) error {
	if len(k) != ed25519.PublicKeySize {
		return fmt.Errorf("%d bytes, want %d", len(k), ed25519.PublicKeySize)
	}
	le := bytes.Clone(k)
	le[31] &= 0x7f // the sign of x
	slices.Reverse(le)
	y := new(big.Int).SetBytes(le)
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	pm1 := new(big.Int).Sub(p, big.NewInt(1))
	if y.Cmp(p) >= 0 || y.Cmp(big.NewInt(1)) == 0 || y.Cmp(pm1) == 0 {
		return errors.New("not a canonical ed25519 public key")
	}
	return nil
}

// newKeySet builds the set of a validated document; the keys are copied.
func newKeySet(d KeySetDocument) KeySet {
	ks := KeySet{
		byID:      make(map[string][]ed25519.PublicKey),
		version:   d.Version,
		threshold: d.Threshold,
		expires:   d.Expires,
		log:       d.Log.withDefaults(),
	}
	for _, k := range d.Keys {
		k = bytes.Clone(k)
		ks.keys = append(ks.keys, k)
		id := KeyID(k)
		ks.byID[id] = append(ks.byID[id], k)
	}
	ks.log.Witnesses = slices.Clone(ks.log.Witnesses)
	return ks
}

// KeyIDs returns the IDs of the keys in ks, in the order they were added.
func (ks KeySet) KeyIDs() []string { return keyIDs(ks.keys) }

// Version returns the key-set version of ks: 1 for a baked file without
// the version directive, the document's version for a set from Next.
func (ks KeySet) Version() int64 { return max(ks.version, 1) }

// Threshold returns how many distinct keys of ks must sign a document: 1
// for a file without the threshold directive.
func (ks KeySet) Threshold() int { return max(ks.threshold, 1) }

// Expires returns when a set from a signed key-set document expires, and
// the zero time for a baked set, which does not expire.
func (ks KeySet) Expires() time.Time { return ks.expires }

// Log returns the log policy of ks; its Key is "" when ks has none.
func (ks KeySet) Log() LogPolicy {
	p := ks.log
	p.Witnesses = slices.Clone(p.Witnesses)
	return p
}

// Document returns the content of ks, to build the next version from.
// The result shares nothing with ks.
func (ks KeySet) Document() KeySetDocument {
	d := KeySetDocument{Version: ks.Version(), Expires: ks.expires, Threshold: ks.Threshold(), Log: ks.Log()}
	for _, k := range ks.keys {
		d.Keys = append(d.Keys, bytes.Clone(k))
	}
	return d
}

// Directives of a key set file (see the package doc).
const (
	directiveVersion    = "nodehotfix-keyset-version"
	directiveThreshold  = "nodehotfix-threshold"
	directiveLogKey     = "nodehotfix-log-key"
	directiveWitness    = "nodehotfix-witness"
	directiveQuorum     = "nodehotfix-witness-quorum"
	directiveMaxAge     = "nodehotfix-max-checkpoint-age"
	directiveRequireLog = "nodehotfix-require-log"
)

// ParseKeySet parses a public key set file (see the package doc): key
// lines and the optional directives. It fails, naming the line, on any line
// that is neither blank, a comment, a well-formed key line nor a
// well-formed directive, and on a directive other than the witness one
// given twice; it fails if data exceeds MaxKeySetSize, holds no key, or
// declares a threshold above its number of distinct keys or a log policy
// that is not valid (LogPolicy). Repeated keys count once. A file without
// directives is version 1, threshold 1, without a log policy.
func ParseKeySet(data []byte) (KeySet, error) {
	if len(data) > MaxKeySetSize {
		return KeySet{}, fmt.Errorf("parse release keys: %d bytes exceeds the %d-byte limit", len(data), MaxKeySetSize)
	}
	var keys []ed25519.PublicKey
	d := KeySetDocument{Version: 1, Threshold: 1}
	seen := make(map[string]bool)
	for i, line := range strings.Split(string(data), "\n") {
		k, dir, arg, err := parseKeyLine(line)
		if err == nil && dir != "" {
			if seen[dir] && dir != directiveWitness {
				err = fmt.Errorf("%s given twice", dir)
			} else {
				seen[dir] = true
				err = d.apply(dir, arg)
			}
		}
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
	var err error
	if d.Keys, err = dedupKeys(keys); err != nil {
		return KeySet{}, fmt.Errorf("parse release keys: %w", err)
	}
	ks, err := d.KeySet()
	if err != nil {
		return KeySet{}, fmt.Errorf("parse release keys: %w", err)
	}
	return ks, nil
}

// apply sets what directive dir with argument arg declares.
func (d *KeySetDocument) apply(dir, arg string) error {
	field, rest := cutField(arg)
	switch {
	case dir == directiveRequireLog && arg != "":
		return fmt.Errorf("%s takes no argument", dir)
	case dir != directiveRequireLog && field == "":
		return fmt.Errorf("%s: missing argument", dir)
	case rest != "":
		return fmt.Errorf("%s: unexpected %q after the argument", dir, rest)
	}
	var err error
	switch dir {
	case directiveVersion:
		d.Version, err = parseDecimal(field, MaxKeySetVersion)
	case directiveThreshold:
		var n int64
		n, err = parseDecimal(field, maxSignatures)
		d.Threshold = int(n)
	case directiveLogKey:
		d.Log.Key = field
	case directiveWitness:
		if slices.Contains(d.Log.Witnesses, field) {
			return fmt.Errorf("%s %s given twice", dir, field)
		}
		d.Log.Witnesses = append(d.Log.Witnesses, field)
	case directiveQuorum:
		var n int64
		n, err = parseDecimal(field, maxWitnesses)
		d.Log.Quorum = int(n)
	case directiveMaxAge:
		d.Log.MaxCheckpointAge, err = duration.Parse(field)
		if err == nil && d.Log.MaxCheckpointAge <= 0 {
			err = errors.New("want a positive duration")
		}
	case directiveRequireLog:
		d.Log.Required = true
	}
	if err != nil {
		return fmt.Errorf("%s %q: %w", dir, field, err)
	}
	return nil
}

// parseDecimal parses s as a decimal number from 0 to hi, in its one
// spelling: no sign, no leading zeros.
func parseDecimal(s string, hi int64) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s || n < 0 || n > hi {
		return 0, fmt.Errorf("want a whole number from 0 to %d", hi)
	}
	return n, nil
}

// parseKeyLine returns the key on line, or the directive and its argument,
// or neither for a blank or comment line.
func parseKeyLine(line string) (key ed25519.PublicKey, dir, arg string, err error) {
	if !utf8.ValidString(line) {
		return nil, "", "", errors.New("invalid UTF-8")
	}
	for _, r := range line {
		// A stray CR or NUL usually means a mangled file; refuse rather than
		// guess which bytes the author meant.
		if r != '\t' && (r < ' ' || r == 0x7f) {
			return nil, "", "", fmt.Errorf("control character %U", r)
		}
	}
	line = strings.TrimLeft(line, " \t")
	if line == "" || line[0] == '#' {
		return nil, "", "", nil
	}
	algo, rest := cutField(line)
	switch algo {
	case directiveVersion, directiveThreshold, directiveLogKey, directiveWitness, directiveQuorum, directiveMaxAge, directiveRequireLog:
		return nil, algo, strings.TrimRight(rest, " \t"), nil
	case keyAlgorithm:
	default:
		return nil, "", "", fmt.Errorf("key type %q: want %q or a directive", algo, keyAlgorithm)
	}
	enc, _ := cutField(rest)
	if enc == "" {
		return nil, "", "", errors.New("missing key")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, "", "", fmt.Errorf("decode key: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, "", "", fmt.Errorf("key is %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), "", "", nil
}

// MarshalKeySetFile returns d as a key set file that ParseKeySet reads
// back as d: the directives that differ from a plain file's defaults
// (version 1, threshold 1, no log policy), then one line per key with its
// ID as the comment. A baked set does not expire, so d.Expires is not
// written. It fails if d is not valid (KeySetDocument.KeySet).
func MarshalKeySetFile(d KeySetDocument) ([]byte, error) {
	ks, err := d.KeySet()
	if err != nil {
		return nil, fmt.Errorf("marshal release keys: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# nodehotfix release keys: key-set version %d, %d of %d keys sign\n", ks.Version(), ks.Threshold(), len(ks.keys))
	if ks.Version() != 1 {
		fmt.Fprintf(&b, "%s %d\n", directiveVersion, ks.Version())
	}
	if ks.Threshold() != 1 {
		fmt.Fprintf(&b, "%s %d\n", directiveThreshold, ks.Threshold())
	}
	if p := ks.log; p.Key != "" {
		fmt.Fprintf(&b, "%s %s\n", directiveLogKey, p.Key)
		for _, w := range p.Witnesses {
			fmt.Fprintf(&b, "%s %s\n", directiveWitness, w)
		}
		if p.Quorum != 0 {
			fmt.Fprintf(&b, "%s %d\n", directiveQuorum, p.Quorum)
		}
		fmt.Fprintf(&b, "%s %s\n", directiveMaxAge, duration.Format(p.MaxCheckpointAge))
		if p.Required {
			fmt.Fprintf(&b, "%s\n", directiveRequireLog)
		}
	}
	for _, k := range ks.keys {
		b.Write(MarshalPublicKey(k, KeyID(k)))
	}
	return b.Bytes(), nil
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
