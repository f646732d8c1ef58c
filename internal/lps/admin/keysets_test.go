package admin

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// TestPublishKeySet: a rotation from a 1-of-1 root to a 2-of-2 set is
// published only when the old and the new thresholds signed it; from then
// on releases verify against the new set (one signature no longer
// suffices); the link, the release and its revocation are each appended
// to the log, in that order.
func TestPublishKeySet(t *testing.T) {
	t.Parallel()
	pubA, privA := newKey(t)
	pubB, privB := newKey(t)
	root, err := release.NewKeySet(pubA)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{keys: &root})
	c := h.ops(t)
	ctx := t.Context()

	doc := release.KeySetDocument{Version: 2, Threshold: 2, Keys: []ed25519.PublicKey{pubA, pubB}, Expires: testNow.Add(365 * 24 * time.Hour)}
	byA, err := release.SignKeySet(doc, privA)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(byA), Reason: "rotate"})
	wantCode(t, "a link its own threshold did not sign", err, codes.FailedPrecondition)
	both, err := release.AddSignature(byA, privB)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(both), Reason: "rotate"})
	if err != nil {
		t.Fatalf("PublishKeySet = %v", err)
	}
	if resp.GetKeySet().GetVersion() != 2 || resp.GetKeySet().GetThreshold() != 2 {
		t.Errorf("PublishKeySet = %v, want version 2 of threshold 2", resp.GetKeySet())
	}
	again, err := c.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(both), Reason: "rotate"})
	if err != nil || !again.GetUnchanged() {
		t.Errorf("PublishKeySet(same) = %v, %v; want unchanged", again, err)
	}
	// Version 2 again, another document: not the successor of version 2.
	other, _ := release.SignKeySet(release.KeySetDocument{Version: 2, Threshold: 1, Keys: []ed25519.PublicKey{pubB}, Expires: doc.Expires}, privA)
	other, _ = release.AddSignature(other, privB)
	_, err = c.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(other), Reason: "rotate"})
	wantCode(t, "a second version 2", err, codes.InvalidArgument)

	once := signed(t, privA, "202604.01.1")
	_, err = c.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: once})
	wantCode(t, "a release signed by one key of a 2-of-2 set", err, codes.FailedPrecondition)
	twice, err := release.AddSignature([]byte(once), privB)
	if err != nil {
		t.Fatal(err)
	}
	rel := publish(t, c, string(twice))
	if _, err := c.Revoke(ctx, &adminv1.RevokeRequest{Version: rel.GetVersion(), Reason: "bad"}); err != nil {
		t.Fatalf("Revoke = %v", err)
	}

	list, err := c.ListKeySets(ctx, &adminv1.ListKeySetsRequest{})
	if err != nil || list.GetRoot().GetVersion() != 1 || len(list.GetLinks()) != 1 {
		t.Errorf("ListKeySets = %v, %v; want the root and one link", list, err)
	}
	n, err := h.store.LogSize(ctx)
	if err != nil || n != 3 {
		t.Fatalf("LogSize = %d, %v; want 3 (link, release, revocation)", n, err)
	}
	recs, err := h.store.LogRecords(ctx, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(recs[0]) != string(both) {
		t.Errorf("record 0 = %s, want the link", recs[0])
	}
	if string(recs[1]) != rel.GetEnvelopeJson() {
		t.Errorf("record 1 = %s, want the release envelope as stored", recs[1])
	}
	if r, err := translog.ParseRevocationRecord(recs[2]); err != nil || r.Version != rel.GetVersion() {
		t.Errorf("record 2 = %s (%v), want the revocation of %s", recs[2], err, rel.GetVersion())
	}
}

// TestPublishKeySetRequiringAnAbsentLog: a key set that makes nodes
// require the log is refused while lpsd keeps no checkpoint of it.
func TestPublishKeySetRequiringAnAbsentLog(t *testing.T) {
	t.Parallel()
	pubA, privA := newKey(t)
	root, _ := release.NewKeySet(pubA)
	h := newHarness(t, harnessOpts{keys: &root})
	_, vkey, err := translog.GenerateLogKey("nodehotfix.test/log")
	if err != nil {
		t.Fatal(err)
	}
	doc := release.KeySetDocument{Version: 2, Threshold: 1, Keys: []ed25519.PublicKey{pubA}, Expires: testNow.Add(30 * 24 * time.Hour),
		Log: release.LogPolicy{Key: vkey, Required: true}}
	env, err := release.SignKeySet(doc, privA)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.ops(t).PublishKeySet(t.Context(), &adminv1.PublishKeySetRequest{EnvelopeJson: string(env), Reason: "require the log"})
	wantCode(t, "a key set requiring a log lpsd does not keep", err, codes.FailedPrecondition)
}

// TestPublishKeySetRefusesWhatBricksNodes: lpsd refuses a link nodes
// could not live with: one expiring within a week, one whose witness
// policy lpsd's checkpoint does not satisfy, one with keys of the wrong
// kind, and one past the chain a node baked with lpsd's root walks.
func TestPublishKeySetRefusesWhatBricksNodes(t *testing.T) {
	t.Parallel()
	pubA, privA := newKey(t)
	root, _ := release.NewKeySet(pubA)
	year := testNow.Add(365 * 24 * time.Hour)
	link := func(v int64, expires time.Time, p release.LogPolicy) string {
		env, err := release.SignKeySet(release.KeySetDocument{Version: v, Threshold: 1, Keys: []ed25519.PublicKey{pubA}, Expires: expires, Log: p}, privA)
		if err != nil {
			t.Fatal(err)
		}
		return string(env)
	}
	skey, vkey, _ := translog.GenerateLogKey("nodehotfix.test/log")
	signer, _ := translog.NewLogSigner(skey)
	_, wvkey, _ := translog.GenerateWitnessKey("witness.test")
	empty, _ := tlog.TreeHash(0, nil)
	uncosigned, err := translog.Checkpoint{Origin: "nodehotfix.test/log", Size: 0, Hash: empty}.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, harnessOpts{keys: &root})
	if err := h.store.PutCheckpoint(t.Context(), 0, uncosigned); err != nil {
		t.Fatal(err)
	}
	c := h.ops(t)
	for _, tc := range []struct {
		name string
		env  string
		want codes.Code
	}{
		{"expiring in a minute", link(2, testNow.Add(time.Minute), release.LogPolicy{}), codes.FailedPrecondition},
		{"a witness quorum the kept checkpoint lacks", link(2, year, release.LogPolicy{Key: vkey, Witnesses: []string{wvkey}, Quorum: 1, MaxCheckpointAge: 24 * time.Hour, Required: true}), codes.FailedPrecondition},
		{"the log and witness keys swapped", link(2, year, release.LogPolicy{Key: wvkey, Witnesses: []string{vkey}, Quorum: 1, MaxCheckpointAge: 24 * time.Hour}), codes.InvalidArgument},
	} {
		_, err := c.PublishKeySet(t.Context(), &adminv1.PublishKeySetRequest{EnvelopeJson: tc.env, Reason: tc.name})
		wantCode(t, tc.name, err, tc.want)
	}
	// The log required with no witnesses, as the kept checkpoint is: fine.
	if _, err := c.PublishKeySet(t.Context(), &adminv1.PublishKeySetRequest{EnvelopeJson: link(2, year, release.LogPolicy{Key: vkey, MaxCheckpointAge: 24 * time.Hour, Required: true}), Reason: "log"}); err != nil {
		t.Fatalf("PublishKeySet(a policy the checkpoint satisfies) = %v", err)
	}
	var last error
	v := int64(3)
	for ; v <= release.MaxChain+2; v++ {
		if _, last = c.PublishKeySet(t.Context(), &adminv1.PublishKeySetRequest{EnvelopeJson: link(v, year, release.LogPolicy{Key: vkey, MaxCheckpointAge: 24 * time.Hour, Required: true}), Reason: "rotate"}); last != nil {
			break
		}
	}
	if v != release.MaxChain+2 {
		t.Errorf("the chain stopped at version %d (%v), want it refused past version %d (the root's plus %d links)", v, last, release.MaxChain+1, release.MaxChain)
	}
	wantCode(t, "a link past the chain a node walks", last, codes.FailedPrecondition)
	// Releases still publish against the newest version.
	if _, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: signed(t, privA, "202604.01.1")}); err != nil {
		t.Errorf("PublishRelease at the longest chain = %v", err)
	}
}

// TestRotateAfterTheNewestLinkExpired: once the newest link has expired,
// releases are refused with a message naming the way out, and that way
// (publishing the next version) works: nodes check only the newest link's
// expiry.
func TestRotateAfterTheNewestLinkExpired(t *testing.T) {
	t.Parallel()
	pubA, privA := newKey(t)
	root, _ := release.NewKeySet(pubA)
	h := newHarness(t, harnessOpts{keys: &root})
	c := h.ops(t)
	week := 8 * 24 * time.Hour
	v2, _ := release.SignKeySet(release.KeySetDocument{Version: 2, Threshold: 1, Keys: []ed25519.PublicKey{pubA}, Expires: testNow.Add(week)}, privA)
	if _, err := c.PublishKeySet(t.Context(), &adminv1.PublishKeySetRequest{EnvelopeJson: string(v2), Reason: "rotate"}); err != nil {
		t.Fatal(err)
	}
	h.ahead.Store(int64(week + time.Hour))
	_, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: signedUntil(t, privA, "202604.01.1", testNow.Add(30*24*time.Hour))})
	wantCode(t, "a release under an expired newest link", err, codes.FailedPrecondition)
	if st, _ := status.FromError(err); !strings.Contains(st.Message(), "lpsctl keys publish") {
		t.Errorf("refusal %q does not say to publish the next version", st.Message())
	}
	v3, _ := release.SignKeySet(release.KeySetDocument{Version: 3, Threshold: 1, Keys: []ed25519.PublicKey{pubA}, Expires: testNow.Add(365 * 24 * time.Hour)}, privA)
	if _, err := c.PublishKeySet(t.Context(), &adminv1.PublishKeySetRequest{EnvelopeJson: string(v3), Reason: "rotate after expiry"}); err != nil {
		t.Fatalf("PublishKeySet(v3) after v2 expired = %v", err)
	}
	if _, err := c.PublishRelease(t.Context(), &adminv1.PublishReleaseRequest{EnvelopeJson: signedUntil(t, privA, "202604.01.1", testNow.Add(30*24*time.Hour))}); err != nil {
		t.Errorf("PublishRelease after the rotation = %v", err)
	}
}

// TestExplainSaysWhatEachBaseVerifies: explain names, per base of its
// decisions, what nodes that walk the chain verify (the newest key set's
// threshold) and that images baked before release trust v2 accept one
// signature and know no log.
func TestExplainSaysWhatEachBaseVerifies(t *testing.T) {
	t.Parallel()
	pubA, privA := newKey(t)
	pubB, privB := newKey(t)
	root, err := release.KeySetDocument{Version: 1, Threshold: 2, Keys: []ed25519.PublicKey{pubA, pubB}}.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{keys: &root})
	c := h.ops(t)
	env, err := release.AddSignature([]byte(signed(t, privA, "202604.01.1")), privB)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, c, string(env))
	h.reload(t)
	resp, err := c.Explain(t.Context(), &adminv1.ExplainRequest{VmId: "6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", SubscriptionId: subA})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTrust()) != 1 {
		t.Fatalf("trust = %v, want one base", resp.GetTrust())
	}
	bt := resp.GetTrust()[0]
	if bt.GetBase() != "202604.01" || bt.GetKeysetVersion() != 1 || bt.GetThreshold() != 2 || bt.GetLogRequired() ||
		!strings.Contains(bt.GetDetail(), "need 2 of its 2 keys' signatures") || !strings.Contains(bt.GetDetail(), "images baked before release trust v2 accept one signature") {
		t.Errorf("trust = %v", bt)
	}
}
