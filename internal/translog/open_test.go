package translog

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const testOrigin = "nodehotfix.example/log"

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a log key and three witness keys.
type fixture struct {
	logSigner note.Signer
	logV      *LogVerifier
	logVKey   string
	witSKey   []string
	witV      []*CosignatureVerifier
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	skey, vkey, err := GenerateLogKey(testOrigin)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{logVKey: vkey}
	if f.logSigner, err = NewLogSigner(skey); err != nil {
		t.Fatal(err)
	}
	if f.logV, err = ParseLogKey(vkey); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s, v, err := GenerateWitnessKey(fmt.Sprintf("witness%d.example", i))
		if err != nil {
			t.Fatal(err)
		}
		wv, err := ParseWitnessKey(v)
		if err != nil {
			t.Fatal(err)
		}
		f.witSKey = append(f.witSKey, s)
		f.witV = append(f.witV, wv)
	}
	return f
}

// cosigner returns witness i signing at time at.
func (f *fixture) cosigner(t testing.TB, i int, at time.Time) *Cosigner {
	t.Helper()
	c, err := NewCosigner(f.witSKey[i], func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fixture) policy(quorum int) Policy {
	return Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0], f.witV[1], f.witV[2]}, Quorum: quorum, MaxAge: 24 * time.Hour}
}

// signed returns the log-signed checkpoint of size and hash.
func (f *fixture) signed(t testing.TB, size int64, hash tlog.Hash) []byte {
	t.Helper()
	msg, err := Checkpoint{Origin: testOrigin, Size: size, Hash: hash}.Sign(f.logSigner)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// cosign appends cosignature lines by cs to the signed note msg.
func cosign(t testing.TB, msg []byte, cs ...note.Signer) []byte {
	t.Helper()
	text := mustText(t, msg)
	out := append([]byte{}, msg...)
	for _, c := range cs {
		line, err := cosignLine(text, c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, line...)
	}
	return out
}

func mustText(t testing.TB, msg []byte) []byte {
	t.Helper()
	text, err := noteText(msg)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func wantReason(t *testing.T, what string, err error, want Reason) {
	t.Helper()
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("%s: error %v, want a *VerifyError %s", what, err, want)
	}
	if ve.Reason != want {
		t.Fatalf("%s: reason %s (%v), want %s", what, ve.Reason, err, want)
	}
}

var someHash = tlog.RecordHash([]byte("some record"))

func TestOpen(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msg := cosign(t, f.signed(t, 7, someHash), f.cosigner(t, 0, testNow.Add(-time.Hour)), f.cosigner(t, 1, testNow.Add(-2*time.Hour)))
	c, cosigs, err := Open(msg, f.policy(2), testNow)
	if err != nil {
		t.Fatalf("Open: %v\n%s", err, msg)
	}
	if c.Origin != testOrigin || c.Size != 7 || c.Hash != someHash {
		t.Errorf("Open = %+v, want size 7 of %s", c, testOrigin)
	}
	if !bytes.Equal(c.Note, msg) {
		t.Errorf("Open(msg).Note = %q, want msg %q", c.Note, msg)
	}
	if msg[0]++; c.Note[0] == msg[0] {
		t.Errorf("Open(msg).Note shares msg's bytes")
	}
	want := []Cosignature{
		{Name: f.witV[0].Name(), KeyHash: f.witV[0].KeyHash(), Time: testNow.Add(-time.Hour)},
		{Name: f.witV[1].Name(), KeyHash: f.witV[1].KeyHash(), Time: testNow.Add(-2 * time.Hour)},
	}
	if fmt.Sprint(cosigs) != fmt.Sprint(want) {
		t.Errorf("cosignatures = %v, want %v", cosigs, want)
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fresh := testNow.Add(-time.Minute)
	w0, w1, w2 := f.cosigner(t, 0, fresh), f.cosigner(t, 1, fresh), f.cosigner(t, 2, fresh)
	good := f.signed(t, 7, someHash)

	otherSKey, _, err := GenerateLogKey(testOrigin) // same name, another key
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := NewLogSigner(otherSKey)
	if err != nil {
		t.Fatal(err)
	}
	otherOrigin, err := note.Sign(&note.Note{Text: "other.example/log\n7\n" + someHash.String() + "\n"}, f.logSigner)
	if err != nil {
		t.Fatal(err)
	}
	byImpostor, err := Checkpoint{Origin: testOrigin, Size: 7, Hash: someHash}.Sign(impostor)
	if err != nil {
		t.Fatal(err)
	}
	// The impostor's line relabelled with the log key's hash: a 32-bit key
	// hash collision is cheap to grind.
	collided := relabel(t, byImpostor, f.logV.KeyHash())
	unsignedText := mustText(t, good)
	onlyWitnesses, err := note.Sign(&note.Note{Text: string(unsignedText)}, w0, w1)
	if err != nil {
		t.Fatal(err)
	}
	tampered := []byte(strings.Replace(string(cosign(t, good, w0, w1)), "\n7\n", "\n8\n", 1))
	badCosig := flipLast(t, cosign(t, good, w0, w1))

	tests := []struct {
		name   string
		msg    []byte
		policy Policy
		now    time.Time
		want   Reason
	}{
		{"wrong-origin", cosign(t, otherOrigin, w0, w1), f.policy(2), testNow, ReasonOrigin},
		{"same-name-other-key", cosign(t, byImpostor, w0, w1), f.policy(2), testNow, ReasonUnsigned},
		{"key-hash-collision", cosign(t, collided, w0, w1), f.policy(2), testNow, ReasonBadSignature},
		{"witnesses-only", onlyWitnesses, f.policy(2), testNow, ReasonUnsigned},
		{"tampered-size", tampered, f.policy(2), testNow, ReasonBadSignature},
		{"bad-cosignature", badCosig, f.policy(2), testNow, ReasonBadSignature},
		{"no-witness", good, f.policy(1), testNow, ReasonQuorum},
		{"one-of-two", cosign(t, good, w0), f.policy(2), testNow, ReasonQuorum},
		{"duplicate-cosignature", cosign(t, good, w0, f.cosigner(t, 0, fresh.Add(-time.Second))), f.policy(2), testNow, ReasonQuorum},
		{"unknown-witness", cosign(t, good, w0, w2), Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0], f.witV[1]}, Quorum: 2}, testNow, ReasonQuorum},
		{"stale", cosign(t, good, f.cosigner(t, 0, testNow.Add(-25*time.Hour)), f.cosigner(t, 1, testNow.Add(-26*time.Hour))), f.policy(2), testNow, ReasonStale},
		{"quorum-th-stale", cosign(t, good, w0, f.cosigner(t, 1, testNow.Add(-25*time.Hour))), f.policy(2), testNow, ReasonStale},
		{"future", cosign(t, good, f.cosigner(t, 0, testNow.Add(10*time.Minute)), w1), f.policy(2), testNow, ReasonStale},
		{"zero-now", cosign(t, good, w0, w1), f.policy(2), time.Time{}, ReasonStale},
		{"no-signatures", mustText(t, good), f.policy(0), testNow, ReasonMalformed},
		{"oversize", append(cosign(t, good, w0, w1), []byte(strings.Repeat("— x AAAA\n", MaxNoteSize/9))...), f.policy(2), testNow, ReasonMalformed},
		{"not-a-checkpoint", mustSign(t, "hello\n", f.logSigner), f.policy(0), testNow, ReasonMalformed},
		{"nil-log", good, Policy{}, testNow, ReasonPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := Open(tt.msg, tt.policy, tt.now)
			if err == nil {
				t.Fatalf("Open = %+v, nil error; want %s", c, tt.want)
			}
			wantReason(t, "Open", err, tt.want)
		})
	}
}

func mustSign(t *testing.T, text string, s note.Signer) []byte {
	t.Helper()
	msg, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// flipLast flips a bit in the signature of a note's last signature line.
func flipLast(t *testing.T, msg []byte) []byte {
	t.Helper()
	s := strings.TrimSuffix(string(msg), "\n")
	i := strings.LastIndex(s, " ")
	raw, err := base64.StdEncoding.DecodeString(s[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	return []byte(s[:i+1] + base64.StdEncoding.EncodeToString(raw) + "\n")
}

// relabel rewrites the key hash of a note's last signature line.
func relabel(t *testing.T, msg []byte, hash uint32) []byte {
	t.Helper()
	s := strings.TrimSuffix(string(msg), "\n")
	i := strings.LastIndex(s, " ")
	raw, err := base64.StdEncoding.DecodeString(s[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(raw, hash)
	return []byte(s[:i+1] + base64.StdEncoding.EncodeToString(raw) + "\n")
}

func TestOpenAccepts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fresh := testNow.Add(-time.Minute)
	good := f.signed(t, 7, someHash)
	w0, w1 := f.cosigner(t, 0, fresh), f.cosigner(t, 1, fresh)
	tests := []struct {
		name   string
		msg    []byte
		policy Policy
	}{
		{"quorum-0-no-witness", good, Policy{Log: f.logV}},
		{"quorum-0-stale-witness", cosign(t, good, f.cosigner(t, 0, testNow.Add(-100*time.Hour))), f.policy(0)},
		{"quorum-1-one-stale", cosign(t, good, w0, f.cosigner(t, 1, testNow.Add(-100*time.Hour))), f.policy(1)},
		{"slightly-future", cosign(t, good, f.cosigner(t, 0, testNow.Add(4*time.Minute)), w1), f.policy(2)},
		{"unknown-lines-ignored", cosign(t, good, w0, w1, otherLogSigner(t)), f.policy(2)},
		{"default-max-age", cosign(t, good, f.cosigner(t, 0, testNow.Add(-23*time.Hour)), w1), Policy{Log: f.logV, Witnesses: f.policy(0).Witnesses, Quorum: 2}},
		{"witness-listed-twice", cosign(t, good, w0, w1), Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0], f.witV[0], f.witV[1]}, Quorum: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Open(tt.msg, tt.policy, testNow); err != nil {
				t.Fatalf("Open: %v\n%s", err, tt.msg)
			}
		})
	}
}

func otherLogSigner(t *testing.T) note.Signer {
	t.Helper()
	skey, _, err := GenerateLogKey("stranger.example")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewLogSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOpenOneKeyTwoNames: cosignature/v1 does not sign the witness's name,
// so one key listed under two names must count as one witness.
func TestOpenOneKeyTwoNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w0 := f.cosigner(t, 0, testNow)
	alias := &Cosigner{v: CosignatureVerifier{name: "alias.example", key: w0.v.key}, priv: w0.priv, now: w0.now}
	alias.v.hash = keyHash(alias.v.name, algCosignature, alias.v.key)
	p := Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0], alias.Verifier(), f.witV[1]}, Quorum: 2}
	msg := cosign(t, f.signed(t, 7, someHash), w0, alias)
	_, _, err := Open(msg, p, testNow)
	wantReason(t, "Open", err, ReasonQuorum)
	if _, _, err := Open(cosign(t, msg, f.cosigner(t, 1, testNow)), p, testNow); err != nil {
		t.Errorf("Open with a second real witness: %v", err)
	}
}

func TestPolicyRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	forged := &CosignatureVerifier{name: f.witV[0].name, hash: f.witV[0].hash, key: f.witV[1].key}
	logAsWitness := &CosignatureVerifier{name: "w.example", key: f.logV.PublicKey()}
	logAsWitness.hash = keyHash(logAsWitness.name, algCosignature, logAsWitness.key)
	tests := []struct {
		name string
		p    Policy
	}{
		{"no-log", Policy{Witnesses: []note.Verifier{f.witV[0]}}},
		{"quorum-above-witnesses", Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0]}, Quorum: 2}},
		{"quorum-of-duplicates", Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0], f.witV[0]}, Quorum: 2}},
		{"negative-quorum", Policy{Log: f.logV, Quorum: -1}},
		{"negative-age", Policy{Log: f.logV, MaxAge: -time.Second}},
		{"colliding-witnesses", Policy{Log: f.logV, Witnesses: []note.Verifier{f.witV[0], forged}, Quorum: 1}},
		{"log-key-as-witness", Policy{Log: f.logV, Witnesses: []note.Verifier{logAsWitness}, Quorum: 1}},
		{"not-a-cosignature-key", Policy{Log: f.logV, Witnesses: []note.Verifier{f.logV}, Quorum: 1}},
		{"nil-witness", Policy{Log: f.logV, Witnesses: []note.Verifier{nil}}},
	}
	msg := cosign(t, f.signed(t, 1, someHash), f.cosigner(t, 0, testNow))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Open(msg, tt.p, testNow)
			wantReason(t, "Open", err, ReasonPolicy)
		})
	}
}

func TestNewPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := []string{f.witV[0].String(), f.witV[1].String()}
	p, err := NewPolicy(f.logVKey, ws, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	msg := cosign(t, f.signed(t, 3, someHash), f.cosigner(t, 0, testNow), f.cosigner(t, 1, testNow))
	if _, _, err := Open(msg, p, testNow); err != nil {
		t.Errorf("Open under NewPolicy: %v", err)
	}
	_, err = NewPolicy(f.logVKey, ws, 3, 0)
	wantReason(t, "NewPolicy quorum 3 of 2", err, ReasonPolicy)
	_, err = NewPolicy(f.witV[0].String(), nil, 0, 0)
	wantReason(t, "NewPolicy witness key as log key", err, ReasonMalformed)
	_, err = NewPolicy(f.logVKey, []string{f.logVKey}, 0, 0)
	wantReason(t, "NewPolicy log key as witness key", err, ReasonMalformed)
}
