// Package component opens the configuration the live-patching service
// serves for a component other than the agent, verifying its signature.
//
// Our lpsd serves a component's configuration with its signed envelope in
// the member release.ComponentEnvelopeKey; the reference's service serves
// the configuration alone. A node with release keys verifies the envelope
// and then uses only the configuration it signs, never the unsigned
// members beside it. A node without keys uses what was served, as it takes
// hotfixes from its package repository unsigned.
package component

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/release"
)

// ErrUnsigned is returned (wrapped) by Open when the node has release keys,
// signatures are required, and the served configuration carries none.
var ErrUnsigned = errors.New("component config carries no signature")

// LoadKeys reads the node's release keys at path. A missing file is no
// keys (nil, nil); an unreadable or malformed one is an error, so a
// damaged key file never passes for an unsigned node.
func LoadKeys(path string) (*release.KeySet, error) {
	data, err := capfile.Read(path, release.MaxKeySetSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read release keys: %w", err)
	}
	ks, err := release.ParseKeySet(data)
	if err != nil {
		return nil, fmt.Errorf("release keys %s: %w", path, err)
	}
	return &ks, nil
}

// Opened is a served configuration, opened.
type Opened struct {
	// Config is the configuration to use: what the signature covers when
	// it was verified, else the served text.
	Config string
	// Signed reports whether it carried an envelope, Verified whether
	// that envelope was verified (the node has keys).
	Signed, Verified bool
	// Version is the signed version (0 when not verified).
	Version int64
}

// Open opens served, the config text the service answered for component.
// With keys, an envelope must verify at now and name component, and
// requireSigned refuses a configuration without one (ErrUnsigned). Without
// keys the served text is used as it is. An empty configuration opens as
// empty. Served text over release.MaxComponentServedSize is refused.
func Open(served, component string, keys *release.KeySet, now time.Time, requireSigned bool) (Opened, error) {
	if strings.TrimSpace(served) == "" {
		return Opened{}, nil
	}
	env, signed, err := release.SplitServed([]byte(served))
	if err != nil {
		// A reference service may serve any text: unless a signature is
		// required, the caller decides what it means.
		if keys == nil || !requireSigned {
			return Opened{Config: served}, nil
		}
		return Opened{}, fmt.Errorf("open %s config: %w", component, err)
	}
	switch {
	case keys == nil:
		return Opened{Config: served, Signed: signed}, nil
	case !signed && requireSigned:
		return Opened{}, fmt.Errorf("open %s config: this node has release keys: %w", component, ErrUnsigned)
	case !signed:
		return Opened{Config: served}, nil
	}
	c, err := keys.VerifyComponent(env, now)
	if err != nil {
		return Opened{}, fmt.Errorf("open %s config: %w", component, err)
	}
	if c.Component != component {
		return Opened{}, fmt.Errorf("open %s config: the signature is for component %q", component, c.Component)
	}
	return Opened{Config: c.Config, Signed: true, Verified: true, Version: c.Version}, nil
}
