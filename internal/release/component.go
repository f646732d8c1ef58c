package release

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"nodehotfix/internal/jsonobj"
)

// Component configurations are the live-patching service's documents for
// components other than the agent (localDNS, say): a JSON object the
// service serves verbatim as the response's config. They are signed with
// the release keys, in envelopes of their own payload type, so a component
// configuration signature never verifies as a release, nor the reverse.
//
// Component configuration payload (compact JSON as SignComponent writes it):
//
//	{"schema":1,"type":"nodehotfix-component-config","component":"localDNS",
//	 "version":3,"config":"<the configuration: a JSON object, as text>",
//	 "not_after":"2026-06-01T00:00:00Z"}
//
// Served form: the configuration object with one more member,
// ComponentEnvelopeKey, whose value is the envelope. A reference node reads
// the members it knows and ignores that one; our node verifies the envelope
// and then uses only the configuration it signs (SplitServed).

// Limits of component configurations. A served one (the configuration and
// its envelope, which holds it again in base64) stays under the 48 KiB
// lpsd serves (lps.ServedBudget).
const (
	// MaxComponentConfigSize caps a configuration's text.
	MaxComponentConfigSize = 12 << 10
	// MaxComponentEnvelopeSize caps a component configuration envelope.
	MaxComponentEnvelopeSize = 24 << 10
	// MaxComponentServedSize caps the served form (SplitServed).
	MaxComponentServedSize = MaxComponentConfigSize + MaxComponentEnvelopeSize + 64
	// maxComponentNameLength bounds a component's name.
	maxComponentNameLength = 64
	// MaxComponentVersion is the highest version: exact in every JSON
	// reader (2^53).
	MaxComponentVersion = 1 << 53
)

// ComponentEnvelopeKey is the member of a served configuration that holds
// its signed envelope.
const ComponentEnvelopeKey = "nodehotfixConfigEnvelope"

// Wire constants of component configuration envelopes and payloads.
const (
	componentPayloadType = "application/vnd.nodehotfix.component-config.v1+json"
	componentType        = "nodehotfix-component-config"

	keyComponent = "component"
	keyConfig    = "config"
)

// ComponentConfig is what an operator signs for one version of one
// component's configuration.
type ComponentConfig struct {
	// Component is the component's name as nodes ask for it (localDNS):
	// a letter, then letters and digits, at most 64.
	Component string `json:"component"`
	// Version numbers the component's configurations, 1 to
	// MaxComponentVersion; nodes are served the highest one whose rollout
	// includes them.
	Version int64 `json:"version"`
	// Config is the configuration: the text of a JSON object of at most
	// MaxComponentConfigSize bytes, without duplicate keys or the key
	// ComponentEnvelopeKey.
	Config string `json:"config"`
	// NotAfter is when the signature stops verifying.
	NotAfter time.Time `json:"not_after"`
}

// ValidComponentName reports whether s is a component name: a letter, then
// letters and digits, at most 64 (localDNS, aksNodeController).
func ValidComponentName(s string) bool {
	if s == "" || len(s) > maxComponentNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}

// Validate reports the first schema violation in c, or nil.
func (c ComponentConfig) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("validate component config: %w", err)
	}
	return nil
}

func (c ComponentConfig) validate() error {
	if !ValidComponentName(c.Component) {
		return fmt.Errorf("component %q: want a letter, then letters and digits, at most %d", c.Component, maxComponentNameLength)
	}
	if c.Version < 1 || c.Version > MaxComponentVersion {
		return fmt.Errorf("version %d: want 1 to %d", c.Version, int64(MaxComponentVersion))
	}
	if err := checkConfigObject(c.Config); err != nil {
		return err
	}
	if c.NotAfter.IsZero() {
		return errors.New("not_after is not set")
	}
	return nil
}

// checkConfigObject checks a configuration's text: one JSON object, small,
// unambiguous, without the member the served form adds.
func checkConfigObject(s string) error {
	if len(s) > MaxComponentConfigSize {
		return fmt.Errorf("config is %d bytes, at most %d", len(s), MaxComponentConfigSize)
	}
	fields, err := jsonobj.Members([]byte(s))
	if err != nil {
		return fmt.Errorf("config: want a JSON object: %w", err)
	}
	for _, f := range fields {
		if f.Key == ComponentEnvelopeKey {
			return fmt.Errorf("config: key %q is reserved for the signature", ComponentEnvelopeKey)
		}
	}
	return nil
}

type wireComponentPayload struct {
	Schema    int    `json:"schema"`
	Type      string `json:"type"`
	Component string `json:"component"`
	Version   int64  `json:"version"`
	Config    string `json:"config"`
	NotAfter  string `json:"not_after"`
}

// SignComponent validates c and returns an envelope holding one signature
// by priv, as Sign does for releases.
func SignComponent(c ComponentConfig, priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign component config: private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("sign component config: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(wireComponentPayload{
		Schema: schemaVersion, Type: componentType, Component: c.Component, Version: c.Version,
		Config: c.Config, NotAfter: formatNotAfter(c.NotAfter),
	}); err != nil {
		return nil, fmt.Errorf("sign component config: encode payload: %w", err)
	}
	payload := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if _, err := parseComponent(payload); err != nil {
		return nil, fmt.Errorf("sign component config: encoded payload: %w", err)
	}
	env := envelope{payloadType: componentPayloadType, payload: payload}
	env.sigs = append(env.sigs, signPayload(env.payloadType, payload, priv))
	out, err := encodeEnvelope(env, MaxComponentEnvelopeSize)
	if err != nil {
		return nil, fmt.Errorf("sign component config: %w", err)
	}
	return out, nil
}

// VerifyComponent checks a component configuration envelope as Verify
// checks a release's: size, strict decoding, its own payload type,
// signatures by ks.Threshold() distinct keys of ks, the payload's type and schema, Validate, and
// now before NotAfter. Every error is a *VerifyError.
func (ks KeySet) VerifyComponent(envelope []byte, now time.Time) (ComponentConfig, error) {
	if now.IsZero() {
		return ComponentConfig{}, verifyErr(ReasonExpired, errors.New("no current time to check expiry against"))
	}
	env, err := parseEnvelopeOf(envelope, componentPayloadType)
	if err != nil {
		return ComponentConfig{}, err
	}
	if err := ks.verifySignatures(env, "trusted keys"); err != nil {
		return ComponentConfig{}, err
	}
	c, err := parseComponent(env.payload)
	if err != nil {
		return ComponentConfig{}, err
	}
	if !now.Before(c.NotAfter) {
		return ComponentConfig{}, verifyErr(ReasonExpired, fmt.Errorf("not_after %s is not after %s", formatNotAfter(c.NotAfter), now.UTC().Format(time.RFC3339)))
	}
	return c, nil
}

// InspectComponent decodes a component configuration envelope WITHOUT
// checking any signature or expiry, for the service and operator tools, as
// Inspect does for releases. Its errors are *VerifyError.
func InspectComponent(envelope []byte) (ComponentConfig, error) {
	env, err := parseEnvelopeOf(envelope, componentPayloadType)
	if err != nil {
		return ComponentConfig{}, err
	}
	return parseComponent(env.payload)
}

func parseComponent(data []byte) (ComponentConfig, error) {
	fields, err := payloadFields(data, componentType)
	if err != nil {
		return ComponentConfig{}, err
	}
	m, err := requireKeys(fields, keySchema, keyType, keyComponent, keyVersion, keyConfig, keyNotAfter)
	if err != nil {
		return ComponentConfig{}, verifyErr(ReasonMalformed, fmt.Errorf("decode payload: %w", err))
	}
	var c ComponentConfig
	var notAfter string
	if err := cmp.Or(
		decodeValue(m, keyComponent, &c.Component),
		// encoding/json refuses 3.0 and 3e0 for an int64.
		decodeValue(m, keyVersion, &c.Version),
		decodeValue(m, keyConfig, &c.Config),
		decodeValue(m, keyNotAfter, &notAfter),
	); err != nil {
		return ComponentConfig{}, verifyErr(ReasonMalformed, fmt.Errorf("decode payload: %w", err))
	}
	if c.NotAfter, err = parseNotAfter(notAfter); err != nil {
		return ComponentConfig{}, verifyErr(ReasonMalformed, fmt.Errorf("decode payload: %w", err))
	}
	if err := c.Validate(); err != nil {
		return ComponentConfig{}, verifyErr(ReasonInvalid, err)
	}
	return c, nil
}

// ServedComponent returns what the service serves for a component
// configuration envelope: its configuration with the envelope added as the
// member ComponentEnvelopeKey. It checks the envelope as InspectComponent
// does.
func ServedComponent(envelope []byte) ([]byte, error) {
	c, err := InspectComponent(envelope)
	if err != nil {
		return nil, fmt.Errorf("serve component config: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, envelope); err != nil {
		return nil, fmt.Errorf("serve component config: %w", err)
	}
	body := bytes.TrimRight([]byte(c.Config), " \t\r\n")
	body = bytes.TrimSuffix(body, []byte("}"))
	out := make([]byte, 0, len(body)+len(ComponentEnvelopeKey)+compact.Len()+8)
	out = append(out, body...)
	if fields, _ := jsonobj.Members([]byte(c.Config)); len(fields) > 0 {
		out = append(out, ',')
	}
	out = append(out, '"')
	out = append(out, ComponentEnvelopeKey...)
	out = append(out, `":`...)
	out = append(out, compact.Bytes()...)
	out = append(out, '}')
	return out, nil
}

// SplitServed returns the envelope a served configuration carries, and
// whether it carries one: a configuration from a service that signs none
// (the reference's) has none. It fails for a document over
// MaxComponentServedSize, one that is not a JSON object, or one whose
// envelope member is not an object.
func SplitServed(served []byte) (envelope []byte, ok bool, err error) {
	if len(served) > MaxComponentServedSize {
		return nil, false, fmt.Errorf("served config is %d bytes, limit %d", len(served), MaxComponentServedSize)
	}
	fields, err := jsonobj.Members(served)
	if err != nil {
		return nil, false, fmt.Errorf("served config: %w", err)
	}
	i := slices.IndexFunc(fields, func(f jsonobj.Member) bool { return f.Key == ComponentEnvelopeKey })
	if i < 0 {
		return nil, false, nil
	}
	v := bytes.TrimSpace(fields[i].Value)
	if len(v) == 0 || v[0] != '{' {
		return nil, false, fmt.Errorf("served config: key %q is not an envelope object", ComponentEnvelopeKey)
	}
	return v, true, nil
}
