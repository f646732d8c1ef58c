package release

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
)

// wirePayload is the payload in its signed key order.
type wirePayload struct {
	Schema    int                 `json:"schema"`
	Type      string              `json:"type"`
	Base      string              `json:"base"`
	Version   string              `json:"version"`
	Artifacts map[string]Artifact `json:"artifacts"`
	NotAfter  string              `json:"not_after"`
	// LaunchRecords is omitted when false, so releases signed without it
	// keep their bytes and verify on agents that predate it.
	LaunchRecords bool `json:"launch_records,omitempty"`
}

type wireEnvelope struct {
	PayloadType string          `json:"payloadType"`
	Payload     string          `json:"payload"`
	Signatures  []wireSignature `json:"signatures"`
}

type wireSignature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// Sign validates r, encodes it as a release payload and returns an envelope
// holding one signature by priv. NotAfter is encoded in UTC truncated to the
// second. Sign checks no clock, so it can sign a release that has already
// expired.
func Sign(r Release, priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign release: private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("sign release: %w", err)
	}
	payload, err := encodePayload(r)
	if err != nil {
		return nil, fmt.Errorf("sign release: %w", err)
	}
	// Never publish what Verify would refuse to parse (a truncated or
	// out-of-range not_after, say).
	if _, err := parseRelease(payload); err != nil {
		return nil, fmt.Errorf("sign release: encoded payload: %w", err)
	}
	env := envelope{payloadType: payloadType, payload: payload}
	env.sigs = append(env.sigs, signPayload(env.payloadType, env.payload, priv))
	return encodeEnvelope(env, MaxEnvelopeSize)
}

// AddSignature co-signs an envelope with priv and returns the new envelope:
// the payload bytes and existing signatures are kept, so holders can sign
// offline, one after another, in any order. envelope may be a release, a
// component configuration or a key-set document; it is checked as the
// matching Inspect function does, but none of its signatures is verified.
// It fails if priv has already signed or the envelope would exceed its
// type's signature or size limit.
func AddSignature(envelope []byte, priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("add signature: private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	env, k, err := parseAnyEnvelope(envelope)
	if err != nil {
		return nil, fmt.Errorf("add signature: %w", err)
	}
	if err := k.check(env.payload); err != nil {
		return nil, fmt.Errorf("add %s signature: %w", k.name, err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	id := KeyID(pub)
	msg := pae(env.payloadType, env.payload)
	for _, s := range env.sigs {
		if s.keyID == id && ed25519.Verify(pub, msg, s.sig) {
			return nil, fmt.Errorf("add %s signature: already signed by key %s", k.name, id)
		}
	}
	if len(env.sigs) >= k.maxSigs {
		return nil, fmt.Errorf("add %s signature: envelope already has %d signatures", k.name, len(env.sigs))
	}
	env.sigs = append(env.sigs, signPayload(env.payloadType, env.payload, priv))
	out, err := encodeEnvelope(env, k.limit)
	if err != nil {
		return nil, fmt.Errorf("add %s signature: %w", k.name, err)
	}
	return out, nil
}

func encodePayload(r Release) ([]byte, error) {
	p := wirePayload{
		Schema:    schemaVersion,
		Type:      releaseType,
		Base:      r.Base,
		Version:   r.Version,
		Artifacts: r.Artifacts,
		NotAfter:  formatNotAfter(r.NotAfter),

		LaunchRecords: r.LaunchRecords,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Keep '&' in URLs readable for whoever inspects a payload by hand.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func encodeEnvelope(env envelope, limit int) ([]byte, error) {
	w := wireEnvelope{
		PayloadType: env.payloadType,
		Payload:     base64.StdEncoding.EncodeToString(env.payload),
	}
	for _, s := range env.sigs {
		w.Signatures = append(w.Signatures, wireSignature{KeyID: s.keyID, Sig: base64.StdEncoding.EncodeToString(s.sig)})
	}
	out, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("encode envelope: %d bytes exceeds the %d-byte limit", len(out), limit)
	}
	return out, nil
}

func signPayload(typ string, payload []byte, priv ed25519.PrivateKey) signature {
	return signature{
		keyID: KeyID(priv.Public().(ed25519.PublicKey)),
		sig:   ed25519.Sign(priv, pae(typ, payload)),
	}
}

// pae is DSSE's pre-authentication encoding. Binding the payload type into
// the signed bytes is what keeps a release signature from verifying as any
// other document, and the length prefixes make the encoding unambiguous.
func pae(typ string, body []byte) []byte {
	b := make([]byte, 0, len("DSSEv1")+len(typ)+len(body)+24)
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(typ)), 10)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, ' ')
	return append(b, body...)
}
