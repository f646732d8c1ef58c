package tiles

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nodehotfix/internal/release"
)

// signRelease returns a release envelope signed by priv.
func signRelease(t *testing.T, version string, priv ed25519.PrivateKey) []byte {
	t.Helper()
	env, err := release.Sign(release.Release{
		Base:    version[:strings.LastIndex(version, ".")],
		Version: version,
		Artifacts: map[string]release.Artifact{"linux/amd64": {
			URL: "https://cdn.example/a", SHA256: strings.Repeat("ab", 32), Size: 10,
		}},
		NotAfter: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// keySetEnvelope returns a key-set envelope as the design fixes it, with
// signatures naming signers (not real signatures: Describe checks none).
func keySetEnvelope(t *testing.T, version int64, threshold int, keys []ed25519.PublicKey, signers ...string) []byte {
	t.Helper()
	var b64 []string
	for _, k := range keys {
		b64 = append(b64, base64.StdEncoding.EncodeToString(k))
	}
	payload, err := json.Marshal(map[string]any{
		"schema": 1, "type": "nodehotfix-keyset", "version": version, "expires": "2027-01-01T00:00:00Z",
		"threshold": threshold, "keys": b64,
	})
	if err != nil {
		t.Fatal(err)
	}
	type sig struct {
		KeyID string `json:"keyid"`
		Sig   []byte `json:"sig"`
	}
	var sigs []sig
	for _, s := range signers {
		sigs = append(sigs, sig{s, make([]byte, 64)})
	}
	env, err := json.Marshal(map[string]any{
		"payloadType": "application/vnd.nodehotfix.keyset.v1+json", "payload": payload, "signatures": sigs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func newReleaseKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := release.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	pub1, priv1 := newReleaseKey(t)
	pub2, priv2 := newReleaseKey(t)
	rel := signRelease(t, "202604.01.3", priv1)
	cosigned, err := release.AddSignature(rel, priv2)
	if err != nil {
		t.Fatal(err)
	}
	id1, id2 := release.KeyID(pub1), release.KeyID(pub2)
	notAfter := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		record []byte
		want   Entry
	}{
		{"release", rel, Entry{Kind: KindRelease, Version: "202604.01.3", Base: "202604.01", NotAfter: notAfter, Signers: []string{id1}}},
		{"cosigned", cosigned, Entry{Kind: KindRelease, Version: "202604.01.3", Base: "202604.01", NotAfter: notAfter, Signers: []string{id1, id2}}},
		{"revocation", []byte(`{"type":"nodehotfix-revocation","version":"202604.01.3","time":"2026-05-01T10:00:00Z"}`),
			Entry{Kind: KindRevocation, Version: "202604.01.3", Time: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}},
		{"keyset", keySetEnvelope(t, 2, 2, []ed25519.PublicKey{pub1, pub2}, id1, id2),
			Entry{Kind: KindKeySet, Version: "2", Threshold: 2, Keys: []string{id1, id2}, Signers: []string{id1, id2}, Expires: notAfter}},
		{"garbage", []byte("not json"), Entry{Kind: KindUnknown}},
		{"other-envelope", []byte(`{"payloadType":"text/plain","payload":"","signatures":[]}`), Entry{Kind: KindUnknown}},
		{"revocation-extra-key", []byte(`{"type":"nodehotfix-revocation","version":"1","time":"2026-05-01T10:00:00Z","x":1}`), Entry{Kind: KindUnknown}},
		{"bad-release", []byte(`{"payloadType":"application/vnd.nodehotfix.release.v1+json","payload":"e30=","signatures":[]}`), Entry{Kind: KindUnknown}},
	} {
		got := Describe(7, tc.record)
		if got.Index != 7 || got.Kind == KindUnknown && got.Problem == "" {
			t.Errorf("Describe(%s) = %+v: index or problem missing", tc.name, got)
		}
		if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Entry{}, "Index", "Hash", "Problem")); diff != "" {
			t.Errorf("Describe(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
}
