package storecodec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

func TestReportRoundTrip(t *testing.T) {
	want := store.Report{
		VMID: "vm-1", Boot: "boot-1", SubscriptionID: "sub-a", Base: "202604.01",
		BakedVersion: "1.2.3", Agent: "hotfix", AgentVersion: "1.2.4", HotfixVersion: "202604.01.2",
		Decision: "run-hotfix", Route: "direct", Fallback: true, FallbackReason: "timeout",
		ExitCode: 3, CheckMS: 12, DownloadMS: 345, ProvisionMS: 6789,
		Time: time.Date(2026, 4, 2, 8, 0, 0, 987654321, time.UTC),
	}
	b, err := EncodeReport(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeReport(EncodeReport(r)) mismatch (-want +got):\n%s", diff)
	}
}

func TestOtherVersionsAndGarbageRefused(t *testing.T) {
	for _, v := range []string{`{"v":3,"report":{"vm_id":"a","boot":"b"}}`, `{"v":2,"report":{"vm_id":"a","boot":"b"}}`, `{"v":1,"report":{"vm_id":"a","boot":"b","phase":"started"}}`, `{"report":{}}`, `not json`} {
		if _, err := DecodeReport([]byte(v)); err == nil || !strings.Contains(err.Error(), "report record") {
			t.Errorf("DecodeReport(%s) = %v, want a report record error", v, err)
		}
	}
	for _, v := range []string{`{"v":2,"release":{}}`, `{"release":{}}`, `not json`} {
		if _, _, err := DecodeRelease([]byte(v)); err == nil {
			t.Errorf("DecodeRelease(%s) accepted it", v)
		}
		if _, err := DecodeAudit([]byte(v)); err == nil || !strings.Contains(err.Error(), "audit record") {
			t.Errorf("DecodeAudit(%s) = %v, want an audit record error", v, err)
		}
	}
}

// TestStartedReportIsAnotherEncoding: a started report is stored as
// version 2, which a replica that predates it refuses (skips) rather than
// reading as an outcome of exit code 0; outcomes stay version 1.
func TestStartedReportIsAnotherEncoding(t *testing.T) {
	started := store.Report{VMID: "vm-1", Boot: "boot-1", Agent: "hotfix", HotfixVersion: "202604.01.2", Phase: store.PhaseStarted}
	b, err := EncodeReport(started)
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.V != 2 {
		t.Fatalf("started report stored as %s, want encoding version 2", b)
	}
	got, err := DecodeReport(b)
	if err != nil || !got.Started() {
		t.Fatalf("DecodeReport(started) = %+v, %v; want the started report", got, err)
	}
	b, err = EncodeReport(store.Report{VMID: "vm-1", Boot: "boot-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &head); err != nil || head.V != 1 {
		t.Fatalf("outcome stored as %s, want encoding version 1", b)
	}
}

func TestLogRecordRoundTrip(t *testing.T) {
	rec := []byte("{ \"payload\" :  \"x\" }")
	v := EncodeLogRecord(rec)
	got, err := DecodeLogRecord(v)
	if err != nil || !bytes.Equal(got, rec) {
		t.Errorf("DecodeLogRecord(EncodeLogRecord(%q)) = %q, %v", rec, got, err)
	}
	v[1] = 'X' // the decoded record is a copy
	if !bytes.Equal(got, rec) {
		t.Errorf("decoded record shares the stored value's memory")
	}
	for _, bad := range [][]byte{nil, {}, {2, 'x'}} {
		if _, err := DecodeLogRecord(bad); err == nil {
			t.Errorf("DecodeLogRecord(%q) accepted it", bad)
		}
	}
}

func TestDecodeHashLength(t *testing.T) {
	for _, n := range []int{0, 31, 33} {
		if _, err := DecodeHash(make([]byte, n)); err == nil {
			t.Errorf("DecodeHash(%d bytes) accepted it", n)
		}
	}
	h, err := DecodeHash(bytes.Repeat([]byte{7}, 32))
	if err != nil || h[31] != 7 {
		t.Errorf("DecodeHash(32 bytes) = %v, %v", h, err)
	}
}

func TestKeySetAndCheckpointRoundTrip(t *testing.T) {
	k := store.KeySetRecord{Version: 3, Envelope: []byte("{ \"spaced\" : 1 }")}
	b, err := EncodeKeySet(k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeKeySet(b)
	if err != nil || !cmp.Equal(got, k) {
		t.Errorf("DecodeKeySet(EncodeKeySet(k)) = %+v, %v; want %+v", got, err, k)
	}
	b, err = EncodeCheckpoint(12, []byte("origin\n12\nhash\n\n— sig\n"))
	if err != nil {
		t.Fatal(err)
	}
	size, note, err := DecodeCheckpoint(b)
	if err != nil || size != 12 || string(note) != "origin\n12\nhash\n\n— sig\n" {
		t.Errorf("DecodeCheckpoint = %d, %q, %v", size, note, err)
	}
	for _, v := range []string{`{"v":2,"version":1,"envelope":"eA=="}`, `{"v":1,"version":1}`, `not json`} {
		if _, err := DecodeKeySet([]byte(v)); err == nil {
			t.Errorf("DecodeKeySet(%s) accepted it", v)
		}
	}
	for _, v := range []string{`{"v":2,"size":1,"note":"eA=="}`, `{"v":1,"size":-1,"note":"eA=="}`, `{"v":1,"size":1}`} {
		if _, _, err := DecodeCheckpoint([]byte(v)); err == nil {
			t.Errorf("DecodeCheckpoint(%s) accepted it", v)
		}
	}
}

func TestFreezeRoundTrip(t *testing.T) {
	want := store.Freeze{Frozen: true, Reason: "INC-77", Actor: "op@example", Since: time.Date(2026, 4, 2, 8, 0, 0, 1, time.FixedZone("UTC+2", 2*3600))}
	b, err := EncodeFreeze(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFreeze(b)
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("DecodeFreeze(EncodeFreeze(f)) = %+v, %v; want %+v", got, err, want)
	}
	for _, v := range []string{`{"v":2,"freeze":{"frozen":false}}`, `{"freeze":{}}`, `not json`, ""} {
		if _, err := DecodeFreeze([]byte(v)); err == nil || !strings.Contains(err.Error(), "freeze record") {
			t.Errorf("DecodeFreeze(%q) = %v, want a freeze record error", v, err)
		}
	}
}
