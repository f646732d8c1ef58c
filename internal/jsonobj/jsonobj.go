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
// whitespace allowed) or if a key appears twice.
func Members(data []byte) ([]Member, error) {
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
