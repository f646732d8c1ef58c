package tiles

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

var testExpiry = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// signRelease returns a release envelope signed by each of privs.
func signRelease(t *testing.T, version string, privs ...ed25519.PrivateKey) []byte {
	t.Helper()
	env, err := release.Sign(release.Release{
		Base:    version[:strings.LastIndex(version, ".")],
		Version: version,
		Artifacts: map[string]release.Artifact{"linux/amd64": {
			URL: "https://cdn.example/a", SHA256: strings.Repeat("ab", 32), Size: 10,
		}},
		NotAfter: testExpiry,
	}, privs[0])
	if err != nil {
		t.Fatal(err)
	}
	return cosignEnvelope(t, env, privs[1:]...)
}

// signKeySet returns the key-set document of version, threshold and keys,
// signed by each of privs.
func signKeySet(t *testing.T, version int64, threshold int, keys []ed25519.PublicKey, privs ...ed25519.PrivateKey) []byte {
	t.Helper()
	env, err := release.SignKeySet(release.KeySetDocument{Version: version, Expires: testExpiry, Threshold: threshold, Keys: keys}, privs[0])
	if err != nil {
		t.Fatal(err)
	}
	return cosignEnvelope(t, env, privs[1:]...)
}

func cosignEnvelope(t *testing.T, env []byte, privs ...ed25519.PrivateKey) []byte {
	t.Helper()
	for _, p := range privs {
		var err error
		if env, err = release.AddSignature(env, p); err != nil {
			t.Fatal(err)
		}
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

func revocationRecord(t *testing.T, version string) []byte {
	t.Helper()
	rec, err := translog.RevocationRecord{Version: version, Time: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	pub1, priv1 := newReleaseKey(t)
	pub2, priv2 := newReleaseKey(t)
	id1, id2 := release.KeyID(pub1), release.KeyID(pub2)
	for _, tc := range []struct {
		name   string
		record []byte
		want   Entry
	}{
		{"release", signRelease(t, "202604.01.3", priv1), Entry{Kind: KindRelease, Version: "202604.01.3", Base: "202604.01", NotAfter: testExpiry}},
		{"cosigned", signRelease(t, "202604.01.3", priv1, priv2), Entry{Kind: KindRelease, Version: "202604.01.3", Base: "202604.01", NotAfter: testExpiry}},
		{"revocation", revocationRecord(t, "202604.01.3"),
			Entry{Kind: KindRevocation, Version: "202604.01.3", Time: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}},
		{"keyset", signKeySet(t, 2, 2, []ed25519.PublicKey{pub1, pub2}, priv1, priv2),
			Entry{Kind: KindKeySet, Version: "2", Threshold: 2, Keys: []string{id1, id2}, Expires: testExpiry}},
		{"garbage", []byte("not json"), Entry{Kind: KindUnknown}},
		{"other-envelope", []byte(`{"payloadType":"text/plain","payload":"","signatures":[]}`), Entry{Kind: KindUnknown}},
		{"revocation-extra-key", []byte(`{"type":"nodehotfix-revocation","version":"1","time":"2026-05-01T10:00:00Z","x":1}`), Entry{Kind: KindUnknown}},
		{"revocation-noncanonical", []byte(`{"version":"1","type":"nodehotfix-revocation","time":"2026-05-01T10:00:00Z"}`), Entry{Kind: KindUnknown}},
		{"bad-release", []byte(`{"payloadType":"application/vnd.nodehotfix.release.v1+json","payload":"e30=","signatures":[]}`), Entry{Kind: KindUnknown}},
	} {
		got := Describe(7, tc.record)
		if got.Index != 7 || got.Kind == KindUnknown && got.Problem == "" {
			t.Errorf("Describe(%s) = %+v: index or problem missing", tc.name, got)
		}
		if got.Flagged() != (tc.want.Kind == KindUnknown) {
			t.Errorf("Describe(%s).Flagged() = %v", tc.name, got.Flagged())
		}
		if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Entry{}, "Index", "Hash", "Problem")); diff != "" {
			t.Errorf("Describe(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
}
