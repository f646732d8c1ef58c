package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// logTests are the transparency log's part of the suite.
var logTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"log-append", testLogAppend},
	{"log-failed-write-appends-nothing", testLogFailedWrite},
	{"log-concurrent-appenders", testLogConcurrent},
	{"log-bounds", testLogBounds},
	{"log-key-sets", testKeySets},
	{"log-key-sets-concurrent", testKeySetsConcurrent},
	{"log-checkpoint", testCheckpoint},
	{"log-checkpoint-concurrent", testCheckpointConcurrent},
	{"log-watch", testLogWatch},
	{"log-close", testLogClose},
}

// Record returns a log record for version, as an envelope would be.
func Record(version string) []byte {
	return []byte(`{"payloadType":"application/vnd.nodehotfix.release.v1+json","payload":"` + version + `","signatures":[]}`)
}

// MustPutLogged writes r with PutRelease, appending rec, and fails the
// test on error.
func MustPutLogged(t testing.TB, s store.Store, r rollout.Release, ifRev int64, rec []byte) int64 {
	t.Helper()
	rev, err := s.PutRelease(t.Context(), r, ifRev, Entry("publish", r.Version), rec)
	if err != nil {
		t.Fatalf("PutRelease(%s, %d, %d-byte record) = %v", r.Version, ifRev, len(rec), err)
	}
	return rev
}

// KeySet returns a key-set record of version whose envelope names it.
func KeySet(version int64) store.KeySetRecord {
	return store.KeySetRecord{Version: version, Envelope: []byte(fmt.Sprintf(`{"payloadType":"application/vnd.nodehotfix.keyset.v1+json", "payload":"v%d"}`, version))}
}

// CheckLog fails the test unless s's log holds exactly want, in order,
// and its stored hashes agree with the records (ReadLog).
func CheckLog(t testing.TB, s store.Log, want [][]byte) {
	t.Helper()
	got := ReadLog(t, s)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log records (-want +got):\n%s", diff)
	}
}

// CheckLogOnce fails the test unless s's log holds every record of want
// exactly once, in any order, and nothing else, and its stored hashes
// agree with the records (ReadLog): what concurrent appenders must leave.
func CheckLogOnce(t testing.TB, s store.Log, want [][]byte) {
	t.Helper()
	got := ReadLog(t, s)
	sorted := func(rs [][]byte) [][]byte { return slices.SortedFunc(slices.Values(rs), bytes.Compare) }
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("log records, in any order (-want +got):\n%s", diff)
	}
}

// ReadLog returns every record of s's log, read in pages of
// store.MaxLogRecords, after checking, for every size up to the log's,
// that the tree hash from the stored hashes (tlog.TreeHash with
// store.HashReader) equals the RFC 6962 hash recomputed from the records
// alone, and that a proof from the stored hashes shows each record in the
// whole tree.
func ReadLog(t testing.TB, s store.Log) [][]byte {
	t.Helper()
	ctx := t.Context()
	n, err := s.LogSize(ctx)
	if err != nil {
		t.Fatalf("LogSize = %v", err)
	}
	var records [][]byte
	for start := int64(0); start < n; start += store.MaxLogRecords {
		end := min(start+store.MaxLogRecords, n)
		page, err := s.LogRecords(ctx, start, end)
		if err != nil {
			t.Fatalf("LogRecords(%d, %d) = %v", start, end, err)
		}
		if int64(len(page)) != end-start {
			t.Fatalf("LogRecords(%d, %d) = %d records", start, end, len(page))
		}
		records = append(records, page...)
	}
	leaves := make([]tlog.Hash, len(records))
	for i, r := range records {
		leaves[i] = tlog.RecordHash(r)
	}
	hr := store.HashReader(ctx, s)
	for size := int64(0); size <= n; size++ {
		got, err := tlog.TreeHash(size, hr)
		if err != nil {
			t.Fatalf("TreeHash(%d) from the stored hashes = %v", size, err)
		}
		if want := treeHash(leaves[:size]); got != want {
			t.Fatalf("TreeHash(%d) from the stored hashes = %v, recomputed from the records %v", size, got, want)
		}
	}
	root := treeHash(leaves)
	for i := range n {
		p, err := tlog.ProveRecord(n, i, hr)
		if err != nil {
			t.Fatalf("ProveRecord(%d, %d) = %v", n, i, err)
		}
		if err := tlog.CheckRecord(p, n, root, i, leaves[i]); err != nil {
			t.Fatalf("CheckRecord(%d of %d) = %v", i, n, err)
		}
	}
	return records
}

// treeHash is RFC 6962's Merkle tree hash of leaves, computed without the
// stored-hash layout the backends use.
func treeHash(leaves []tlog.Hash) tlog.Hash {
	switch len(leaves) {
	case 0:
		h, _ := tlog.TreeHash(0, nil) // the empty tree reads nothing
		return h
	case 1:
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	return tlog.NodeHash(treeHash(leaves[:k]), treeHash(leaves[k:]))
}

func testLogAppend(t *testing.T, s store.Store) {
	ctx := t.Context()
	CheckLog(t, s, nil)
	var want [][]byte
	for i, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3", "202604.02.1", "202604.02.2"} {
		if i == 2 {
			MustPut(t, s, Release(v), 0) // nil: nothing appended
			continue
		}
		MustPutLogged(t, s, Release(v), 0, Record(v))
		want = append(want, Record(v))
	}
	// A revocation is a PutRelease of an existing release.
	r, rev, err := s.Release(ctx, "202604.01.1")
	if err != nil {
		t.Fatal(err)
	}
	r.Revoked = true
	revocation := []byte(`{"type":"nodehotfix-revocation","version":"202604.01.1","time":"2026-04-03T00:00:00Z"}`)
	MustPutLogged(t, s, r, rev, revocation)
	want = append(want, revocation)
	if err := s.PutKeySet(ctx, KeySet(2), Entry("keyset", "2")); err != nil {
		t.Fatalf("PutKeySet(2) = %v", err)
	}
	want = append(want, KeySet(2).Envelope)
	MustPutConfig(t, s, Config("localDNS", 1), 0) // configurations are not logged
	CheckLog(t, s, want)
	if got := len(allAudit(t, s)); got != 8 {
		t.Errorf("audit has %d entries after 6 release writes, a key set and a configuration, want 8", got)
	}
}

func testLogFailedWrite(t *testing.T, s store.Store) {
	ctx := t.Context()
	v := "202604.01.1"
	rev := MustPutLogged(t, s, Release(v), 0, Record(v))
	if _, err := s.PutRelease(ctx, Release(v), 0, Entry("publish", v), Record("again")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutRelease(existing, 0) = %v, want ErrConflict", err)
	}
	if _, err := s.PutRelease(ctx, Release(v), rev+100, Entry("pause", v), Record("stale")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutRelease(stale revision) = %v, want ErrConflict", err)
	}
	bad := Release("202604.01.2")
	bad.Base = "202605.01"
	if _, err := s.PutRelease(ctx, bad, 0, Entry("publish", bad.Version), Record("invalid")); err == nil {
		t.Error("PutRelease(invalid release) = nil error")
	}
	for _, rec := range [][]byte{{}, bytes.Repeat([]byte("x"), store.MaxRecordBytes+1)} {
		if _, err := s.PutRelease(ctx, Release("202604.01.3"), 0, Entry("publish", "202604.01.3"), rec); !errors.Is(err, store.ErrInvalidRecord) {
			t.Errorf("PutRelease(%d-byte record) = %v, want ErrInvalidRecord", len(rec), err)
		}
	}
	if _, _, err := s.Release(ctx, "202604.01.3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Release after a refused record = %v, want ErrNotFound: nothing of the write stored", err)
	}
	if err := s.PutKeySet(ctx, KeySet(1), Entry("keyset", "1")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutKeySet(ctx, KeySet(1), Entry("keyset", "1")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutKeySet(1 again) = %v, want ErrConflict", err)
	}
	CheckLog(t, s, [][]byte{Record(v), KeySet(1).Envelope})
	if got := len(allAudit(t, s)); got != 2 {
		t.Errorf("audit has %d entries after two writes and six refused, want 2", got)
	}
	max := MustPutLogged(t, s, Release("202604.01.4"), 0, bytes.Repeat([]byte("y"), store.MaxRecordBytes))
	if max <= rev {
		t.Errorf("revision %d after a write at %d", max, rev)
	}
}

func testLogConcurrent(t *testing.T, s store.Store) {
	const writers, each = 6, 3
	var (
		mu   sync.Mutex
		want [][]byte
		wg   sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v := fmt.Sprintf("202604.%02d.%d", w+1, i+1)
				rec := Record(v)
				if _, err := s.PutRelease(t.Context(), Release(v), 0, Entry("publish", v), rec); err != nil {
					t.Errorf("PutRelease(%s) = %v", v, err)
					continue
				}
				mu.Lock()
				want = append(want, rec)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	CheckLogOnce(t, s, want)
}

func testLogBounds(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
		MustPutLogged(t, s, Release(v), 0, Record(v))
	}
	for _, r := range [][2]int64{{-1, 1}, {0, 4}, {2, 1}, {4, 4}, {0, store.MaxLogRecords + 1}} {
		if got, err := s.LogRecords(ctx, r[0], r[1]); !errors.Is(err, store.ErrLogRange) {
			t.Errorf("LogRecords(%d, %d) = %d records, %v; want ErrLogRange", r[0], r[1], len(got), err)
		}
	}
	if got, err := s.LogRecords(ctx, 3, 3); err != nil || len(got) != 0 {
		t.Errorf("LogRecords(3, 3) = %d records, %v; want none", len(got), err)
	}
	if got, err := s.LogRecords(ctx, 1, 3); err != nil || !bytes.Equal(got[0], Record("202604.01.2")) || len(got) != 2 {
		t.Errorf("LogRecords(1, 3) = %q, %v; want records 1 and 2", got, err)
	}
	stored := tlog.StoredHashCount(3)
	for _, idx := range [][]int64{{-1}, {stored}, {0, stored + 5}, make([]int64, store.MaxLogHashes+1)} {
		if got, err := s.LogHashes(ctx, idx); !errors.Is(err, store.ErrLogRange) {
			t.Errorf("LogHashes(%d indexes, first %d) = %d hashes, %v; want ErrLogRange", len(idx), idx[0], len(got), err)
		}
	}
	got, err := s.LogHashes(ctx, []int64{stored - 1, 0, 0})
	if err != nil || len(got) != 3 || got[1] != tlog.RecordHash(Record("202604.01.1")) || got[1] != got[2] {
		t.Errorf("LogHashes(last, 0, 0) = %v, %v; want 3 hashes, record 0's twice", got, err)
	}
	if got, err := s.LogHashes(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("LogHashes(none) = %v, %v; want none", got, err)
	}
}

func testKeySets(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got, err := s.KeySets(ctx); err != nil || len(got) != 0 {
		t.Errorf("KeySets(empty) = %v, %v; want none", got, err)
	}
	for _, k := range []store.KeySetRecord{{Version: 0, Envelope: []byte("x")}, {Version: -1, Envelope: []byte("x")}, {Version: 1}, {Version: 1, Envelope: []byte{}}, {Version: 1, Envelope: bytes.Repeat([]byte("x"), store.MaxRecordBytes+1)}} {
		if err := s.PutKeySet(ctx, k, Entry("keyset", "x")); !errors.Is(err, store.ErrInvalidRecord) {
			t.Errorf("PutKeySet(version %d, %d-byte envelope) = %v, want ErrInvalidRecord", k.Version, len(k.Envelope), err)
		}
	}
	// Any version when none is stored (an image baked with version 2).
	for _, v := range []int64{3, 4, 5} {
		if err := s.PutKeySet(ctx, KeySet(v), Entry("keyset", fmt.Sprint(v))); err != nil {
			t.Fatalf("PutKeySet(%d) = %v", v, err)
		}
	}
	for _, v := range []int64{1, 3, 5, 7} {
		if err := s.PutKeySet(ctx, KeySet(v), Entry("keyset", fmt.Sprint(v))); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutKeySet(%d) after 3..5 = %v, want ErrConflict", v, err)
		}
	}
	got, err := s.KeySets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.KeySetRecord{KeySet(3), KeySet(4), KeySet(5)}, got); diff != "" {
		t.Errorf("KeySets (-want +got):\n%s", diff)
	}
	CheckLog(t, s, [][]byte{KeySet(3).Envelope, KeySet(4).Envelope, KeySet(5).Envelope})
	audit := allAudit(t, s)
	if len(audit) != 3 || audit[2].Action != "keyset" || audit[2].Target != "5" {
		t.Errorf("audit after three key sets = %+v", audit)
	}
	// Ten key sets, so that key order must not be string order.
	for v := int64(6); v <= 12; v++ {
		if err := s.PutKeySet(ctx, KeySet(v), Entry("keyset", fmt.Sprint(v))); err != nil {
			t.Fatalf("PutKeySet(%d) = %v", v, err)
		}
	}
	got, err = s.KeySets(ctx)
	if err != nil || len(got) != 10 || got[9].Version != 12 || got[0].Version != 3 {
		t.Errorf("KeySets = %d records (first %v, last %v), %v; want 3 to 12", len(got), got[0].Version, got[len(got)-1].Version, err)
	}
}

func testKeySetsConcurrent(t *testing.T, s store.Store) {
	if err := s.PutKeySet(t.Context(), KeySet(1), Entry("keyset", "1")); err != nil {
		t.Fatal(err)
	}
	const n = 6
	errs := race(n, func(i int) error {
		k := KeySet(2)
		k.Envelope = fmt.Appendf(k.Envelope, " by %d", i)
		return s.PutKeySet(t.Context(), k, Entry("keyset", "2"))
	})
	won := checkOneWinner(t, errs)
	got, err := s.KeySets(t.Context())
	if err != nil || len(got) != 2 {
		t.Fatalf("KeySets = %d records, %v; want 2", len(got), err)
	}
	if !strings.HasSuffix(string(got[1].Envelope), fmt.Sprintf(" by %d", won)) {
		t.Errorf("version 2 stored is %q, want writer %d's", got[1].Envelope, won)
	}
	CheckLog(t, s, [][]byte{KeySet(1).Envelope, got[1].Envelope})
}

func testCheckpoint(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, _, err := s.Checkpoint(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Checkpoint(none) = %v, want ErrNotFound", err)
	}
	for _, v := range []string{"202604.01.1", "202604.01.2", "202604.01.3"} {
		MustPutLogged(t, s, Release(v), 0, Record(v))
	}
	for _, c := range []struct {
		size int64
		note []byte
	}{{-1, []byte("n")}, {4, []byte("n")}, {1, nil}, {1, []byte{}}, {1, bytes.Repeat([]byte("n"), store.MaxCheckpointBytes+1)}} {
		if err := s.PutCheckpoint(ctx, c.size, c.note); !errors.Is(err, store.ErrInvalidCheckpoint) {
			t.Errorf("PutCheckpoint(%d, %d-byte note) = %v, want ErrInvalidCheckpoint", c.size, len(c.note), err)
		}
	}
	steps := []struct {
		size     int64
		note     string
		wantSize int64
		wantNote string
	}{
		{0, "empty tree", 0, "empty tree"},
		{2, "two", 2, "two"},
		{1, "one: older", 2, "two"},
		{2, "two, cosigned", 2, "two, cosigned"},
		{3, "three", 3, "three"},
		{0, "empty again", 3, "three"},
	}
	for _, st := range steps {
		if err := s.PutCheckpoint(ctx, st.size, []byte(st.note)); err != nil {
			t.Fatalf("PutCheckpoint(%d, %q) = %v", st.size, st.note, err)
		}
		size, note, err := s.Checkpoint(ctx)
		if err != nil || size != st.wantSize || string(note) != st.wantNote {
			t.Errorf("after PutCheckpoint(%d, %q): Checkpoint = %d, %q, %v; want %d, %q", st.size, st.note, size, note, err, st.wantSize, st.wantNote)
		}
	}
	big := bytes.Repeat([]byte("n"), store.MaxCheckpointBytes)
	if err := s.PutCheckpoint(ctx, 3, big); err != nil {
		t.Errorf("PutCheckpoint(%d-byte note) = %v", len(big), err)
	}
}

func testCheckpointConcurrent(t *testing.T, s store.Store) {
	const n = 6
	for i := range n {
		v := fmt.Sprintf("202604.01.%d", i+1)
		MustPutLogged(t, s, Release(v), 0, Record(v))
	}
	errs := race(n, func(i int) error {
		return s.PutCheckpoint(t.Context(), int64(i+1), fmt.Appendf(nil, "checkpoint %d", i+1))
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("PutCheckpoint(%d) = %v", i+1, err)
		}
	}
	size, note, err := s.Checkpoint(t.Context())
	if err != nil || size != n || string(note) != fmt.Sprintf("checkpoint %d", n) {
		t.Errorf("Checkpoint after concurrent puts = %d, %q, %v; want the largest, %d", size, note, err, n)
	}
}

func testLogWatch(t *testing.T, s store.Store) {
	w := s.Watch(t.Context())
	if err := s.PutKeySet(t.Context(), KeySet(1), Entry("keyset", "1")); err != nil {
		t.Fatal(err)
	}
	WaitSignal(t, w)
	if err := s.PutCheckpoint(t.Context(), 1, []byte("one")); err != nil {
		t.Fatal(err)
	}
	WaitSignal(t, w)
}

func testLogClose(t *testing.T, s store.Store) {
	ctx := t.Context()
	MustPutLogged(t, s, Release("202604.01.1"), 0, Record("202604.01.1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{}
	_, checks["LogSize"] = s.LogSize(ctx)
	_, checks["LogHashes"] = s.LogHashes(ctx, []int64{0})
	_, checks["LogRecords"] = s.LogRecords(ctx, 0, 1)
	_, _, checks["Checkpoint"] = s.Checkpoint(ctx)
	checks["PutCheckpoint"] = s.PutCheckpoint(ctx, 1, []byte("n"))
	checks["PutKeySet"] = s.PutKeySet(ctx, KeySet(1), Entry("keyset", "1"))
	_, checks["KeySets"] = s.KeySets(ctx)
	_, checks["PutRelease"] = s.PutRelease(ctx, Release("202604.01.2"), 0, Entry("publish", "202604.01.2"), Record("202604.01.2"))
	for name, err := range checks {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}
