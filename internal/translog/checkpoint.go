package translog

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// MaxNoteSize caps a signed checkpoint. Its text is three short lines and
// each signature line about 150 bytes, so 8 KiB holds a log signature and
// dozens of cosignatures while bounding parsing work on hostile input.
const MaxNoteSize = 8 << 10

// Checkpoint is a log's tree head: C2SP tlog-checkpoint note text.
type Checkpoint struct {
	// Origin names the log; it equals the log key's name.
	Origin string
	// Size is the number of records (leaves).
	Size int64
	// Hash is the RFC 6962 root hash of the first Size records.
	Hash tlog.Hash
	// Extensions are the optional lines after the root hash, each
	// non-empty. Witnesses cosign them but vouch only for the first three
	// lines; nothing here gives them meaning.
	Extensions []string
	// Note is the signed note Open verified the checkpoint from, its
	// signature lines included, to keep or show as evidence; nil for a
	// checkpoint ParseCheckpoint or a caller made. Format and Sign ignore
	// it.
	Note []byte
}

// Format returns the note text:
// "<origin>\n<size>\n<base64 hash>\n" then one line per extension. Errors:
// an origin that is not a key name, a negative size, or an empty extension
// or one with a control character.
func (c Checkpoint) Format() ([]byte, error) {
	if err := checkName(c.Origin); err != nil {
		return nil, fmt.Errorf("checkpoint origin: %w", err)
	}
	if c.Size < 0 {
		return nil, fmt.Errorf("checkpoint size %d: negative", c.Size)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%d\n%s\n", c.Origin, c.Size, c.Hash)
	for _, e := range c.Extensions {
		if err := checkLine(e); err != nil {
			return nil, fmt.Errorf("checkpoint extension line: %w", err)
		}
		b.WriteString(e)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// Sign returns the signed note of c signed by the log key, whose name must
// be c's origin.
func (c Checkpoint) Sign(log note.Signer) ([]byte, error) {
	if log.Name() != c.Origin {
		return nil, fmt.Errorf("sign checkpoint: signer %q is not origin %q", log.Name(), c.Origin)
	}
	text, err := c.Format()
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	msg, err := note.Sign(&note.Note{Text: string(text)}, log)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	return msg, nil
}

// ParseCheckpoint parses note text (without signatures) strictly: exactly
// one spelling is accepted for each value, so two readers never disagree.
// The origin must be a valid key name, since it must equal the log key's.
// Errors are *VerifyError with ReasonMalformed.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	c, err := parseCheckpoint(text)
	if err != nil {
		return Checkpoint{}, verifyErr(ReasonMalformed, fmt.Errorf("checkpoint: %w", err))
	}
	return c, nil
}

func parseCheckpoint(text []byte) (Checkpoint, error) {
	if len(text) > MaxNoteSize {
		return Checkpoint{}, fmt.Errorf("%d bytes, limit %d", len(text), MaxNoteSize)
	}
	if len(text) == 0 || text[len(text)-1] != '\n' {
		return Checkpoint{}, errors.New("text does not end in a newline")
	}
	lines := bytes.Split(text[:len(text)-1], []byte("\n"))
	if len(lines) < 3 {
		return Checkpoint{}, fmt.Errorf("%d lines, want at least 3", len(lines))
	}
	var c Checkpoint
	c.Origin = string(lines[0])
	if err := checkName(c.Origin); err != nil {
		return Checkpoint{}, fmt.Errorf("origin: %w", err)
	}
	size, err := parseSize(string(lines[1]))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("size: %w", err)
	}
	c.Size = size
	if c.Hash, err = parseHash(string(lines[2])); err != nil {
		return Checkpoint{}, fmt.Errorf("root hash: %w", err)
	}
	for _, l := range lines[3:] {
		if err := checkLine(string(l)); err != nil {
			return Checkpoint{}, fmt.Errorf("extension line: %w", err)
		}
		c.Extensions = append(c.Extensions, string(l))
	}
	return c, nil
}

// parseSize parses a tree size: ASCII decimal, no sign, no leading zeros.
func parseSize(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%q: want a decimal without sign or leading zeros", s)
	}
	return n, nil
}

// parseHash parses canonical padded standard base64 of 32 bytes.
func parseHash(s string) (tlog.Hash, error) {
	raw, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(raw) != tlog.HashSize || base64.StdEncoding.EncodeToString(raw) != s {
		return tlog.Hash{}, fmt.Errorf("%q: want 32 bytes in padded base64", s)
	}
	return tlog.Hash(raw), nil
}

// checkLine requires a non-empty line of UTF-8 without control characters.
func checkLine(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if !validText(s) {
		return fmt.Errorf("%q: invalid UTF-8 or control character", s)
	}
	return nil
}

func validText(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return false
		}
	}
	return true
}
