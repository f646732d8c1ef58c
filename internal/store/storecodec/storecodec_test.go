package storecodec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

func TestReleaseRoundTripKeepsEnvelopeBytes(t *testing.T) {
	env := json.RawMessage("{ \"payload\" :  \"x\" }") // spacing a compacting encoder would lose
	for _, rev := range []int64{0, 7} {
		b, err := EncodeRelease(rollout.Release{Version: "202604.01.1", Envelope: env}, rev)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte(`"rev"`)); got != (rev != 0) {
			t.Errorf("rev %d: stored form has a rev field = %v: %s", rev, got, b)
		}
		r, gotRev, err := DecodeRelease(b)
		if err != nil {
			t.Fatal(err)
		}
		if gotRev != rev || r.Version != "202604.01.1" || !bytes.Equal(r.Envelope, env) {
			t.Errorf("rev %d: decoded %+v at rev %d, want the envelope bytes unchanged", rev, r, gotRev)
		}
	}
}

func TestAuditRoundTripKeepsSnapshots(t *testing.T) {
	before, after := json.RawMessage(`{"a" : 1}`), json.RawMessage(`{"a" : 2}`)
	b, err := EncodeAudit(store.AuditEntry{Seq: 3, Before: before, After: after})
	if err != nil {
		t.Fatal(err)
	}
	a, err := DecodeAudit(b)
	if err != nil {
		t.Fatal(err)
	}
	if a.Seq != 3 || !bytes.Equal(a.Before, before) || !bytes.Equal(a.After, after) {
		t.Errorf("decoded %+v, want seq 3 and the snapshots unchanged", a)
	}
}

func TestOtherVersionsAndGarbageRefused(t *testing.T) {
	for _, v := range []string{`{"v":2,"release":{}}`, `{"release":{}}`, `not json`} {
		if _, _, err := DecodeRelease([]byte(v)); err == nil {
			t.Errorf("DecodeRelease(%s) accepted it", v)
		}
		if _, err := DecodeAudit([]byte(v)); err == nil || !strings.Contains(err.Error(), "audit record") {
			t.Errorf("DecodeAudit(%s) = %v, want an audit record error", v, err)
		}
	}
}
