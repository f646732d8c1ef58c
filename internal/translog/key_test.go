package translog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if got := f.logV.Name(); got != testOrigin {
		t.Errorf("log key name = %q, want %q", got, testOrigin)
	}
	if !strings.HasPrefix(f.logVKey, testOrigin+"+") {
		t.Errorf("log vkey %q does not start with the name", f.logVKey)
	}
	c := f.cosigner(t, 0, testNow)
	if got, want := c.Verifier().String(), f.witV[0].String(); got != want {
		t.Errorf("cosigner's vkey %q, parsed vkey %q", got, want)
	}
	// The key hash as C2SP tlog-cosignature defines it, computed apart.
	v := f.witV[0]
	sum := sha256.Sum256(append(append([]byte(v.Name()+"\n"), 0x04), v.PublicKey()...))
	if got, want := v.KeyHash(), binary.BigEndian.Uint32(sum[:4]); got != want {
		t.Errorf("KeyHash = %08x, want %08x", got, want)
	}
	// A renamed skey keeps a key hash that no longer matches.
	if _, err := NewCosigner(strings.Replace(f.witSKey[0], "witness0.example", "alias.example", 1), nil); err == nil {
		t.Error("NewCosigner accepted a renamed skey")
	}
}

// TestCosignatureFormat checks the signature bytes against the spec by
// hand: 8-byte big-endian seconds, then Ed25519 over
// "cosignature/v1\ntime <t>\n" + checkpoint text.
func TestCosignatureFormat(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	at := time.Unix(1679315147, 0)
	c := f.cosigner(t, 0, at)
	text := []byte("example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
	sig, err := c.Sign(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig) != 72 || binary.BigEndian.Uint64(sig) != 1679315147 {
		t.Fatalf("signature is %d bytes starting %x", len(sig), sig[:8])
	}
	msg := "cosignature/v1\ntime 1679315147\n" + string(text)
	if !ed25519.Verify(f.witV[0].PublicKey(), []byte(msg), sig[8:]) {
		t.Error("signature does not verify over the spec's message")
	}
	if !f.witV[0].Verify(text, sig) {
		t.Error("Verify rejects the cosignature")
	}
	bad := append([]byte{}, sig...)
	bad[7]++ // another time
	if f.witV[0].Verify(text, bad) {
		t.Error("Verify accepts a cosignature with its time changed")
	}
	huge := append([]byte{}, sig...)
	binary.BigEndian.PutUint64(huge, 1<<63)
	if f.witV[0].Verify(text, huge) {
		t.Error("Verify accepts a time above 2^63-1")
	}
	if _, err := c.Sign([]byte("not a checkpoint\n")); err == nil {
		t.Error("Cosigner signed text that is not a checkpoint")
	}
	if _, err := f.cosigner(t, 0, time.Unix(-1, 0)).Sign(text); err == nil {
		t.Error("Cosigner signed with a time before the epoch")
	}
}

func TestParseKeyRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w := f.witV[0].String()
	name, rest, _ := strings.Cut(w, "+")
	hash, key, _ := strings.Cut(rest, "+")
	raw, _ := base64.StdEncoding.DecodeString(key)
	h, _ := strconv.ParseUint(hash, 16, 32)
	tests := []struct{ name, vkey string }{
		{"log-key", f.logVKey},
		{"empty", ""},
		{"two-parts", name + "+" + hash},
		{"space-in-name", "a b+" + hash + "+" + key},
		{"empty-name", "+" + hash + "+" + key},
		{"uppercase-hash", name + "+" + strings.ToUpper(hash) + "+" + key},
		{"short-hash", name + "+" + hash[1:] + "+" + key},
		{"wrong-hash", name + "+" + strconv.FormatUint(h^1, 16) + "+" + key},
		{"bad-base64", name + "+" + hash + "+" + key[1:]},
		{"short-key", name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(raw[:32])},
		{"too-long", name + strings.Repeat("x", 600) + "+" + hash + "+" + key},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWitnessKey(tt.vkey)
			wantReason(t, "ParseWitnessKey", err, ReasonMalformed)
		})
	}
	_, err := ParseLogKey(w)
	wantReason(t, "ParseLogKey(witness key)", err, ReasonMalformed)
	if _, err := NewCosigner(f.logVKey, nil); err == nil {
		t.Error("NewCosigner accepted a vkey")
	}
	if _, _, err := GenerateWitnessKey("has space"); err == nil {
		t.Error("GenerateWitnessKey accepted a name with a space")
	}
	if _, _, err := GenerateLogKey("a+b"); err == nil {
		t.Error("GenerateLogKey accepted a name with a plus")
	}
}

// TestLogVerifierOf: the verifier derived from the log's skey is the
// vkey GenerateLogKey gave, and verifies what the skey signs; a witness
// skey, a renamed one and text that is no skey are refused.
func TestLogVerifierOf(t *testing.T) {
	t.Parallel()
	skey, vkey, err := GenerateLogKey("restore.example/log")
	if err != nil {
		t.Fatal(err)
	}
	v, err := LogVerifierOf(" " + skey + "\n")
	if err != nil {
		t.Fatalf("LogVerifierOf = %v", err)
	}
	want, err := ParseLogKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name() != want.Name() || v.KeyHash() != want.KeyHash() || !v.PublicKey().Equal(want.PublicKey()) {
		t.Errorf("LogVerifierOf = %s+%08x, want the vkey %s", v.Name(), v.KeyHash(), vkey)
	}
	signer, err := NewLogSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := Checkpoint{Origin: "restore.example/log", Size: 1}.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(signed, Policy{Log: v}, testNow); err != nil {
		t.Errorf("a checkpoint the skey signed does not open with its derived verifier: %v", err)
	}
	witSKey, _, err := GenerateWitnessKey("witness.example")
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"witness skey": witSKey,
		"renamed":      strings.Replace(skey, "restore.example/log", "other.example/log", 1),
		"vkey":         vkey,
		"empty":        "",
		"too long":     "PRIVATE+KEY+" + strings.Repeat("a", 600),
	} {
		if _, err := LogVerifierOf(bad); err == nil {
			t.Errorf("LogVerifierOf(%s) accepted it", name)
		}
	}
}
