package boltstore

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/storecodec"
	"nodehotfix/internal/store/storetest"
)

// TestListsDecodeOnlyWhatChanged: Reports decodes only the values that
// differ from what its last list decoded and reuses the rest, and still
// lists exactly what is stored: new, replaced and pruned keys, and a key
// nobody can decode (reported every time until it is rewritten).
func TestListsDecodeOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(filepath.Join(t.TempDir(), "lpsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var decodes int
	s.reports.decode = func(b []byte) (store.Report, error) {
		decodes++ // lists of one bucket take turns
		return storecodec.DecodeReport(b)
	}
	want := map[string]int{}
	check := func(name string, bad, wantDecodes int) {
		t.Helper()
		decodes = 0
		rs, err := s.Reports(ctx)
		var ue *store.UnreadableError
		switch {
		case bad == 0 && err != nil:
			t.Fatalf("%s: Reports = %v", name, err)
		case bad > 0 && (!errors.As(err, &ue) || ue.Count != bad):
			t.Fatalf("%s: Reports error %v, want %d unreadable", name, err, bad)
		}
		got := map[string]int{}
		for _, r := range rs {
			got[r.VMID+"/"+r.Boot] = r.ExitCode
		}
		if !maps.Equal(got, want) || !slices.IsSortedFunc(rs, store.CompareReports) {
			t.Fatalf("%s: listed %v, want %v, in (VMID, Boot) order", name, got, want)
		}
		if wantDecodes >= 0 && decodes != wantDecodes {
			t.Errorf("%s: decoded %d values, want %d", name, decodes, wantDecodes)
		}
	}
	put := func(vm string, exit int) {
		t.Helper()
		r := storetest.Report(vm, "b")
		r.ExitCode = exit
		storetest.MustPutReports(t, s, r)
		want[vm+"/b"] = exit
	}
	for i := range 3 {
		put(fmt.Sprintf("vm-%d", i), 0)
	}
	check("first", 0, 3)
	put("vm-3", 0) // new
	put("vm-1", 7) // replaced
	raw := func(key, value string) {
		t.Helper()
		if err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(reportsBucket))
			if value == "" {
				return b.Delete([]byte(key))
			}
			return b.Put([]byte(key), []byte(value))
		}); err != nil {
			t.Fatal(err)
		}
	}
	raw("vm-2/b", "") // deleted, as a prune does
	delete(want, "vm-2/b")
	raw("vm-9/b", "{not json")
	check("changed", 1, 3)
	check("unchanged, the bad key still reported", 1, 0)
	put("vm-9", 0)
	check("rewritten", 0, 1)
}

// BenchmarkReportsList: listing 20,000 stored reports with nothing kept
// (as every list did before lists kept what they decoded) against a list
// after 1 % of them changed.
//
//	go test -run '^$' -bench BenchmarkReportsList -benchtime 10x ./internal/store/boltstore/
func BenchmarkReportsList(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "lpsd.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	storetest.BenchmarkReportsList(b, s, func() { s.reports.entries.Reset() }) // no list runs
}

// TestUnreadableSeatIsStillASeat: a seat whose time is not 8 bytes is
// returned with no time beside an UnreadableError, never refused whole:
// its holder is its key.
func TestUnreadableSeatIsStillASeat(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(filepath.Join(t.TempDir(), "lpsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const v = "202604.01.1"
	for _, vm := range []string{"vm-a", "vm-b"} {
		if _, err := s.TakeSeat(ctx, v, store.Seat{VMID: vm, SubscriptionID: "s"}, store.SeatLimit{Seats: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(seatsBucket)).Put([]byte(v+"/vm-a"), []byte("garbage"))
	}); err != nil {
		t.Fatal(err)
	}
	seats, err := s.Seats(ctx, v)
	var ue *store.UnreadableError
	if !errors.As(err, &ue) || ue.Kind != "seat" || ue.Count != 1 || len(seats) != 2 || seats[0].VMID != "vm-a" || !seats[0].Since.IsZero() {
		t.Errorf("Seats = %+v, %v; want both seats, vm-a's without a time, and one unreadable", seats, err)
	}
}
