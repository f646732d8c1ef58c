package release

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// decodeWire parses an envelope the lenient way, to reach into it in tests.
func decodeWire(t testing.TB, env []byte) wireEnvelope {
	t.Helper()
	var w wireEnvelope
	if err := json.Unmarshal(env, &w); err != nil {
		t.Fatalf("decode envelope %s: %v", env, err)
	}
	return w
}

func encodeWire(t testing.TB, w wireEnvelope) []byte {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// payloadOf returns the payload bytes of an envelope.
func payloadOf(t testing.TB, env []byte) []byte {
	t.Helper()
	p, err := base64.StdEncoding.DecodeString(decodeWire(t, env).Payload)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSignVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(1)
	want := testRelease()
	env := mustSign(t, want, priv)

	got, err := mustKeySet(t, pub).Verify(env, testNow)
	if err != nil {
		t.Fatalf("Verify(Sign(r)) = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Verify(Sign(r)) mismatch (-want +got):\n%s", diff)
	}
	got, err = Inspect(env)
	if err != nil {
		t.Fatalf("Inspect(Sign(r)) = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inspect(Sign(r)) mismatch (-want +got):\n%s", diff)
	}
}

// TestGolden pins the wire format: an envelope signed today must verify
// with every future build, and Sign must keep producing the same bytes.
func TestGolden(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(1)
	path := filepath.Join("testdata", "release-v1.json")
	env := mustSign(t, testRelease(), priv)
	if *update {
		if err := os.WriteFile(path, append(env, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(golden)), string(env)); diff != "" {
		t.Errorf("Sign() differs from %s (-golden +got):\n%s", path, diff)
	}
	got, err := mustKeySet(t, pub).Verify(golden, testNow)
	if err != nil {
		t.Fatalf("Verify(%s) = %v", path, err)
	}
	if diff := cmp.Diff(testRelease(), got); diff != "" {
		t.Errorf("Verify(%s) mismatch (-want +got):\n%s", path, diff)
	}
}

func TestSignPayload(t *testing.T) {
	t.Parallel()
	_, priv := testKey(1)
	got := string(payloadOf(t, mustSign(t, testRelease(), priv)))
	const want = `{"schema":1,"type":"nodehotfix-release","base":"202604.01","version":"202604.01.3",` +
		`"artifacts":{"linux/amd64":{"url":"https://example.blob.core.windows.net/hotfix/aks-node-controller-linux-amd64?sv=1&sig=x",` +
		`"sha256":"abababababababababababababababababababababababababababababababab","size":12345},` +
		`"linux/arm64":{"url":"https://example.blob.core.windows.net/hotfix/aks-node-controller-linux-arm64",` +
		`"sha256":"0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f","size":23456}},` +
		`"not_after":"2026-06-01T00:00:00Z"}`
	if got != want {
		t.Errorf("payload = %s\nwant %s", got, want)
	}
}

func TestSignNormalizesNotAfter(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(1)
	r := testRelease()
	r.NotAfter = time.Date(2026, 6, 1, 2, 0, 0, 999_999_999, time.FixedZone("CEST", 2*60*60))
	got, err := mustKeySet(t, pub).Verify(mustSign(t, r, priv), testNow)
	if err != nil {
		t.Fatalf("Verify = %v", err)
	}
	want := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	if got.NotAfter != want {
		t.Errorf("NotAfter = %v, want %v", got.NotAfter, want)
	}
}

func TestSignErrors(t *testing.T) {
	t.Parallel()
	_, priv := testKey(1)
	invalid := testRelease()
	invalid.Version = "202605.01.1"
	farFuture := testRelease()
	farFuture.NotAfter = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	huge := testRelease()
	for i := range 200 {
		huge.Artifacts[Platform("linux", "arch"+strings.Repeat("x", i))] = huge.Artifacts["linux/amd64"]
	}
	tests := []struct {
		name string
		r    Release
		priv []byte
	}{
		{"invalid-release", invalid, priv},
		{"year-10000", farFuture, priv},
		{"envelope-too-large", huge, priv},
		{"short-key", testRelease(), priv[:32]},
		{"no-key", testRelease(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if env, err := Sign(tt.r, tt.priv); err == nil {
				t.Errorf("Sign() = %s, want an error", env)
			}
		})
	}
}

func TestPAE(t *testing.T) {
	t.Parallel()
	// The example from the DSSE protocol specification.
	got := string(pae("http://example.com/HelloWorld", []byte("hello world")))
	const want = "DSSEv1 29 http://example.com/HelloWorld 11 hello world"
	if got != want {
		t.Errorf("pae() = %q, want %q", got, want)
	}
}

func TestAddSignature(t *testing.T) {
	t.Parallel()
	pubA, privA := testKey(1)
	pubB, privB := testKey(2)
	env := mustSign(t, testRelease(), privA)

	co, err := AddSignature(env, privB)
	if err != nil {
		t.Fatalf("AddSignature = %v", err)
	}
	w := decodeWire(t, co)
	if got, want := w.Payload, decodeWire(t, env).Payload; got != want {
		t.Errorf("AddSignature changed the payload to %s, want %s", got, want)
	}
	if got, want := []string{w.Signatures[0].KeyID, w.Signatures[1].KeyID}, []string{KeyID(pubA), KeyID(pubB)}; !cmp.Equal(got, want) {
		t.Errorf("signature key IDs = %v, want %v", got, want)
	}
	for _, pub := range [][]byte{pubA, pubB} {
		if _, err := mustKeySet(t, pub).Verify(co, testNow); err != nil {
			t.Errorf("Verify(co-signed) with key %s = %v", KeyID(pub), err)
		}
	}

	if _, err := AddSignature(co, privA); err == nil {
		t.Error("AddSignature(already signed by A, A) = nil error, want an error")
	}
	if _, err := AddSignature(env, privA[:10]); err == nil {
		t.Error("AddSignature(short key) = nil error, want an error")
	}
	if _, err := AddSignature([]byte(`{"payloadType":"x"}`), privB); err == nil {
		t.Error("AddSignature(malformed) = nil error, want an error")
	}

	full := env
	for seed := byte(2); seed < 2+maxSignatures-1; seed++ {
		_, priv := testKey(seed)
		if full, err = AddSignature(full, priv); err != nil {
			t.Fatalf("AddSignature #%d = %v", seed, err)
		}
	}
	_, extra := testKey(100)
	if _, err := AddSignature(full, extra); err == nil {
		t.Errorf("AddSignature(%d signatures) = nil error, want an error", maxSignatures)
	}
	if _, err := mustKeySet(t, pubB).Verify(full, testNow); err != nil {
		t.Errorf("Verify(%d signatures) = %v", maxSignatures, err)
	}
}

// TestLaunchRecords: the declaration is signed only when true, so a release
// without it keeps its bytes; it survives verification; a payload carrying
// false (a second encoding of the same release) is refused.
func TestLaunchRecords(t *testing.T) {
	t.Parallel()
	pub, priv := testKey(1)
	plain := mustSign(t, testRelease(), priv)
	if bytes.Contains(payloadOf(t, plain), []byte("launch_records")) {
		t.Errorf("a release without the declaration signs the key: %s", payloadOf(t, plain))
	}
	want := testRelease()
	want.LaunchRecords = true
	got, err := mustKeySet(t, pub).Verify(mustSign(t, want, priv), testNow)
	if err != nil || !got.LaunchRecords {
		t.Fatalf("Verify(Sign(with launch records)) = %+v, %v; want the declaration", got, err)
	}
	payload := bytes.Replace(payloadOf(t, plain), []byte(`"not_after"`), []byte(`"launch_records":false,"not_after"`), 1)
	sig := signPayload(payloadType, payload, priv)
	env := encodeWire(t, wireEnvelope{PayloadType: payloadType, Payload: base64.StdEncoding.EncodeToString(payload),
		Signatures: []wireSignature{{KeyID: sig.keyID, Sig: base64.StdEncoding.EncodeToString(sig.sig)}}})
	if _, err := mustKeySet(t, pub).Verify(env, testNow); err == nil {
		t.Errorf("a signed launch_records false verified")
	}
}
