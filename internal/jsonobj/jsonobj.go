// Package jsonobj splits a JSON object into its members, refusing
// ambiguity that encoding/json resolves silently.
//
// encoding/json keeps the last of two duplicate keys and ignores nothing
// after the first value only when told to; for signed or security-relevant
// documents either would let two readers see different content, so both are
// errors here.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// ErrDuplicateKey is returned (wrapped) when a key appears twice.
var ErrDuplicateKey = errors.New("duplicate key")

// Member is one key and its raw value.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Members returns the members of the JSON object data in document order.
// It is an error if data is not exactly one JSON object (surrounding
// whitespace allowed) or if a key appears twice. The values alias data.
//
// Nodes split every signed document they verify with it, on the boot
// path, so valid input takes a single scan after json.Valid; input that is
// not valid JSON is left to encoding/json's decoder, which says what is
// wrong with it.
func Members(data []byte) ([]Member, error) {
	if !json.Valid(data) {
		return decode(data)
	}
	return scan(data)
}

// scan is Members on input json.Valid accepted.
func scan(data []byte) ([]Member, error) {
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	i = skipSpace(data, i+1)
	var out []Member
	seen := make(map[string]bool)
	for data[i] != '}' {
		end := stringEnd(data, i)
		key, err := unquote(data[i:end])
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("%w %q", ErrDuplicateKey, key)
		}
		seen[key] = true
		i = skipSpace(data, skipSpace(data, end)+1) // past the ':'
		end = valueEnd(data, i)
		out = append(out, Member{key, data[i:end:end]})
		if i = skipSpace(data, end); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out, nil
}

// The scanners below run on input json.Valid accepted, so they only find
// where things end.

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at data[i].
func stringEnd(data []byte, i int) int {
	for i++; data[i] != '"'; i++ {
		if data[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd returns the index just past the value starting at data[i].
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch data[i] {
			case '"':
				i = stringEnd(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(data) && !strings.ContainsRune(",}] \t\n\r", rune(data[i])) {
		i++
	}
	return i
}

// unquote returns the string a JSON string literal holds, as
// encoding/json reads it (escapes decoded, invalid UTF-8 replaced).
func unquote(lit []byte) (string, error) {
	if s := lit[1 : len(lit)-1]; !bytes.ContainsAny(s, "\\") && utf8.Valid(s) {
		return string(s), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// decode is Members through encoding/json's decoder: what scan must
// agree with, and on input that is not valid JSON the one that says what
// is wrong with it.
func decode(data []byte) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []Member
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		if seen[key] {
			return nil, fmt.Errorf("%w %q", ErrDuplicateKey, key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		out = append(out, Member{key, val})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}
