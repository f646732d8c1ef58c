package release

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// keyLine returns the public key line of testKey(seed).
func keyLine(seed byte, comment string) string {
	pub, _ := testKey(seed)
	return string(MarshalPublicKey(pub, comment))
}

func keyB64(seed byte) string {
	pub, _ := testKey(seed)
	return base64.StdEncoding.EncodeToString(pub)
}

func TestParseKeySet(t *testing.T) {
	t.Parallel()
	pub1, _ := testKey(1)
	pub2, _ := testKey(2)
	id1, id2 := KeyID(pub1), KeyID(pub2)
	short := base64.StdEncoding.EncodeToString(make([]byte, 31))
	unpadded := strings.TrimRight(keyB64(1), "=")
	// The last base64 digit before "=" carries 2 unused bits; setting them
	// makes an encoding only lenient decoders accept.
	b := []byte(keyB64(1))
	b[len(b)-2] = nonStrictDigit(b[len(b)-2])
	loose := string(b)

	tests := []struct {
		name    string
		in      string
		wantIDs []string
		errLine int // > 0: the error must name this line
		wantErr bool
	}{
		{name: "one", in: keyLine(1, ""), wantIDs: []string{id1}},
		{name: "comment-with-spaces", in: keyLine(1, "release key 2026 (offline, hsm-1)"), wantIDs: []string{id1}},
		{name: "no-final-newline", in: strings.TrimSuffix(keyLine(1, "x"), "\n"), wantIDs: []string{id1}},
		{
			name:    "comments-blanks-tabs",
			in:      "# release keys\n\n   \n\t# indented comment\n" + keyAlgorithm + "\t" + keyB64(2) + "\tnew\n  " + keyLine(1, "old"),
			wantIDs: []string{id2, id1},
		},
		{name: "duplicates", in: keyLine(1, "a") + keyLine(2, "") + keyLine(1, "b"), wantIDs: []string{id1, id2}},
		{name: "empty", in: "", wantErr: true},
		{name: "only-comments", in: "# nothing\n\n", wantErr: true},
		{name: "unknown-type", in: keyLine(1, "") + "ssh-ed25519 " + keyB64(2) + " me@host\n", errLine: 2},
		{name: "type-prefix", in: "nodehotfix-release-ed25519x " + keyB64(1) + "\n", errLine: 1},
		{name: "missing-key", in: "# k\n" + keyAlgorithm + "\n", errLine: 2},
		{name: "missing-key-trailing-space", in: keyAlgorithm + " \n", errLine: 1},
		{name: "bad-base64", in: keyAlgorithm + " !!!!\n", errLine: 1},
		{name: "unpadded-base64", in: keyAlgorithm + " " + unpadded + "\n", errLine: 1},
		{name: "non-strict-base64", in: keyAlgorithm + " " + loose + "\n", errLine: 1},
		{name: "short-key", in: "\n\n" + keyAlgorithm + " " + short + "\n", errLine: 3},
		{name: "crlf", in: strings.ReplaceAll(keyLine(1, ""), "\n", "\r\n"), errLine: 1},
		{name: "nul", in: keyLine(1, "") + keyAlgorithm + " " + keyB64(2) + " a\x00b\n", errLine: 2},
		{name: "invalid-utf8", in: keyAlgorithm + " " + keyB64(1) + " caf\xe9\n", errLine: 1},
		{name: "bom", in: "\ufeff" + keyLine(1, ""), errLine: 1},
		{name: "oversized", in: keyLine(1, "") + strings.Repeat("#", MaxKeySetSize), wantErr: true},
		{
			name:    "at-limit",
			in:      keyLine(1, "") + "#" + strings.Repeat("x", MaxKeySetSize-len(keyLine(1, ""))-1),
			wantIDs: []string{id1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ks, err := ParseKeySet([]byte(tt.in))
			if tt.wantErr || tt.errLine > 0 {
				if err == nil {
					t.Fatalf("ParseKeySet() = %v, want an error", ks.KeyIDs())
				}
				// The line number is part of the contract: it is all an
				// operator needs to fix the file.
				if want := fmt.Sprintf("line %d:", tt.errLine); tt.errLine > 0 && !strings.Contains(err.Error(), want) {
					t.Errorf("ParseKeySet() = %v, want it to name %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKeySet() = %v", err)
			}
			if diff := cmp.Diff(tt.wantIDs, ks.KeyIDs()); diff != "" {
				t.Errorf("ParseKeySet() key IDs mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseKeySetDirectives(t *testing.T) {
	t.Parallel()
	keys := keyLine(1, "a") + keyLine(2, "b") + keyLine(3, "c")
	const vkey = "nodehotfix.example/log+0123abcd+AQID"
	type want struct {
		version   int64
		threshold int
		log       LogPolicy
	}
	tests := []struct {
		name    string
		in      string
		want    want
		errLine int // > 0: must fail naming this line; -1: must fail
	}{
		{name: "plain", in: keys, want: want{1, 1, LogPolicy{}}},
		{name: "version-threshold", in: directiveVersion + " 3\n" + directiveThreshold + "\t2\n" + keys, want: want{3, 2, LogPolicy{}}},
		{name: "directives-after-keys", in: keys + "  " + directiveThreshold + " 3  \n", want: want{1, 3, LogPolicy{}}},
		{
			name: "log-default-age",
			in:   keys + directiveLogKey + " " + vkey + "\n",
			want: want{1, 1, LogPolicy{Key: vkey, MaxCheckpointAge: DefaultMaxCheckpointAge}},
		},
		{
			name: "full-log",
			in: keys + directiveLogKey + " " + vkey + "\n" + directiveWitness + " w1+1+AQ==\n" + directiveWitness + " w2+2+Ag==\n" +
				directiveQuorum + " 2\n" + directiveMaxAge + " 1d12h\n" + directiveRequireLog + "\n",
			want: want{1, 1, LogPolicy{Key: vkey, Witnesses: []string{"w1+1+AQ==", "w2+2+Ag=="}, Quorum: 2, MaxCheckpointAge: 36 * time.Hour, Required: true}},
		},
		{name: "threshold-over-keys", in: keys + directiveThreshold + " 4\n", errLine: -1},
		{name: "threshold-over-distinct-keys", in: keyLine(1, "") + keyLine(1, "again") + directiveThreshold + " 2\n", errLine: -1},
		{name: "threshold-0", in: keys + directiveThreshold + " 0\n", errLine: -1},
		{name: "threshold-9", in: keys + directiveThreshold + " 9\n", errLine: 4},
		{name: "version-0", in: directiveVersion + " 0\n" + keys, errLine: -1},
		{name: "version-plus", in: directiveVersion + " +2\n" + keys, errLine: 1},
		{name: "version-leading-zero", in: directiveVersion + " 02\n" + keys, errLine: 1},
		{name: "version-float", in: directiveVersion + " 2.0\n" + keys, errLine: 1},
		{name: "version-negative", in: directiveVersion + " -1\n" + keys, errLine: 1},
		{name: "version-huge", in: directiveVersion + " 99999999999999999999\n" + keys, errLine: 1},
		{name: "version-missing", in: directiveVersion + "\n" + keys, errLine: 1},
		{name: "version-two-args", in: directiveVersion + " 2 3\n" + keys, errLine: 1},
		{name: "version-comment", in: directiveVersion + " 2 # second\n" + keys, errLine: 1},
		{name: "version-twice", in: directiveVersion + " 2\n" + keys + directiveVersion + " 2\n", errLine: 5},
		{name: "threshold-twice", in: directiveThreshold + " 1\n" + directiveThreshold + " 2\n" + keys, errLine: 2},
		{name: "log-key-twice", in: keys + directiveLogKey + " " + vkey + "\n" + directiveLogKey + " " + vkey + "\n", errLine: 5},
		{name: "quorum-twice", in: keys + directiveLogKey + " " + vkey + "\n" + directiveWitness + " w+1+AQ==\n" + directiveQuorum + " 1\n" + directiveQuorum + " 1\n", errLine: 7},
		{name: "age-twice", in: keys + directiveLogKey + " " + vkey + "\n" + directiveMaxAge + " 1h\n" + directiveMaxAge + " 2h\n", errLine: 6},
		{name: "require-log-twice", in: keys + directiveLogKey + " " + vkey + "\n" + directiveRequireLog + "\n" + directiveRequireLog + "\n", errLine: 6},
		{name: "witness-twice", in: keys + directiveLogKey + " " + vkey + "\n" + directiveWitness + " w+1+AQ==\n" + directiveWitness + " w+1+AQ==\n", errLine: 6},
		{name: "witness-is-log-key", in: keys + directiveLogKey + " " + vkey + "\n" + directiveWitness + " " + vkey + "\n", errLine: -1},
		{name: "witness-without-log-key", in: keys + directiveWitness + " w+1+AQ==\n", errLine: -1},
		{name: "require-log-without-log-key", in: keys + directiveRequireLog + "\n", errLine: -1},
		{name: "require-log-argument", in: keys + directiveLogKey + " " + vkey + "\n" + directiveRequireLog + " yes\n", errLine: 5},
		{name: "quorum-over-witnesses", in: keys + directiveLogKey + " " + vkey + "\n" + directiveWitness + " w+1+AQ==\n" + directiveQuorum + " 2\n", errLine: -1},
		{name: "age-zero", in: keys + directiveLogKey + " " + vkey + "\n" + directiveMaxAge + " 0s\n", errLine: 5},
		{name: "age-fraction", in: keys + directiveLogKey + " " + vkey + "\n" + directiveMaxAge + " 1.5s\n", errLine: -1},
		{name: "age-garbage", in: keys + directiveLogKey + " " + vkey + "\n" + directiveMaxAge + " soon\n", errLine: 5},
		{name: "age-two-years", in: keys + directiveLogKey + " " + vkey + "\n" + directiveMaxAge + " 730d\n", errLine: -1},
		{name: "log-key-two-tokens", in: keys + directiveLogKey + " a+1+AQ== b\n", errLine: 4},
		{name: "log-key-non-ascii", in: keys + directiveLogKey + " café+1+AQ==\n", errLine: -1},
		{name: "misspelt-directive", in: keys + "nodehotfix-thresold 2\n", errLine: 4},
		{name: "directive-case", in: keys + "NODEHOTFIX-THRESHOLD 2\n", errLine: 4},
		{name: "directives-only", in: directiveThreshold + " 1\n", errLine: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ks, err := ParseKeySet([]byte(tt.in))
			if tt.errLine != 0 {
				if err == nil {
					t.Fatalf("ParseKeySet() = version %d threshold %d, want an error", ks.Version(), ks.Threshold())
				}
				if want := fmt.Sprintf("line %d:", tt.errLine); tt.errLine > 0 && !strings.Contains(err.Error(), want) {
					t.Errorf("ParseKeySet() = %v, want it to name %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKeySet() = %v", err)
			}
			got := want{ks.Version(), ks.Threshold(), ks.Log()}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("ParseKeySet() mismatch (-want +got):\n%s", diff)
			}
			if !ks.Expires().IsZero() {
				t.Errorf("ParseKeySet() expires %v, want never", ks.Expires())
			}
		})
	}
}

func TestMarshalKeySetFile(t *testing.T) {
	t.Parallel()
	plain := KeySetDocument{Version: 1, Threshold: 1, Keys: pubs(1, 2)}
	full := KeySetDocument{Version: 7, Threshold: 2, Keys: pubs(3, 1, 2), Log: LogPolicy{
		Key: "l+1+AQ==", Witnesses: []string{"w1+1+AQ==", "w2+1+AQ=="}, Quorum: 1, MaxCheckpointAge: 90 * time.Minute, Required: true,
	}}
	logOnly := KeySetDocument{Version: 2, Threshold: 1, Keys: pubs(1), Log: LogPolicy{Key: "l+1+AQ=="}}
	for name, d := range map[string]KeySetDocument{"plain": plain, "full": full, "log-only": logOnly} {
		data, err := MarshalKeySetFile(d)
		if err != nil {
			t.Fatalf("MarshalKeySetFile(%s) = %v", name, err)
		}
		ks, err := ParseKeySet(data)
		if err != nil {
			t.Fatalf("ParseKeySet(MarshalKeySetFile(%s)) = %v\n%s", name, err, data)
		}
		want := d
		want.Log = want.Log.withDefaults()
		if diff := cmp.Diff(want, ks.Document()); diff != "" {
			t.Errorf("%s: round trip mismatch (-want +got):\n%s\n%s", name, diff, data)
		}
	}
	// A plain set is written as every agent reads it: without directives.
	data, err := MarshalKeySetFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("\nnodehotfix-keyset")) || bytes.Contains(data, []byte("\nnodehotfix-threshold")) {
		t.Errorf("MarshalKeySetFile(plain) wrote directives:\n%s", data)
	}
	// A set from a signed document is baked without its expiry.
	d := full
	d.Expires = testExpires
	if data, err := MarshalKeySetFile(d); err != nil || bytes.Contains(data, []byte("2026")) {
		t.Errorf("MarshalKeySetFile(with expiry) = %v\n%s", err, data)
	}
	for name, bad := range map[string]KeySetDocument{
		"no-keys":        {Version: 1, Threshold: 1},
		"threshold-over": {Version: 1, Threshold: 3, Keys: pubs(1, 2)},
		"dup-keys":       {Version: 1, Threshold: 1, Keys: pubs(1, 1)},
		"version-0":      {Threshold: 1, Keys: pubs(1)},
	} {
		if _, err := MarshalKeySetFile(bad); err == nil {
			t.Errorf("MarshalKeySetFile(%s) = nil error, want an error", name)
		}
	}
}

// nonStrictDigit returns a base64 digit that differs from c only in its
// lowest bit, a padding bit when it precedes a single "=".
func nonStrictDigit(c byte) byte {
	const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.IndexByte(digits, c)
	return digits[i^1]
}

func TestNewKeySet(t *testing.T) {
	t.Parallel()
	pub1, _ := testKey(1)
	pub2, _ := testKey(2)

	if _, err := NewKeySet(); err == nil {
		t.Error("NewKeySet() = nil error, want an error for no keys")
	}
	if _, err := NewKeySet(pub1, pub1[:31]); err == nil {
		t.Error("NewKeySet(short key) = nil error, want an error")
	}

	in := []ed25519.PublicKey{bytes.Clone(pub2), bytes.Clone(pub1), bytes.Clone(pub2)}
	ks := mustKeySet(t, in...)
	if diff := cmp.Diff([]string{KeyID(pub2), KeyID(pub1)}, ks.KeyIDs()); diff != "" {
		t.Errorf("NewKeySet() key IDs mismatch (-want +got):\n%s", diff)
	}
	// A KeySet must not change when the caller reuses its slices.
	in[0][0] ^= 0xff
	if diff := cmp.Diff([]string{KeyID(pub2), KeyID(pub1)}, ks.KeyIDs()); diff != "" {
		t.Errorf("KeySet changed with its input (-want +got):\n%s", diff)
	}
}

func TestKeyID(t *testing.T) {
	t.Parallel()
	pub1, _ := testKey(1)
	// Golden: sha256 of the raw key, first 8 bytes in hex.
	const want = "34750f98bd59fcfc"
	if got := KeyID(pub1); got != want {
		t.Errorf("KeyID(testKey(1)) = %q, want %q", got, want)
	}
}

func TestMarshalPublicKey(t *testing.T) {
	t.Parallel()
	pub, _ := testKey(1)
	tests := []struct {
		comment string
		want    string
	}{
		{"", keyAlgorithm + " " + keyB64(1) + "\n"},
		{"release 2026", keyAlgorithm + " " + keyB64(1) + " release 2026\n"},
		{" a\nb\r\x00c\t", keyAlgorithm + " " + keyB64(1) + " a b  c\n"},
		{"\xff", keyAlgorithm + " " + keyB64(1) + " ?\n"},
	}
	for _, tt := range tests {
		got := MarshalPublicKey(pub, tt.comment)
		if string(got) != tt.want {
			t.Errorf("MarshalPublicKey(%q) = %q, want %q", tt.comment, got, tt.want)
		}
		ks, err := ParseKeySet(got)
		if err != nil {
			t.Fatalf("ParseKeySet(MarshalPublicKey(%q)) = %v", tt.comment, err)
		}
		if diff := cmp.Diff([]string{KeyID(pub)}, ks.KeyIDs()); diff != "" {
			t.Errorf("ParseKeySet(MarshalPublicKey(%q)) mismatch (-want +got):\n%s", tt.comment, diff)
		}
	}
}

func TestGenerateKey(t *testing.T) {
	t.Parallel()
	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
	pub, priv, err := GenerateKey(bytes.NewReader(seed))
	if err != nil {
		t.Fatalf("GenerateKey(seed) = %v", err)
	}
	if want := ed25519.NewKeyFromSeed(seed); !priv.Equal(want) || !pub.Equal(want.Public()) {
		t.Errorf("GenerateKey(seed) is not the key of its seed")
	}
	if _, _, err := GenerateKey(bytes.NewReader(seed[:5])); err == nil {
		t.Error("GenerateKey(short reader) = nil error, want an error")
	}
	pub, priv, err = GenerateKey(nil)
	if err != nil {
		t.Fatalf("GenerateKey(nil) = %v", err)
	}
	if !pub.Equal(priv.Public()) {
		t.Error("GenerateKey(nil) returned a mismatched pair")
	}
}

// opensslKey was made by "openssl genpkey -algorithm ed25519"; opensslPub is
// its raw public key from "openssl pkey -pubout -outform DER | tail -c 32".
// Throwaway test key.
const (
	opensslKey = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJvE/27VDg3ltXP2BIlzU8KJDMPrE5OUMQ+YjHPl9ySO
-----END PRIVATE KEY-----
`
	opensslPub = "+bFO3t9y8yjkNzA6Tw6x8SYMEt7pBO9W13KzFRcDF6Y="
)

func TestPrivateKeyRoundTrip(t *testing.T) {
	t.Parallel()
	_, priv := testKey(1)
	data, err := MarshalPrivateKey(priv)
	if err != nil {
		t.Fatalf("MarshalPrivateKey: %v", err)
	}
	if block, _ := pem.Decode(data); block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("MarshalPrivateKey() = %q, want a PEM PRIVATE KEY block", data)
	}
	got, err := ParsePrivateKey(data)
	if err != nil {
		t.Fatalf("ParsePrivateKey(MarshalPrivateKey()) = %v", err)
	}
	if !got.Equal(priv) {
		t.Error("ParsePrivateKey(MarshalPrivateKey(k)) != k")
	}
}

func TestParsePrivateKeyOpenSSL(t *testing.T) {
	t.Parallel()
	priv, err := ParsePrivateKey([]byte(opensslKey))
	if err != nil {
		t.Fatalf("ParsePrivateKey(openssl key) = %v", err)
	}
	if got := base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)); got != opensslPub {
		t.Errorf("public key = %s, want %s", got, opensslPub)
	}
	// Our encoding of the same key is byte-identical to openssl's, so
	// openssl reads what MarshalPrivateKey writes.
	data, err := MarshalPrivateKey(priv)
	if err != nil {
		t.Fatalf("MarshalPrivateKey: %v", err)
	}
	if string(data) != opensslKey {
		t.Errorf("MarshalPrivateKey() = %q, want %q", data, opensslKey)
	}
}

func TestParsePrivateKeyErrors(t *testing.T) {
	t.Parallel()
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(opensslKey))
	encrypted := pem.EncodeToMemory(&pem.Block{
		Type:    "PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00"},
		Bytes:   block.Bytes,
	})
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"not-pem", "MC4CAQAwBQYDK2VwBCIEIJvE/27VDg3ltXP2BIlzU8KJDMPrE5OUMQ+YjHPl9ySO"},
		{"public-key-file", keyLine(1, "")},
		{"wrong-type", strings.ReplaceAll(opensslKey, "PRIVATE KEY", "ED25519 PRIVATE KEY")},
		{"encrypted", string(encrypted)},
		{"two-blocks", opensslKey + opensslKey},
		{"trailing-garbage", opensslKey + "x"},
		{"ecdsa", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}))},
		{"bad-der", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: block.Bytes[:20]}))},
		{"oversized", strings.Repeat("\n", maxPrivateKeyFileSize) + opensslKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if k, err := ParsePrivateKey([]byte(tt.in)); err == nil {
				t.Errorf("ParsePrivateKey() = %x, want an error", k)
			}
		})
	}
}

func TestMarshalPrivateKeyBadLength(t *testing.T) {
	t.Parallel()
	if _, err := MarshalPrivateKey(make([]byte, 32)); err == nil {
		t.Error("MarshalPrivateKey(32 bytes) = nil error, want an error")
	}
}

func FuzzParseKeySet(f *testing.F) {
	f.Add([]byte(keyLine(1, "old") + keyLine(2, "new")))
	f.Add([]byte("# c\n\n\t" + keyAlgorithm + "\t" + keyB64(3) + "\n"))
	f.Add([]byte(keyLine(1, "") + keyLine(1, "dup")))
	f.Add([]byte(keyAlgorithm + " " + keyB64(1) + "\r\n"))
	f.Add([]byte(keyAlgorithm + " AAAA\n"))
	f.Add([]byte("ssh-ed25519 " + keyB64(1) + "\n"))
	f.Add([]byte(""))
	f.Add([]byte(directiveVersion + " 3\n" + directiveThreshold + " 2\n" + keyLine(1, "") + keyLine(2, "") +
		directiveLogKey + " l+1+AQ==\n" + directiveWitness + " w+1+AQ==\n" + directiveQuorum + " 1\n" + directiveMaxAge + " 12h\n" + directiveRequireLog + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ks, err := ParseKeySet(data)
		if err != nil {
			return
		}
		if len(ks.keys) == 0 {
			t.Fatal("ParseKeySet accepted a set without keys")
		}
		for _, k := range ks.keys {
			if len(k) != ed25519.PublicKeySize {
				t.Fatalf("ParseKeySet accepted a %d-byte key", len(k))
			}
		}
		if ks.Threshold() > len(ks.keys) {
			t.Fatalf("ParseKeySet accepted threshold %d of %d keys", ks.Threshold(), len(ks.keys))
		}
		// Accepted sets survive a write and re-read unchanged.
		out, err := MarshalKeySetFile(ks.Document())
		if err != nil {
			t.Fatalf("MarshalKeySetFile(accepted set) = %v", err)
		}
		again, err := ParseKeySet(out)
		if err != nil {
			t.Fatalf("ParseKeySet(marshalled set) = %v", err)
		}
		if diff := cmp.Diff(ks.Document(), again.Document()); diff != "" {
			t.Errorf("key set changed on round trip (-first +second):\n%s", diff)
		}
	})
}

func FuzzParsePrivateKey(f *testing.F) {
	_, priv := testKey(1)
	ours, err := MarshalPrivateKey(priv)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ours)
	f.Add([]byte(opensslKey))
	f.Add([]byte(strings.ReplaceAll(opensslKey, "PRIVATE KEY", "EC PRIVATE KEY")))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParsePrivateKey(data)
		if err != nil {
			return
		}
		if len(k) != ed25519.PrivateKeySize {
			t.Fatalf("ParsePrivateKey accepted a %d-byte key", len(k))
		}
		out, err := MarshalPrivateKey(k)
		if err != nil {
			t.Fatalf("MarshalPrivateKey(parsed key) = %v", err)
		}
		again, err := ParsePrivateKey(out)
		if err != nil || !again.Equal(k) {
			t.Fatalf("private key changed on round trip: %v", err)
		}
	})
}
