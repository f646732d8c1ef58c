package release

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sigOver signs msg as is; tests use it to build signatures Sign never would.
func sigOver(priv ed25519.PrivateKey, msg []byte) wireSignature {
	return wireSignature{
		KeyID: KeyID(priv.Public().(ed25519.PublicKey)),
		Sig:   base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg)),
	}
}

// envelopeOf assembles an envelope without any of Sign's checks.
func envelopeOf(t testing.TB, typ string, payload []byte, sigs ...wireSignature) []byte {
	t.Helper()
	if sigs == nil {
		sigs = []wireSignature{}
	}
	return encodeWire(t, wireEnvelope{PayloadType: typ, Payload: base64.StdEncoding.EncodeToString(payload), Signatures: sigs})
}

// signRaw returns a correctly signed envelope around arbitrary payload bytes.
func signRaw(t testing.TB, priv ed25519.PrivateKey, payload []byte) []byte {
	t.Helper()
	return envelopeOf(t, payloadType, payload, sigOver(priv, pae(payloadType, payload)))
}

// payloadWith returns testRelease's payload as generic JSON after f edits it.
func payloadWith(t testing.TB, f func(m map[string]any)) []byte {
	t.Helper()
	_, priv := testKey(1)
	var m map[string]any
	if err := json.Unmarshal(payloadOf(t, mustSign(t, testRelease(), priv)), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func amd64(m map[string]any) map[string]any {
	return m["artifacts"].(map[string]any)["linux/amd64"].(map[string]any)
}

// replaceOnce replaces old in s, failing the test if old is missing.
func replaceOnce(t testing.TB, s []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(s, []byte(old)) {
		t.Fatalf("%q not in %s", old, s)
	}
	return bytes.Replace(s, []byte(old), []byte(new), 1)
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	pubA, privA := testKey(1)
	pubB, privB := testKey(2)
	trusted := mustKeySet(t, pubA)
	both := mustKeySet(t, pubA, pubB)
	valid := mustSign(t, testRelease(), privA)
	payload := payloadOf(t, valid)
	goodSig := decodeWire(t, valid).Signatures[0]
	const otherType = "application/vnd.in-toto+json"

	withSig := func(f func(sig []byte) []byte) []byte {
		w := decodeWire(t, valid)
		sig, _ := base64.StdEncoding.DecodeString(w.Signatures[0].Sig)
		w.Signatures[0].Sig = base64.StdEncoding.EncodeToString(f(sig))
		return encodeWire(t, w)
	}
	signedWith := func(f func(m map[string]any)) []byte { return signRaw(t, privA, payloadWith(t, f)) }
	signedText := func(old, new string) []byte { return signRaw(t, privA, replaceOnce(t, payload, old, new)) }
	tooMany := make([]wireSignature, maxSignatures+1)
	for i := range tooMany {
		tooMany[i] = goodSig
	}

	tests := []struct {
		name string
		env  []byte
		ks   *KeySet // nil: trusted
		at   time.Time
		want Reason
	}{
		// Trust and signatures.
		{name: "wrong-key", env: mustSign(t, testRelease(), privB), want: ReasonUntrusted},
		{name: "zero-key-set", env: valid, ks: &KeySet{}, want: ReasonUntrusted},
		{
			name: "mislabelled-keyid",
			env:  envelopeOf(t, payloadType, payload, wireSignature{KeyID: KeyID(pubA), Sig: sigOver(privB, pae(payloadType, payload)).Sig}),
			ks:   &both,
			want: ReasonBadSignature,
		},
		{name: "tampered-payload", env: envelopeOf(t, payloadType, replaceOnce(t, payload, "202604.01.3", "202604.01.4"), goodSig), want: ReasonBadSignature},
		{name: "tampered-signature", env: withSig(func(s []byte) []byte { s[10] ^= 1; return s }), want: ReasonBadSignature},
		{name: "truncated-signature", env: withSig(func(s []byte) []byte { return s[:63] }), want: ReasonBadSignature},
		{name: "empty-signature", env: withSig(func(s []byte) []byte { return nil }), want: ReasonBadSignature},
		{name: "signature-without-pae", env: envelopeOf(t, payloadType, payload, sigOver(privA, payload)), want: ReasonBadSignature},
		{name: "signature-for-other-type", env: envelopeOf(t, payloadType, payload, sigOver(privA, pae(otherType, payload))), want: ReasonBadSignature},
		{name: "payload-type-changed", env: envelopeOf(t, otherType, payload, sigOver(privA, pae(otherType, payload))), want: ReasonWrongType},
		{name: "payload-type-empty", env: envelopeOf(t, "", payload, sigOver(privA, pae("", payload))), want: ReasonWrongType},
		// Signed, but not a release of schema 1.
		{name: "pointer-type", env: signedWith(func(m map[string]any) { m["type"] = "nodehotfix-pointer" }), want: ReasonWrongType},
		{name: "schema-2", env: signedWith(func(m map[string]any) { m["schema"] = 2 }), want: ReasonWrongType},
		{name: "schema-string", env: signedWith(func(m map[string]any) { m["schema"] = "1" }), want: ReasonWrongType},
		{name: "no-type", env: signedWith(func(m map[string]any) { delete(m, "type") }), want: ReasonWrongType},
		{name: "not-an-object", env: signRaw(t, privA, []byte(`["nodehotfix-release"]`)), want: ReasonMalformed},
		// Signed and well-formed, but not a valid release.
		{name: "version-other-base", env: signedWith(func(m map[string]any) { m["version"] = "202605.01.3" }), want: ReasonInvalid},
		{name: "bad-base", env: signedWith(func(m map[string]any) { m["base"] = "dev" }), want: ReasonInvalid},
		{name: "http-url", env: signedWith(func(m map[string]any) { amd64(m)["url"] = "http://example.com/x" }), want: ReasonInvalid},
		{name: "bad-sha256", env: signedWith(func(m map[string]any) { amd64(m)["sha256"] = strings.Repeat("AB", 32) }), want: ReasonInvalid},
		{name: "zero-size", env: signedWith(func(m map[string]any) { amd64(m)["size"] = 0 }), want: ReasonInvalid},
		{name: "oversized-artifact", env: signedWith(func(m map[string]any) { amd64(m)["size"] = MaxArtifactSize + 1 }), want: ReasonInvalid},
		{name: "bad-platform", env: signedText(`"linux/amd64"`, `"linux_amd64"`), want: ReasonInvalid},
		{name: "no-artifacts", env: signedWith(func(m map[string]any) { m["artifacts"] = map[string]any{} }), want: ReasonInvalid},
		// Expiry against the caller's clock.
		{name: "expired-at-not-after", env: valid, at: testRelease().NotAfter, want: ReasonExpired},
		{name: "expired-long-ago", env: valid, at: testRelease().NotAfter.AddDate(1, 0, 0), want: ReasonExpired},
		// Malformed envelopes.
		{name: "empty", env: nil, want: ReasonMalformed},
		{name: "not-json", env: []byte("DSSEv1 garbage"), want: ReasonMalformed},
		{name: "array", env: []byte("[]"), want: ReasonMalformed},
		{name: "oversized", env: append(bytes.Clone(valid), bytes.Repeat([]byte(" "), MaxEnvelopeSize)...), want: ReasonMalformed},
		{name: "trailing-data", env: append(bytes.Clone(valid), "{}"...), want: ReasonMalformed},
		{name: "bad-base64", env: replaceOnce(t, valid, `"payload":"`, `"payload":"@@`), want: ReasonMalformed},
		{name: "base64-line-break", env: replaceOnce(t, valid, `"payload":"`, `"payload":"eyJz\n`), want: ReasonMalformed},
		{name: "unpadded-signature", env: replaceOnce(t, valid, `=="}]`, `"}]`), want: ReasonMalformed},
		{name: "unknown-envelope-key", env: replaceOnce(t, valid, `{"payloadType"`, `{"x":1,"payloadType"`), want: ReasonMalformed},
		{name: "case-variant-envelope-key", env: replaceOnce(t, valid, `"payload":`, `"Payload":`), want: ReasonMalformed},
		{name: "duplicate-envelope-key", env: replaceOnce(t, valid, `"payload":`, `"payload":"e30=","payload":`), want: ReasonMalformed},
		{name: "unknown-signature-key", env: replaceOnce(t, valid, `"keyid"`, `"cert":"","keyid"`), want: ReasonMalformed},
		{name: "no-signatures", env: envelopeOf(t, payloadType, payload), want: ReasonMalformed},
		{name: "null-signatures", env: replaceOnce(t, envelopeOf(t, payloadType, payload), `[]`, `null`), want: ReasonMalformed},
		{name: "too-many-signatures", env: envelopeOf(t, payloadType, payload, tooMany...), want: ReasonMalformed},
		{name: "bad-keyid", env: replaceOnce(t, valid, `"keyid":"`, `"keyid":"X`), want: ReasonMalformed},
		// Signed payloads that are ambiguous or sloppy JSON.
		{name: "duplicate-payload-key", env: signedText(`"version":"202604.01.3"`, `"version":"202604.01.3","version":"202604.01.4"`), want: ReasonMalformed},
		{name: "duplicate-platform", env: signedText(`"linux/arm64":`, `"linux/amd64":{"url":"https://evil.example/x","sha256":"`+strings.Repeat("cd", 32)+`","size":1},"linux/arm64":`), want: ReasonMalformed},
		{name: "duplicate-artifact-key", env: signedText(`"size":12345`, `"size":12345,"size":1`), want: ReasonMalformed},
		{name: "unknown-payload-key", env: signedWith(func(m map[string]any) { m["note"] = "x" }), want: ReasonMalformed},
		{name: "case-variant-payload-key", env: signedText(`"version":`, `"Version":`), want: ReasonMalformed},
		{name: "unknown-artifact-key", env: signedWith(func(m map[string]any) { amd64(m)["os"] = "linux" }), want: ReasonMalformed},
		{name: "missing-not-after", env: signedWith(func(m map[string]any) { delete(m, "not_after") }), want: ReasonMalformed},
		{name: "null-base", env: signedWith(func(m map[string]any) { m["base"] = nil }), want: ReasonMalformed},
		{name: "not-after-offset", env: signedWith(func(m map[string]any) { m["not_after"] = "2026-06-01T02:00:00+02:00" }), want: ReasonMalformed},
		{name: "not-after-fraction", env: signedWith(func(m map[string]any) { m["not_after"] = "2026-06-01T00:00:00.5Z" }), want: ReasonMalformed},
		{name: "not-after-date-only", env: signedWith(func(m map[string]any) { m["not_after"] = "2026-06-01" }), want: ReasonMalformed},
		{name: "size-fraction", env: signedWith(func(m map[string]any) { amd64(m)["size"] = 1.5 }), want: ReasonMalformed},
		{name: "size-string", env: signedWith(func(m map[string]any) { amd64(m)["size"] = "12345" }), want: ReasonMalformed},
		{name: "trailing-payload-data", env: signRaw(t, privA, append(bytes.Clone(payload), " {}"...)), want: ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ks := trusted
			if tt.ks != nil {
				ks = *tt.ks
			}
			at := tt.at
			if at.IsZero() {
				at = testNow
			}
			got, err := ks.Verify(tt.env, at)
			if err == nil {
				t.Fatalf("Verify() = %+v, want a %s error", got, tt.want)
			}
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify() = %v (%T), want a *VerifyError", err, err)
			}
			if ve.Reason != tt.want {
				t.Errorf("Verify() = %v, want reason %s", err, tt.want)
			}
			if diff := cmp.Diff(Release{}, got); diff != "" {
				t.Errorf("Verify() returned a release with its error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVerifyZeroTime(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(1)
	_, err := mustKeySet(t, pub).Verify(mustSign(t, testRelease(), priv), time.Time{})
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Reason != ReasonExpired {
		t.Errorf("Verify(zero time) = %v, want reason %s", err, ReasonExpired)
	}
}

func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(1)
	ks := mustKeySet(t, pub)
	valid := mustSign(t, testRelease(), priv)
	payload := payloadOf(t, valid)
	var indented bytes.Buffer
	if err := json.Indent(&indented, valid, " ", "\t"); err != nil {
		t.Fatal(err)
	}
	var spacedPayload bytes.Buffer
	if err := json.Indent(&spacedPayload, payload, "", "  "); err != nil {
		t.Fatal(err)
	}
	padded := append(bytes.Clone(valid), bytes.Repeat([]byte("\n"), MaxEnvelopeSize-len(valid))...)
	tests := []struct {
		name string
		env  []byte
		at   time.Time
	}{
		{"compact", valid, testNow},
		{"indented-envelope", indented.Bytes(), testNow},
		{"indented-payload", signRaw(t, priv, spacedPayload.Bytes()), testNow},
		{"at-size-limit", padded, testNow},
		{"just-before-expiry", valid, testRelease().NotAfter.Add(-time.Nanosecond)},
		{"other-zone-clock", valid, testNow.In(time.FixedZone("X", -11*60*60))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ks.Verify(tt.env, tt.at)
			if err != nil {
				t.Fatalf("Verify() = %v", err)
			}
			if diff := cmp.Diff(testRelease(), got); diff != "" {
				t.Errorf("Verify() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVerifyRotation(t *testing.T) {
	t.Parallel()
	pubOld, privOld := testKey(1)
	pubNew, privNew := testKey(2)
	oldOnly := mustSign(t, testRelease(), privOld)
	newOnly := mustSign(t, testRelease(), privNew)
	co, err := AddSignature(oldOnly, privNew)
	if err != nil {
		t.Fatal(err)
	}
	// corrupt breaks signature i of an envelope.
	corrupt := func(env []byte, idx ...int) []byte {
		w := decodeWire(t, env)
		for _, i := range idx {
			sig, _ := base64.StdEncoding.DecodeString(w.Signatures[i].Sig)
			sig[0] ^= 1
			w.Signatures[i].Sig = base64.StdEncoding.EncodeToString(sig)
		}
		return encodeWire(t, w)
	}
	oldKeys := mustKeySet(t, pubOld)
	newKeys := mustKeySet(t, pubNew)
	bothKeys := mustKeySet(t, pubOld, pubNew)
	tests := []struct {
		name string
		env  []byte
		ks   KeySet
		want Reason // "": accepted
	}{
		{"old-by-old-image", oldOnly, oldKeys, ""},
		{"old-by-transition-image", oldOnly, bothKeys, ""},
		{"old-by-new-image", oldOnly, newKeys, ReasonUntrusted},
		{"new-by-old-image", newOnly, oldKeys, ReasonUntrusted},
		{"new-by-transition-image", newOnly, bothKeys, ""},
		{"co-signed-by-old-image", co, oldKeys, ""},
		{"co-signed-by-new-image", co, newKeys, ""},
		{"co-signed-by-transition-image", co, bothKeys, ""},
		{"co-signed-old-broken", corrupt(co, 0), bothKeys, ""},
		{"co-signed-old-broken-old-image", corrupt(co, 0), oldKeys, ReasonBadSignature},
		{"co-signed-new-broken-new-image", corrupt(co, 1), newKeys, ReasonBadSignature},
		{"co-signed-both-broken", corrupt(co, 0, 1), bothKeys, ReasonBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.ks.Verify(tt.env, testNow)
			var ve *VerifyError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Verify() = %v, want success", err)
			case tt.want != "" && (!errors.As(err, &ve) || ve.Reason != tt.want):
				t.Errorf("Verify() = %v, want reason %s", err, tt.want)
			}
		})
	}
}

// TestVerifyByteMutations checks that no single-byte change to a signed
// envelope yields a different release: it is rejected, or it decodes to the
// very release that was signed.
func TestVerifyByteMutations(t *testing.T) {
	t.Parallel()
	pubA, privA := testKey(1)
	pubB, privB := testKey(2)
	ks := mustKeySet(t, pubA, pubB)
	co, err := AddSignature(mustSign(t, testRelease(), privA), privB)
	if err != nil {
		t.Fatal(err)
	}
	want := testRelease()
	check := func(desc string, env []byte) {
		got, err := ks.Verify(env, testNow)
		if err == nil && !cmp.Equal(want, got) {
			t.Errorf("%s: Verify accepted a different release (-want +got):\n%s", desc, cmp.Diff(want, got))
		}
	}
	replacements := []func(b byte) byte{
		func(b byte) byte { return b ^ 0x01 },
		func(b byte) byte { return b ^ 0x20 },
		func(b byte) byte { return b ^ 0x80 },
		func(byte) byte { return 0 },
		func(byte) byte { return ' ' },
		func(byte) byte { return '"' },
		func(byte) byte { return '\\' },
		func(byte) byte { return 'A' },
		func(byte) byte { return '=' },
	}
	env := make([]byte, len(co))
	for i := range co {
		for _, f := range replacements {
			copy(env, co)
			if env[i] = f(co[i]); env[i] == co[i] {
				continue
			}
			check(fmt.Sprintf("byte %d = %q", i, env[i]), env)
		}
		check(fmt.Sprintf("byte %d deleted", i), append(bytes.Clone(co[:i]), co[i+1:]...))
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	_, priv := testKey(9)
	// Inspect takes any signer's word for it; that is the point of UNVERIFIED.
	got, err := Inspect(mustSign(t, testRelease(), priv))
	if err != nil {
		t.Fatalf("Inspect() = %v", err)
	}
	if diff := cmp.Diff(testRelease(), got); diff != "" {
		t.Errorf("Inspect() mismatch (-want +got):\n%s", diff)
	}
	_, err = Inspect([]byte(`{"payloadType":"x","payload":"","signatures":[]}`))
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Reason != ReasonMalformed {
		t.Errorf("Inspect(malformed) = %v, want reason %s", err, ReasonMalformed)
	}
}

func TestVerifyErrorWraps(t *testing.T) {
	t.Parallel()
	inner := errors.New("inner")
	err := error(&VerifyError{Reason: ReasonInvalid, Err: inner})
	if !errors.Is(err, inner) {
		t.Errorf("errors.Is(%v, inner) = false, want true", err)
	}
	if got, want := err.Error(), "verify release: invalid: inner"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// fuzzSeeds returns envelopes worth mutating: valid, co-signed and broken.
func fuzzSeeds(t testing.TB) [][]byte {
	t.Helper()
	_, privA := testKey(1)
	_, privB := testKey(2)
	valid := mustSign(t, testRelease(), privA)
	co, err := AddSignature(valid, privB)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{
		valid,
		co,
		signRaw(t, privA, []byte(`{"schema":1,"type":"nodehotfix-release"}`)),
		signRaw(t, privA, []byte(`{}`)),
		envelopeOf(t, payloadType, payloadOf(t, valid), sigOver(privA, payloadOf(t, valid))),
		[]byte(`{"payloadType":"application/vnd.nodehotfix.release.v1+json","payload":"","signatures":[{"keyid":"0000000000000000","sig":""}]}`),
		[]byte(`{}`),
		[]byte(`null`),
		[]byte(strings.Repeat("[", 10000)),
		nil,
	}
}

func FuzzVerify(f *testing.F) {
	pubA, _ := testKey(1)
	pubB, _ := testKey(2)
	ks := mustKeySet(f, pubA, pubB)
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, env []byte) {
		r, err := ks.Verify(env, testNow)
		var ve *VerifyError
		if err != nil && !errors.As(err, &ve) {
			t.Fatalf("Verify() = %v (%T), want a *VerifyError", err, err)
		}
		if err == nil {
			if err := r.Validate(); err != nil {
				t.Fatalf("Verify accepted an invalid release: %v", err)
			}
			if !testNow.Before(r.NotAfter) {
				t.Fatalf("Verify accepted a release expired at %v", r.NotAfter)
			}
			ir, err := Inspect(env)
			if err != nil {
				t.Fatalf("Inspect rejected what Verify accepted: %v", err)
			}
			if diff := cmp.Diff(r, ir); diff != "" {
				t.Fatalf("Inspect and Verify disagree (-verify +inspect):\n%s", diff)
			}
		}
	})
}

// FuzzSignedPayload reaches the payload decoder, which FuzzVerify cannot
// without forging signatures: it signs whatever payload the fuzzer makes.
func FuzzSignedPayload(f *testing.F) {
	pub, priv := testKey(1)
	ks := mustKeySet(f, pub)
	for _, s := range fuzzSeeds(f) {
		var w wireEnvelope
		if json.Unmarshal(s, &w) == nil {
			if p, err := base64.StdEncoding.DecodeString(w.Payload); err == nil {
				f.Add(p)
			}
		}
	}
	f.Add([]byte(`{"schema":1,"type":"nodehotfix-release","base":"202604.01","version":"202604.01.1","artifacts":{"linux/amd64":{"url":"https://a","sha256":"` +
		strings.Repeat("0", 64) + `","size":1}},"not_after":"2030-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := envelopeOf(t, payloadType, payload, sigOver(priv, pae(payloadType, payload)))
		r, err := ks.Verify(env, testNow)
		if err != nil {
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify() = %v (%T), want a *VerifyError", err, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Verify accepted an invalid release: %v", err)
		}
		if !testNow.Before(r.NotAfter) {
			t.Fatalf("Verify accepted a release expired at %v", r.NotAfter)
		}
		// What verifies can be re-signed, and means the same thing after.
		again, err := ks.Verify(mustSign(t, r, priv), testNow)
		if err != nil {
			t.Fatalf("Verify(Sign(accepted release)) = %v", err)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Fatalf("release changed on re-signing (-first +second):\n%s", diff)
		}
	})
}
