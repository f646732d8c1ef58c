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
	"github.com/google/go-cmp/cmp/cmpopts"
)

// testExpires is when the test key-set documents expire: after testNow.
var testExpires = testNow.Add(30 * 24 * time.Hour)

// pubs returns the public keys of the given test seeds.
func pubs(seeds ...byte) []ed25519.PublicKey {
	var out []ed25519.PublicKey
	for _, s := range seeds {
		pub, _ := testKey(s)
		out = append(out, pub)
	}
	return out
}

func privOf(seed byte) ed25519.PrivateKey {
	_, priv := testKey(seed)
	return priv
}

// testDoc is a signed-document content of version v: k of the keys seeds.
func testDoc(v int64, k int, seeds ...byte) KeySetDocument {
	return KeySetDocument{Version: v, Expires: testExpires, Threshold: k, Keys: pubs(seeds...)}
}

// mustSet returns the set of d.
func mustSet(t testing.TB, d KeySetDocument) KeySet {
	t.Helper()
	ks, err := d.KeySet()
	if err != nil {
		t.Fatalf("KeySet(%+v) = %v", d, err)
	}
	return ks
}

// mustSignKeySet signs d with the first seed and co-signs with the rest.
func mustSignKeySet(t testing.TB, d KeySetDocument, seeds ...byte) []byte {
	t.Helper()
	env, err := SignKeySet(d, privOf(seeds[0]))
	if err != nil {
		t.Fatalf("SignKeySet: %v", err)
	}
	return cosign(t, env, seeds[1:]...)
}

func cosign(t testing.TB, env []byte, seeds ...byte) []byte {
	t.Helper()
	for _, s := range seeds {
		var err error
		if env, err = AddSignature(env, privOf(s)); err != nil {
			t.Fatalf("AddSignature(seed %d): %v", s, err)
		}
	}
	return env
}

// wantReason fails unless err is a *VerifyError of reason want ("" for
// success), and returns it.
func wantReason(t *testing.T, what string, err error, want Reason) *VerifyError {
	t.Helper()
	var ve *VerifyError
	switch {
	case want == "" && err != nil:
		t.Errorf("%s = %v, want success", what, err)
	case want == "":
	case !errors.As(err, &ve):
		t.Errorf("%s = %v (%T), want a *VerifyError %s", what, err, err, want)
	case ve.Reason != want:
		t.Errorf("%s = %v, want reason %s", what, err, want)
	}
	return ve
}

func TestVerifyThreshold(t *testing.T) {
	t.Parallel()
	twoOfThree := mustSet(t, testDoc(1, 2, 1, 2, 3))
	signed := func(seeds ...byte) []byte {
		return cosign(t, mustSign(t, testRelease(), privOf(seeds[0])), seeds[1:]...)
	}
	once := signed(1)
	payload := payloadOf(t, once)
	sigA := decodeWire(t, once).Signatures[0]
	sigB := sigOver(privOf(2), pae(payloadType, payload))
	otherPayload := payloadOf(t, mustSign(t, func() Release { r := testRelease(); r.Version = "202604.01.4"; return r }(), privOf(2)))
	broken := sigB
	broken.Sig = sigOver(privOf(2), []byte("other")).Sig
	mislabelled := sigA
	mislabelled.KeyID = sigB.KeyID
	id := func(seed byte) string { return KeyID(pubs(seed)[0]) }

	tests := []struct {
		name    string
		env     []byte
		want    Reason
		signers []string
		missing int
	}{
		{name: "2-of-3-signed-once", env: once, want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		{name: "signed-a-then-b", env: signed(1, 2)},
		{name: "signed-b-then-a", env: signed(2, 1)},
		{name: "signed-c-then-a", env: signed(3, 1)},
		{name: "signed-by-all", env: signed(3, 2, 1)},
		{name: "untrusted-second", env: signed(1, 9), want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		// One key's signature twice counts once (go-tuf #369, #733).
		{name: "same-signature-twice", env: envelopeOf(t, payloadType, payload, sigA, sigA), want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		{name: "same-key-under-other-id", env: envelopeOf(t, payloadType, payload, sigA, mislabelled), want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		// A signature by B over another payload or payload type is no
		// signature of this one.
		{name: "second-over-other-type", env: envelopeOf(t, payloadType, payload, sigA, sigOver(privOf(2), pae(componentPayloadType, payload))), want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		{name: "second-over-other-release", env: envelopeOf(t, payloadType, payload, sigA, sigOver(privOf(2), pae(payloadType, otherPayload))), want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		{name: "second-broken", env: envelopeOf(t, payloadType, payload, broken, sigA), want: ReasonBelowThreshold, signers: []string{id(1)}, missing: 1},
		{name: "all-broken", env: envelopeOf(t, payloadType, payload, broken), want: ReasonBadSignature, missing: 2},
		{name: "untrusted-only", env: signed(8, 9), want: ReasonUntrusted, missing: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := twoOfThree.Verify(tt.env, testNow)
			ve := wantReason(t, "Verify()", err, tt.want)
			if tt.want == "" {
				if diff := cmp.Diff(testRelease(), got); diff != "" {
					t.Errorf("Verify() mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if ve == nil {
				return
			}
			if !cmp.Equal(ve.Signers, tt.signers, cmpopts.EquateEmpty()) || ve.Missing != tt.missing {
				t.Errorf("Verify() signers %v missing %d, want %v and %d", ve.Signers, ve.Missing, tt.signers, tt.missing)
			}
			if tt.want == ReasonBelowThreshold && (!strings.Contains(err.Error(), id(1)) || !strings.Contains(err.Error(), "1 more needed")) {
				t.Errorf("Verify() = %q, want it to name the signer and how many are missing", err)
			}
		})
	}
}

// TestDuplicateKeysNeverMeetAThreshold: one key listed twice, in a file or
// a document, cannot stand for two (go-tuf #733).
func TestDuplicateKeysNeverMeetAThreshold(t *testing.T) {
	t.Parallel()
	file := keyLine(1, "a") + keyLine(1, "b") + directiveThreshold + " 2\n"
	if ks, err := ParseKeySet([]byte(file)); err == nil {
		t.Errorf("ParseKeySet(one key twice, threshold 2) = %v, want an error", ks.KeyIDs())
	}
	d := testDoc(2, 2, 1, 1)
	if _, err := d.KeySet(); err == nil {
		t.Error("KeySet(one key twice, threshold 2) = nil error, want an error")
	}
	if _, err := SignKeySet(d, privOf(1)); err == nil {
		t.Error("SignKeySet(one key twice) = nil error, want an error")
	}
	// A document listing a key twice is refused even under its threshold.
	payload := keySetPayload(t, func(m map[string]any) {
		m["threshold"] = 1
		m["keys"] = []string{keyB64(1), keyB64(1)}
	})
	env := envelopeOf(t, keySetPayloadType, payload, sigOver(privOf(1), pae(keySetPayloadType, payload)))
	_, err := mustSet(t, testDoc(1, 1, 1)).Next(env, testNow)
	wantReason(t, "Next(key listed twice)", err, ReasonInvalid)
}

// TestNonCanonicalKeys: an encoding of a point other than its canonical
// one is refused, so byte-distinct keys are distinct keys.
func TestNonCanonicalKeys(t *testing.T) {
	t.Parallel()
	le := func(y []byte, sign bool) ed25519.PublicKey {
		k := make([]byte, 32)
		copy(k, y)
		if sign {
			k[31] |= 0x80
		}
		return k
	}
	p := append([]byte{0xed}, bytes.Repeat([]byte{0xff}, 30)...)
	p = append(p, 0x7f) // 2^255-19, little-endian
	pPlus1 := bytes.Clone(p)
	pPlus1[0]++
	pMinus1 := bytes.Clone(p)
	pMinus1[0]--
	for name, k := range map[string]ed25519.PublicKey{
		"identity":          le([]byte{1}, false),
		"identity-negative": le([]byte{1}, true),
		"minus-one":         le(pMinus1, false),
		"y-is-p":            le(p, false),
		"y-above-p":         le(pPlus1, true),
	} {
		if _, err := NewKeySet(k); err == nil {
			t.Errorf("NewKeySet(%s) = nil error, want an error", name)
		}
	}
	if _, err := NewKeySet(pubs(1, 2, 3)...); err != nil {
		t.Errorf("NewKeySet(real keys) = %v", err)
	}
}

func TestVerifyComponentThreshold(t *testing.T) {
	t.Parallel()
	ks := mustSet(t, testDoc(1, 2, 1, 2))
	env, err := SignComponent(testComponent(), privOf(1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ks.VerifyComponent(env, testNow)
	wantReason(t, "VerifyComponent(signed once)", err, ReasonBelowThreshold)
	_, err = ks.VerifyComponent(cosign(t, env, 2), testNow)
	wantReason(t, "VerifyComponent(signed twice)", err, "")
}

func TestSigners(t *testing.T) {
	t.Parallel()
	ks := mustSet(t, testDoc(1, 2, 1, 2, 3))
	comp, err := SignComponent(testComponent(), privOf(3))
	if err != nil {
		t.Fatal(err)
	}
	id := func(seed byte) string { return KeyID(pubs(seed)[0]) }
	tests := []struct {
		name string
		env  []byte
		want []string
	}{
		{"release", cosign(t, mustSign(t, testRelease(), privOf(2)), 9, 1), []string{id(1), id(2)}},
		{"component", cosign(t, comp, 1), []string{id(1), id(3)}},
		{"key-set", mustSignKeySet(t, testDoc(2, 1, 4), 3, 4), []string{id(3)}},
		{"nobody", mustSign(t, testRelease(), privOf(9)), nil},
	}
	for _, tt := range tests {
		got, err := ks.Signers(tt.env)
		if err != nil || !cmp.Equal(got, tt.want, cmpopts.EquateEmpty()) {
			t.Errorf("Signers(%s) = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	other := envelopeOf(t, "application/vnd.in-toto+json", []byte("{}"), sigOver(privOf(1), pae("application/vnd.in-toto+json", []byte("{}"))))
	_, err = ks.Signers(other)
	wantReason(t, "Signers(other type)", err, ReasonWrongType)
	_, err = ks.Signers([]byte("{"))
	wantReason(t, "Signers(garbage)", err, ReasonMalformed)
}

func TestAddSignatureEveryType(t *testing.T) {
	t.Parallel()
	comp, err := SignComponent(testComponent(), privOf(1))
	if err != nil {
		t.Fatal(err)
	}
	co := cosign(t, comp, 2)
	if _, err := mustSet(t, testDoc(1, 2, 1, 2)).VerifyComponent(co, testNow); err != nil {
		t.Errorf("VerifyComponent(co-signed) = %v", err)
	}
	// A link needs room for two thresholds of signatures.
	env := mustSignKeySet(t, testDoc(2, 1, 1), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	if _, err := AddSignature(env, privOf(17)); err == nil {
		t.Errorf("AddSignature(%d signatures) = nil error, want an error", maxKeySetSignatures)
	}
	if _, err := AddSignature(env, privOf(5)); err == nil || !strings.Contains(err.Error(), "already signed") {
		t.Errorf("AddSignature(already signed) = %v, want an error saying so", err)
	}
	unknown := envelopeOf(t, "text/plain", []byte("x"), sigOver(privOf(1), []byte("x")))
	if _, err := AddSignature(unknown, privOf(2)); err == nil {
		t.Error("AddSignature(unknown payload type) = nil error, want an error")
	}
	// A key set envelope whose payload does not decode is not co-signed.
	bad := envelopeOf(t, keySetPayloadType, []byte(`{"schema":1,"type":"nodehotfix-keyset"}`), sigOver(privOf(1), []byte("x")))
	if _, err := AddSignature(bad, privOf(2)); err == nil {
		t.Error("AddSignature(undecodable key set) = nil error, want an error")
	}
}

func TestSignKeySetRoundTrip(t *testing.T) {
	t.Parallel()
	d := testDoc(2, 2, 3, 1, 2)
	d.Log = LogPolicy{Key: "nodehotfix.example/log+0123abcd+AQID", Witnesses: []string{"w1+00000001+AQ==", "w2+00000002+Ag=="}, Quorum: 1, Required: true}
	env := mustSignKeySet(t, d, 1)
	got, err := InspectKeySet(env)
	if err != nil {
		t.Fatalf("InspectKeySet = %v", err)
	}
	want := d
	want.Log.MaxCheckpointAge = DefaultMaxCheckpointAge
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("InspectKeySet mismatch (-want +got):\n%s", diff)
	}
	payload := string(payloadOf(t, env))
	const wantPayload = `{"schema":1,"type":"nodehotfix-keyset","version":2,"expires":"2026-05-31T12:00:00Z","threshold":2,"keys":[`
	if !strings.HasPrefix(payload, wantPayload) || !strings.Contains(payload, `"log":{"key":"nodehotfix.example/log+0123abcd+AQID","witnesses":["w1+00000001+AQ==","w2+00000002+Ag=="],"quorum":1,"max_checkpoint_age_seconds":86400,"required":true}}`) {
		t.Errorf("payload = %s", payload)
	}
	// No log policy: no log member.
	if p := string(payloadOf(t, mustSignKeySet(t, testDoc(2, 1, 1), 1))); strings.Contains(p, `"log"`) {
		t.Errorf("payload without a log policy = %s", p)
	}
}

func TestSignKeySetRefuses(t *testing.T) {
	t.Parallel()
	with := func(f func(d *KeySetDocument)) KeySetDocument {
		d := testDoc(2, 1, 1, 2)
		f(&d)
		return d
	}
	tests := map[string]KeySetDocument{
		"version-1":         with(func(d *KeySetDocument) { d.Version = 1 }),
		"version-0":         with(func(d *KeySetDocument) { d.Version = 0 }),
		"version-too-high":  with(func(d *KeySetDocument) { d.Version = MaxKeySetVersion + 1 }),
		"no-expiry":         with(func(d *KeySetDocument) { d.Expires = time.Time{} }),
		"no-keys":           with(func(d *KeySetDocument) { d.Keys = nil }),
		"threshold-0":       with(func(d *KeySetDocument) { d.Threshold = 0 }),
		"threshold-over":    with(func(d *KeySetDocument) { d.Threshold = 3 }),
		"short-key":         with(func(d *KeySetDocument) { d.Keys[0] = d.Keys[0][:31] }),
		"17-keys":           testDoc(2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17),
		"threshold-9":       testDoc(2, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
		"log-without-key":   with(func(d *KeySetDocument) { d.Log.Required = true }),
		"witness-no-key":    with(func(d *KeySetDocument) { d.Log.Witnesses = []string{"w+1+AQ=="} }),
		"log-key-spaces":    with(func(d *KeySetDocument) { d.Log.Key = "a b" }),
		"log-key-non-ascii": with(func(d *KeySetDocument) { d.Log.Key = "café+1+AQ==" }),
		"log-key-too-long":  with(func(d *KeySetDocument) { d.Log.Key = strings.Repeat("k", 513) }),
		"witness-twice": with(func(d *KeySetDocument) {
			d.Log = LogPolicy{Key: "l+1+AQ==", Witnesses: []string{"w+1+AQ==", "w+1+AQ=="}}
		}),
		"witness-is-log-key": with(func(d *KeySetDocument) { d.Log = LogPolicy{Key: "l+1+AQ==", Witnesses: []string{"l+1+AQ=="}} }),
		"quorum-over": with(func(d *KeySetDocument) {
			d.Log = LogPolicy{Key: "l+1+AQ==", Witnesses: []string{"w+1+AQ=="}, Quorum: 2}
		}),
		"age-fraction": with(func(d *KeySetDocument) { d.Log = LogPolicy{Key: "l+1+AQ==", MaxCheckpointAge: 1500 * time.Millisecond} }),
		"age-negative": with(func(d *KeySetDocument) { d.Log = LogPolicy{Key: "l+1+AQ==", MaxCheckpointAge: -time.Hour} }),
	}
	for name, d := range tests {
		if env, err := SignKeySet(d, privOf(1)); err == nil {
			t.Errorf("SignKeySet(%s) = %s, want an error", name, env)
		}
	}
	if _, err := SignKeySet(testDoc(2, 1, 1), privOf(1)[:5]); err == nil {
		t.Error("SignKeySet(short private key) = nil error, want an error")
	}
}

// keySetPayload returns a valid version-2 payload (keys 1 and 2, threshold
// 1) as generic JSON after f edits it.
func keySetPayload(t testing.TB, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(payloadOf(t, mustSignKeySet(t, testDoc(2, 1, 1, 2), 1)), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signedKeySet signs payload with each seed, as SignKeySet would have.
func signedKeySet(t testing.TB, payload []byte, seeds ...byte) []byte {
	t.Helper()
	var sigs []wireSignature
	for _, s := range seeds {
		sigs = append(sigs, sigOver(privOf(s), pae(keySetPayloadType, payload)))
	}
	return envelopeOf(t, keySetPayloadType, payload, sigs...)
}

func TestNextRejects(t *testing.T) {
	t.Parallel()
	v1 := mustSet(t, testDoc(1, 1, 1)) // baked: key 1
	v1of2 := mustSet(t, testDoc(1, 2, 1, 2, 3))
	good := mustSignKeySet(t, testDoc(2, 1, 1, 2), 1)
	goodPayload := payloadOf(t, good)
	logged := func(log map[string]any) []byte {
		return signedKeySet(t, keySetPayload(t, func(m map[string]any) { m["log"] = log }), 1)
	}
	okLog := func() map[string]any {
		return map[string]any{"key": "l+1+AQ==", "witnesses": []string{}, "quorum": 0, "max_checkpoint_age_seconds": 3600, "required": false}
	}
	edit := func(f func(m map[string]any)) []byte { return signedKeySet(t, keySetPayload(t, f), 1) }
	logEdit := func(f func(l map[string]any)) []byte { l := okLog(); f(l); return logged(l) }

	tests := []struct {
		name string
		ks   KeySet
		env  []byte
		at   time.Time
		want Reason
	}{
		// Signatures: the old set's threshold AND the new set's.
		{name: "only-old-keys", ks: v1, env: mustSignKeySet(t, testDoc(2, 1, 4), 1), want: ReasonUntrusted},
		{name: "only-new-keys", ks: v1, env: mustSignKeySet(t, testDoc(2, 1, 4), 4), want: ReasonUntrusted},
		{name: "old-below-threshold", ks: v1of2, env: mustSignKeySet(t, testDoc(2, 1, 4), 1, 4), want: ReasonBelowThreshold},
		{name: "new-below-threshold", ks: v1, env: mustSignKeySet(t, testDoc(2, 2, 4, 5), 1, 4), want: ReasonBelowThreshold},
		{name: "same-sig-twice-for-new-threshold", ks: v1, env: envelopeOf(t, keySetPayloadType, payloadOf(t, mustSignKeySet(t, testDoc(2, 2, 1, 4), 1)),
			decodeWire(t, mustSignKeySet(t, testDoc(2, 2, 1, 4), 1)).Signatures[0], decodeWire(t, mustSignKeySet(t, testDoc(2, 2, 1, 4), 1)).Signatures[0]), want: ReasonBelowThreshold},
		{name: "signature-over-release-type", ks: v1, env: envelopeOf(t, keySetPayloadType, goodPayload, sigOver(privOf(1), pae(payloadType, goodPayload))), want: ReasonBadSignature},
		{name: "release-envelope", ks: v1, env: mustSign(t, testRelease(), privOf(1)), want: ReasonWrongType},
		{name: "release-payload-as-key-set", ks: v1, env: signedKeySet(t, payloadOf(t, mustSign(t, testRelease(), privOf(1))), 1), want: ReasonWrongType},
		// Versions.
		{name: "skips-a-version", ks: v1, env: mustSignKeySet(t, testDoc(3, 1, 1), 1), want: ReasonVersionGap},
		{name: "repeats-the-version", ks: mustSet(t, testDoc(2, 1, 1)), env: mustSignKeySet(t, testDoc(2, 1, 1), 1), want: ReasonRollback},
		{name: "goes-down", ks: mustSet(t, testDoc(3, 1, 1)), env: mustSignKeySet(t, testDoc(2, 1, 1), 1), want: ReasonRollback},
		{name: "version-1-document", ks: v1, env: edit(func(m map[string]any) { m["version"] = 1 }), want: ReasonInvalid},
		// Expiry.
		{name: "expired", ks: v1, env: good, at: testExpires, want: ReasonExpired},
		// Strict decoding.
		{name: "unknown-member", ks: v1, env: edit(func(m map[string]any) { m["root"] = true }), want: ReasonMalformed},
		{name: "missing-threshold", ks: v1, env: edit(func(m map[string]any) { delete(m, "threshold") }), want: ReasonMalformed},
		{name: "duplicate-member", ks: v1, env: signedKeySet(t, replaceOnce(t, goodPayload, `"threshold":1`, `"threshold":1,"threshold":2`), 1), want: ReasonMalformed},
		{name: "trailing-data", ks: v1, env: signedKeySet(t, append(bytes.Clone(goodPayload), " {}"...), 1), want: ReasonMalformed},
		{name: "version-string", ks: v1, env: edit(func(m map[string]any) { m["version"] = "2" }), want: ReasonMalformed},
		{name: "version-float", ks: v1, env: signedKeySet(t, replaceOnce(t, goodPayload, `"version":2`, `"version":2.0`), 1), want: ReasonMalformed},
		{name: "threshold-null", ks: v1, env: edit(func(m map[string]any) { m["threshold"] = nil }), want: ReasonMalformed},
		{name: "expires-offset", ks: v1, env: edit(func(m map[string]any) { m["expires"] = "2026-06-01T02:00:00+02:00" }), want: ReasonMalformed},
		{name: "short-key", ks: v1, env: edit(func(m map[string]any) { m["keys"] = []string{base64.StdEncoding.EncodeToString(make([]byte, 31))} }), want: ReasonMalformed},
		{name: "unpadded-key", ks: v1, env: edit(func(m map[string]any) { m["keys"] = []string{strings.TrimRight(keyB64(1), "=")} }), want: ReasonMalformed},
		{name: "no-keys", ks: v1, env: edit(func(m map[string]any) { m["keys"] = []string{} }), want: ReasonInvalid},
		{name: "threshold-over-keys", ks: v1, env: edit(func(m map[string]any) { m["threshold"] = 3 }), want: ReasonInvalid},
		{name: "threshold-zero", ks: v1, env: edit(func(m map[string]any) { m["threshold"] = 0 }), want: ReasonInvalid},
		{name: "schema-2", ks: v1, env: edit(func(m map[string]any) { m["schema"] = 2 }), want: ReasonWrongType},
		{name: "log-null", ks: v1, env: edit(func(m map[string]any) { m["log"] = nil }), want: ReasonMalformed},
		{name: "log-missing-member", ks: v1, env: logEdit(func(l map[string]any) { delete(l, "required") }), want: ReasonMalformed},
		{name: "log-extra-member", ks: v1, env: logEdit(func(l map[string]any) { l["origin"] = "x" }), want: ReasonMalformed},
		{name: "log-age-zero", ks: v1, env: logEdit(func(l map[string]any) { l["max_checkpoint_age_seconds"] = 0 }), want: ReasonMalformed},
		{name: "log-empty-key", ks: v1, env: logEdit(func(l map[string]any) { l["key"] = "" }), want: ReasonMalformed},
		{name: "log-quorum-over", ks: v1, env: logEdit(func(l map[string]any) { l["quorum"] = 1 }), want: ReasonInvalid},
		{name: "oversized", ks: v1, env: append(bytes.Clone(good), bytes.Repeat([]byte(" "), MaxKeySetEnvelopeSize)...), want: ReasonMalformed},
		{name: "garbage", ks: v1, env: []byte("[]"), want: ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			at := tt.at
			if at.IsZero() {
				at = testNow
			}
			got, err := tt.ks.Next(tt.env, at)
			wantReason(t, "Next()", err, tt.want)
			if err != nil && got.keys != nil {
				t.Errorf("Next() returned a key set with its error")
			}
			if err != nil && !strings.HasPrefix(err.Error(), "verify key set: ") {
				t.Errorf("Next() = %q, want it to say it is a key set", err)
			}
		})
	}
	_, err := v1.Next(good, time.Time{})
	wantReason(t, "Next(zero time)", err, ReasonExpired)
	// The accepted form of an edited payload, so the cases above fail for
	// their edit, not for the way they were built.
	if _, err := v1.Next(logged(okLog()), testNow); err != nil {
		t.Errorf("Next(edited payload with a valid log) = %v", err)
	}
}

func TestNextAccepts(t *testing.T) {
	t.Parallel()
	v1 := mustSet(t, testDoc(1, 2, 1, 2, 3))
	// 2 of {1,2,3} and 2 of {3,4,5}: key 3 counts for both.
	d := testDoc(2, 2, 3, 4, 5)
	d.Log = LogPolicy{Key: "l+1+AQ==", Witnesses: []string{"w+1+AQ=="}, Quorum: 1, MaxCheckpointAge: time.Hour, Required: true}
	for _, order := range [][]byte{{1, 3, 4}, {4, 3, 1}, {3, 2, 5}, {1, 2, 4, 5}} {
		got, err := v1.Next(mustSignKeySet(t, d, order...), testNow)
		if err != nil {
			t.Errorf("Next(signed by %v) = %v", order, err)
			continue
		}
		if got.Version() != 2 || got.Threshold() != 2 || !got.Expires().Equal(testExpires) || !cmp.Equal(got.KeyIDs(), keyIDs(pubs(3, 4, 5))) {
			t.Errorf("Next(signed by %v) = version %d threshold %d expires %v keys %v", order, got.Version(), got.Threshold(), got.Expires(), got.KeyIDs())
		}
		if diff := cmp.Diff(d.Log, got.Log()); diff != "" {
			t.Errorf("Next() log policy mismatch (-want +got):\n%s", diff)
		}
	}
	_, err := v1.Next(mustSignKeySet(t, d, 1, 3), testNow)
	if ve := wantReason(t, "Next(one new key)", err, ReasonBelowThreshold); ve != nil && !strings.Contains(err.Error(), "own keys of version 2") {
		t.Errorf("Next(one new key) = %q, want it to say the new keys are missing", err)
	}
	_, err = v1.Next(mustSignKeySet(t, d, 3, 4), testNow)
	if ve := wantReason(t, "Next(one old key)", err, ReasonBelowThreshold); ve != nil && !strings.Contains(err.Error(), "keys of version 1 required") {
		t.Errorf("Next(one old key) = %q, want it to say the old keys are missing", err)
	}
}

// chain returns n links from testDoc(1, 1, 1): version v+1 has key v+1
// only and is signed by keys v and v+1; link i expires at expires(i).
func chain(t testing.TB, n int, expires func(i int) time.Time) [][]byte {
	t.Helper()
	var links [][]byte
	for i := range n {
		v := int64(i + 2)
		d := testDoc(v, 1, byte(v))
		d.Expires = expires(i)
		links = append(links, mustSignKeySet(t, d, byte(v-1), byte(v)))
	}
	return links
}

func TestWalk(t *testing.T) {
	t.Parallel()
	root := mustSet(t, testDoc(1, 1, 1))
	later := func(int) time.Time { return testExpires }
	long := chain(t, MaxChain+1, later)
	past := testNow.Add(-time.Hour)

	got, err := root.Walk(long[:MaxChain], testNow)
	if err != nil || got.Version() != MaxChain+1 || !cmp.Equal(got.KeyIDs(), keyIDs(pubs(MaxChain+1))) {
		t.Fatalf("Walk(%d links) = version %d keys %v, %v", MaxChain, got.Version(), got.KeyIDs(), err)
	}
	if got, err := root.Walk(nil, testNow); err != nil || got.Version() != 1 {
		t.Errorf("Walk(no links) = version %d, %v; want the root", got.Version(), err)
	}
	// Expired intermediate links are fine; the newest must not be expired.
	mid := chain(t, 3, func(i int) time.Time { return map[bool]time.Time{true: past, false: testExpires}[i < 2] })
	if got, err := root.Walk(mid, testNow); err != nil || got.Version() != 4 {
		t.Errorf("Walk(expired intermediate links) = version %d, %v; want version 4", got.Version(), err)
	}
	// The newest link is judged against the version before, from a later
	// root too.
	if got, err := mustSet(t, testDoc(3, 1, 3)).Walk(mid[2:], testNow); err != nil || got.Version() != 4 {
		t.Errorf("Walk(from version 3) = version %d, %v", got.Version(), err)
	}

	tests := []struct {
		name     string
		links    [][]byte
		zeroTime bool
		want     Reason
		link     int
		version  int64
	}{
		{name: "17-links", links: long, want: ReasonChainTooLong, link: MaxChain},
		{name: "expired-final", links: chain(t, 3, func(i int) time.Time { return map[bool]time.Time{true: past, false: testExpires}[i == 2] }), want: ReasonExpired, link: 2, version: 4},
		{name: "zero-time", links: long[:2], zeroTime: true, want: ReasonExpired, link: 1, version: 3},
		{name: "repeated-link", links: [][]byte{long[0], long[1], long[1]}, want: ReasonRollback, link: 2, version: 3},
		{name: "skipped-version", links: [][]byte{long[0], mustSignKeySet(t, testDoc(4, 1, 2), 2)}, want: ReasonVersionGap, link: 1, version: 4},
		{name: "skipped-link", links: [][]byte{long[0], long[2]}, want: ReasonUntrusted, link: 1, version: 4},
		{name: "out-of-order", links: [][]byte{long[1], long[0]}, want: ReasonUntrusted, link: 0, version: 3},
		{name: "garbage-link", links: [][]byte{long[0], []byte("{}")}, want: ReasonMalformed, link: 1},
		{name: "release-as-link", links: [][]byte{mustSign(t, testRelease(), privOf(1))}, want: ReasonWrongType, link: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			at := testNow
			if tt.zeroTime {
				at = time.Time{}
			}
			got, err := root.Walk(tt.links, at)
			var ce *ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("Walk() = version %d, %v (%T); want a *ChainError", got.Version(), err, err)
			}
			if ce.Reason != tt.want || ce.Link != tt.link || ce.Version != tt.version {
				t.Errorf("Walk() = link %d version %d reason %s (%v); want link %d version %d reason %s", ce.Link, ce.Version, ce.Reason, err, tt.link, tt.version, tt.want)
			}
			wantReason(t, "Walk()", err, tt.want)
			if want := fmt.Sprintf("link %d (version %d", tt.link, tt.version); !strings.Contains(err.Error(), want) {
				t.Errorf("Walk() = %q, want it to contain %q", err, want)
			}
			if got.keys != nil {
				t.Error("Walk() returned a key set with its error")
			}
		})
	}
}

// TestDocumentRotation builds the next version from the current set, as
// lpsctl keys rotate does.
func TestDocumentRotation(t *testing.T) {
	t.Parallel()
	cur := mustSet(t, testDoc(1, 2, 1, 2, 3))
	d := cur.Document()
	d.Version++
	d.Keys = append(d.Keys[1:], pubs(4)...) // remove 1, add 4
	d.Expires = testExpires
	next, err := cur.Next(mustSignKeySet(t, d, 2, 3), testNow)
	if err != nil {
		t.Fatalf("Next(rotation from Document) = %v", err)
	}
	if !cmp.Equal(next.KeyIDs(), keyIDs(pubs(2, 3, 4))) || next.Threshold() != 2 {
		t.Errorf("rotated set = keys %v threshold %d", next.KeyIDs(), next.Threshold())
	}
	// Document shares nothing with the set.
	d.Keys[0][0] ^= 0xff
	if !cmp.Equal(cur.KeyIDs(), keyIDs(pubs(1, 2, 3))) {
		t.Error("editing Document() changed the key set")
	}
}

func FuzzSignedKeySet(f *testing.F) {
	f.Add(payloadOf(f, mustSignKeySet(f, testDoc(2, 1, 1, 2), 1)))
	d := testDoc(2, 1, 1)
	d.Log = LogPolicy{Key: "l+1+AQ==", Witnesses: []string{"w+1+AQ=="}, Quorum: 1}
	f.Add(payloadOf(f, mustSignKeySet(f, d, 1)))
	f.Add([]byte(`{"schema":1,"type":"nodehotfix-keyset","version":2,"expires":"2030-01-01T00:00:00Z","threshold":1,"keys":[]}`))
	root := mustSet(f, testDoc(1, 1, 1))
	f.Fuzz(func(t *testing.T, payload []byte) {
		next, err := root.Next(signedKeySet(t, payload, 1), testNow)
		if err != nil {
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Next() = %v (%T), want a *VerifyError", err, err)
			}
			return
		}
		if next.Version() != 2 || next.Threshold() > len(next.keys) || !testNow.Before(next.Expires()) {
			t.Fatalf("Next accepted version %d threshold %d of %d keys expiring %v", next.Version(), next.Threshold(), len(next.keys), next.Expires())
		}
		// What verifies can be re-signed and means the same after.
		again, err := InspectKeySet(mustSignKeySet(t, next.Document(), 1))
		if err != nil {
			t.Fatalf("InspectKeySet(SignKeySet(accepted)) = %v", err)
		}
		if diff := cmp.Diff(next.Document(), again); diff != "" {
			t.Fatalf("document changed on re-signing (-first +second):\n%s", diff)
		}
	})
}

// BenchmarkNext is one link's check: "disjoint" needs 2 signatures of
// the old keys and 2 of the new, "shared" is signed by 2 keys both sets
// hold, each verified once.
func BenchmarkNext(b *testing.B) {
	v1 := mustSet(b, testDoc(1, 2, 1, 2, 3))
	for _, bc := range []struct {
		name    string
		keys    []byte
		signers []byte
	}{
		{"disjoint", []byte{4, 5, 6}, []byte{1, 2, 4, 5}},
		{"shared", []byte{2, 3, 4}, []byte{2, 3}},
	} {
		link := mustSignKeySet(b, testDoc(2, 2, bc.keys...), bc.signers...)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := v1.Next(link, testNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
