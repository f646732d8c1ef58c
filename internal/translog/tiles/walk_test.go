package tiles

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/note"

	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// bakedKeySet returns the key set of a baked file of version, threshold
// and keys.
func bakedKeySet(t *testing.T, version int64, threshold int, keys ...ed25519.PublicKey) *release.KeySet {
	t.Helper()
	data, err := release.MarshalKeySetFile(release.KeySetDocument{Version: version, Threshold: threshold, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := release.ParseKeySet(data)
	if err != nil {
		t.Fatal(err)
	}
	return &ks
}

// monitorChecks runs Monitor with root over records and returns each
// entry's check status, and the report.
func monitorChecks(t *testing.T, root *release.KeySet, since int64, records ...[]byte) ([]Status, Report) {
	t.Helper()
	s, v := newLogKey(t)
	src, err := NewMemSource(records...)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Sign(s); err != nil {
		t.Fatal(err)
	}
	rep, err := Monitor(t.Context(), serve(t, Handler(src), v), MonitorConfig{Root: root, Since: since})
	if err != nil {
		t.Fatalf("Monitor: %v", err)
	}
	var got []Status
	for _, e := range rep.Entries {
		st := Status("-")
		if e.Check != nil {
			st = e.Check.Status
		}
		got = append(got, st)
	}
	return got, rep
}

func TestMonitorWalk(t *testing.T) {
	t.Parallel()
	pub1, priv1 := newReleaseKey(t)
	pub2, priv2 := newReleaseKey(t)
	pub3, priv3 := newReleaseKey(t)
	id1, id2, id3 := release.KeyID(pub1), release.KeyID(pub2), release.KeyID(pub3)
	root := bakedKeySet(t, 1, 2, pub1, pub2, pub3)
	v2 := signKeySet(t, 2, 2, []ed25519.PublicKey{pub2, pub3}, priv1, priv2, priv3)
	records := [][]byte{
		signRelease(t, "202604.01.1", priv1, priv2), // 2 of 2: verified
		signRelease(t, "202604.01.2", priv1),        // 1 of 2: flagged
		v2,                                          // link 1 → 2: verified
		signRelease(t, "202604.01.3", priv1, priv2),                         // k1 is no longer trusted: flagged
		signRelease(t, "202604.01.4", priv2, priv3),                         // verified by version 2
		signKeySet(t, 4, 1, []ed25519.PublicKey{pub1}, priv2, priv3, priv1), // skips version 3: flagged
		signKeySet(t, 3, 1, []ed25519.PublicKey{pub1}, priv2),               // one of version 2's two: flagged
		revocationRecord(t, "202604.01.2"),                                  // nothing to check
		signKeySet(t, 3, 1, []ed25519.PublicKey{pub1}, priv2, priv3, priv1), // verified
		signRelease(t, "202604.01.5", priv1),                                // verified by version 3
	}
	got, rep := monitorChecks(t, root, 0, records...)
	want := []Status{StatusVerified, StatusBelowThreshold, StatusVerified, StatusBelowThreshold, StatusVerified,
		StatusBadLink, StatusBadLink, "-", StatusVerified, StatusVerified}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	if n := rep.Flagged(); n != 4 {
		t.Errorf("Flagged() = %d, want 4", n)
	}
	if rep.KeySet == nil || rep.KeySet.Version() != 3 || rep.KeySetExpired {
		t.Errorf("newest key set = %+v, expired %v; want version 3", rep.KeySet, rep.KeySetExpired)
	}
	if c := rep.Entries[1].Check; c.KeySetVersion != 1 || c.Threshold != 2 || !cmp.Equal(c.Signers, []string{id1}) {
		t.Errorf("under-signed release's check = %+v", c)
	}
	if c := rep.Entries[5].Check; c.Problem == "" {
		t.Errorf("bad link's check has no problem: %+v", c)
	}
	if c := rep.Entries[2].Check; !cmp.Equal(c.Signers, []string{id1, id2, id3}) || !cmp.Equal(c.OwnSigners, []string{id2, id3}) {
		t.Errorf("link's check = %+v", c)
	}
	if c := rep.Entries[3].Check; c.KeySetVersion != 2 || !cmp.Equal(c.Signers, []string{id2}) {
		t.Errorf("release signed by a retired key: check = %+v", c)
	}

	// --since reports fewer records but walks them all.
	got, rep = monitorChecks(t, root, 8, records...)
	if diff := cmp.Diff([]Status{StatusVerified, StatusVerified}, got); diff != "" || rep.Flagged() != 0 {
		t.Errorf("checks since 8 (-want +got):\n%s\nflagged %d", diff, rep.Flagged())
	}

	// Without a root nothing is checked and nothing but unknown records
	// is flagged.
	got, rep = monitorChecks(t, nil, 0, records[0], records[1], []byte("junk"))
	if diff := cmp.Diff([]Status{"-", "-", "-"}, got); diff != "" || rep.Flagged() != 1 || rep.KeySet != nil {
		t.Errorf("no root: checks (-want +got):\n%s\nflagged %d", diff, rep.Flagged())
	}
}

// TestMonitorWalkFromLaterRoot: a root of version 2 cannot judge what was
// signed before version 2 entered the log, and must match that record.
func TestMonitorWalkFromLaterRoot(t *testing.T) {
	t.Parallel()
	pub1, priv1 := newReleaseKey(t)
	pub2, priv2 := newReleaseKey(t)
	v2 := signKeySet(t, 2, 1, []ed25519.PublicKey{pub2}, priv1, priv2)
	records := [][]byte{signRelease(t, "202604.01.1", priv1), v2, signRelease(t, "202604.01.2", priv2), signRelease(t, "202604.01.3", priv1)}

	got, rep := monitorChecks(t, bakedKeySet(t, 2, 1, pub2), 0, records...)
	want := []Status{StatusBeforeRoot, StatusRoot, StatusVerified, StatusBelowThreshold}
	if diff := cmp.Diff(want, got); diff != "" || rep.Flagged() != 1 {
		t.Errorf("root version 2 (-want +got):\n%s\nflagged %d", diff, rep.Flagged())
	}
	got, _ = monitorChecks(t, bakedKeySet(t, 2, 1, pub1), 0, records...)
	if got[1] != StatusRootMismatch {
		t.Errorf("root version 2 with other keys: link checked %s, want %s", got[1], StatusRootMismatch)
	}
}

// TestMonitorWitnesses: with witnesses in the policy, a checkpoint without
// their fresh cosignatures is refused.
func TestMonitorWitnesses(t *testing.T) {
	t.Parallel()
	skey, vkey, err := translog.GenerateLogKey(testOrigin)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := translog.NewLogSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	wskey, wvkey, err := translog.GenerateWitnessKey("witness.example")
	if err != nil {
		t.Fatal(err)
	}
	src := newLog(t, 3, signer)
	p, err := translog.NewPolicy(vkey, []string{wvkey}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, Handler(src), p.Log)
	c.policy = p
	var ve *VerifyError
	var tve *translog.VerifyError
	if _, err := Monitor(t.Context(), c, MonitorConfig{}); !errors.As(err, &ve) || ve.Reason != ReasonCheckpoint || !errors.As(err, &tve) || tve.Reason != translog.ReasonQuorum {
		t.Fatalf("Monitor of an uncosigned checkpoint = %v, want bad-checkpoint (no-quorum)", err)
	}
	cosigner, err := translog.NewCosigner(wskey, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, msg, _ := src.Checkpoint(t.Context())
	n, err := note.Open(msg, note.VerifierList(p.Log))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, cosigner)
	if err != nil {
		t.Fatal(err)
	}
	src.SetCheckpoint(3, cosigned)
	rep, err := Monitor(t.Context(), c, MonitorConfig{})
	if err != nil || len(rep.Cosignatures) != 1 || rep.Cosignatures[0].Name != "witness.example" {
		t.Fatalf("Monitor of a cosigned checkpoint = %+v, %v", rep.Cosignatures, err)
	}
}
