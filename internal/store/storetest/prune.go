package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"nodehotfix/internal/store"
)

// pruneTests are the suite's tests of store.Pruner.
var pruneTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"prune", testPrune},
	{"prune-pages", testPrunePages},
	{"prune-kinds-apart", testPruneKindsApart},
	{"prune-closed", testPruneClosed},
	{"prune-seats", testPruneSeats},
}

// pruneT0 is when the first of a prune test's records was stored.
var pruneT0 = time.Date(2026, 4, 2, 10, 0, 0, 0, time.UTC)

func pruner(t *testing.T, s store.Store) store.Pruner {
	t.Helper()
	p, ok := s.(store.Pruner)
	if !ok {
		t.Skip("no store.Pruner")
	}
	return p
}

// putAged stores n reports and n served records, the i-th of each at
// pruneT0 plus i minutes, on VMs vm-0000 on.
func putAged(t *testing.T, s store.Store, n int) {
	t.Helper()
	var rs []store.Report
	var ss []store.Served
	for i := range n {
		at := pruneT0.Add(time.Duration(i) * time.Minute)
		r := Report(fmt.Sprintf("vm-%04d", i), "boot-1")
		r.Time = at
		rs = append(rs, r)
		sv := Served("202604.01.2", r.VMID, r.Boot)
		sv.Time = at
		ss = append(ss, sv)
	}
	for chunk := range slices.Chunk(rs, 500) {
		MustPutReports(t, s, chunk...)
	}
	for chunk := range slices.Chunk(ss, 500) {
		if err := s.PutServed(t.Context(), chunk); err != nil {
			t.Fatalf("PutServed(%d) = %v", len(chunk), err)
		}
	}
}

// vms returns the VMs of s's reports and of its served records.
func vms(t *testing.T, s store.Store) (reports, served []string) {
	t.Helper()
	rs, err := s.Reports(t.Context())
	if err != nil {
		t.Fatalf("Reports = %v", err)
	}
	for _, r := range rs {
		reports = append(reports, r.VMID)
	}
	for _, sv := range MustServed(t, s) {
		served = append(served, sv.VMID)
	}
	return reports, served
}

func vmRange(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("vm-%04d", i))
	}
	return out
}

// testPrune: by age, by count, and the floor that protects recent
// records even past the count (saying so), for both kinds alike.
func testPrune(t *testing.T, s store.Store) {
	p := pruner(t, s)
	putAged(t, s, 10)
	steps := []struct {
		name    string
		prune   store.Prune
		want    store.Pruned
		wantVMs []string
	}{
		{"nothing", store.Prune{}, store.Pruned{Stored: 10}, vmRange(0, 10)},
		{"age", store.Prune{Before: pruneT0.Add(3 * time.Minute)},
			store.Pruned{Deleted: 3, Stored: 7, Cutoff: pruneT0.Add(3 * time.Minute)}, vmRange(3, 10)},
		{"count", store.Prune{Keep: 5},
			store.Pruned{Deleted: 2, Stored: 5, Cutoff: pruneT0.Add(5 * time.Minute)}, vmRange(5, 10)},
		{"count-kept", store.Prune{Keep: 5, Before: pruneT0.Add(4 * time.Minute)},
			store.Pruned{Stored: 5, Cutoff: pruneT0.Add(4 * time.Minute)}, vmRange(5, 10)},
		{"floor", store.Prune{Keep: 1, Floor: pruneT0.Add(7 * time.Minute)},
			store.Pruned{Deleted: 2, Stored: 3, Cutoff: pruneT0.Add(7 * time.Minute), OverKeep: true}, vmRange(7, 10)},
		{"floor-age", store.Prune{Before: pruneT0.Add(time.Hour), Floor: pruneT0.Add(8 * time.Minute)},
			store.Pruned{Deleted: 1, Stored: 2, Cutoff: pruneT0.Add(8 * time.Minute)}, vmRange(8, 10)},
	}
	for _, st := range steps {
		for _, kind := range []string{"reports", "served"} {
			prune := p.PruneReports
			if kind == "served" {
				prune = p.PruneServed
			}
			got, err := prune(t.Context(), st.prune)
			if err != nil {
				t.Fatalf("%s: Prune %s(%+v) = %v", st.name, kind, st.prune, err)
			}
			if !got.Cutoff.Equal(st.want.Cutoff) || got.Deleted != st.want.Deleted || got.Stored != st.want.Stored || got.OverKeep != st.want.OverKeep {
				t.Errorf("%s: Prune %s(%+v) = %+v, want %+v", st.name, kind, st.prune, got, st.want)
			}
		}
		reports, served := vms(t, s)
		if !slices.Equal(reports, st.wantVMs) || !slices.Equal(served, st.wantVMs) {
			t.Errorf("%s: after the prune, reports of %v and served records of %v, want %v", st.name, reports, served, st.wantVMs)
		}
	}
}

// testPrunePages: a prune over more records than a backend's page or
// transaction deletes exactly what it selects.
func testPrunePages(t *testing.T, s store.Store) {
	p := pruner(t, s)
	const n = 2100
	putAged(t, s, n)
	got, err := p.PruneReports(t.Context(), store.Prune{Keep: 150})
	if err != nil {
		t.Fatalf("PruneReports = %v", err)
	}
	if got.Deleted != n-150 || got.Stored != 150 {
		t.Errorf("PruneReports(keep 150 of %d) = %+v, want %d deleted, 150 stored", n, got, n-150)
	}
	got, err = p.PruneServed(t.Context(), store.Prune{Before: pruneT0.Add(1999 * time.Minute)})
	if err != nil {
		t.Fatalf("PruneServed = %v", err)
	}
	if got.Deleted != 1999 || got.Stored != n-1999 {
		t.Errorf("PruneServed(before minute 1999 of %d) = %+v, want 1999 deleted, %d stored", n, got, n-1999)
	}
	reports, served := vms(t, s)
	if want := vmRange(n-150, n); !slices.Equal(reports, want) {
		t.Errorf("reports after the prune: %d from %v, want %d from %s", len(reports), reports[:min(1, len(reports))], len(want), want[0])
	}
	if want := vmRange(1999, n); !slices.Equal(served, want) {
		t.Errorf("served records after the prune: %d, want %d from %s", len(served), len(want), want[0])
	}
}

// testPruneKindsApart: pruning one kind leaves the other, and a report
// put again after an old one of its key is kept for its new time.
func testPruneKindsApart(t *testing.T, s store.Store) {
	p := pruner(t, s)
	putAged(t, s, 4)
	again := Report("vm-0000", "boot-1")
	again.Time = pruneT0.Add(time.Hour)
	MustPutReports(t, s, again)
	got, err := p.PruneReports(t.Context(), store.Prune{Before: pruneT0.Add(30 * time.Minute)})
	if err != nil {
		t.Fatalf("PruneReports = %v", err)
	}
	if got.Deleted != 3 || got.Stored != 1 {
		t.Errorf("PruneReports = %+v, want 3 deleted, 1 stored", got)
	}
	reports, served := vms(t, s)
	if want := []string{"vm-0000"}; !slices.Equal(reports, want) {
		t.Errorf("reports after the prune: %v, want %v", reports, want)
	}
	if want := vmRange(0, 4); !slices.Equal(served, want) {
		t.Errorf("served records after pruning reports: %v, want %v", served, want)
	}
}

// testPruneClosed: ErrClosed after Close.
func testPruneClosed(t *testing.T, s store.Store) {
	p := pruner(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	for _, prune := range []func() (store.Pruned, error){
		func() (store.Pruned, error) { return p.PruneReports(t.Context(), store.Prune{Keep: 1}) },
		func() (store.Pruned, error) { return p.PruneServed(t.Context(), store.Prune{Before: pruneT0}) },
		func() (store.Pruned, error) { return p.PruneSeats(t.Context(), func(string) bool { return true }) },
	} {
		if _, err := prune(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Prune after Close = %v, want ErrClosed", err)
		}
	}
}

// testPruneSeats: a dropped seat set goes whole, its holders, its count
// and its subscriptions' counts, so the set starts afresh; the sets kept,
// including one whose name the dropped one's is a prefix of and the reverse
// (a release's set and its resumed window's), are untouched.
func testPruneSeats(t *testing.T, s store.Store) {
	p := pruner(t, s)
	const v = "202604.01.1"
	resumed := v + "+1775124000000000000"
	other := "202604.01.2"
	limit := store.SeatLimit{Seats: 2, PerSubscription: 1}
	take := func(set, vm, sub string) (bool, error) {
		return s.TakeSeat(t.Context(), set, store.Seat{VMID: vm, Since: seatTime, SubscriptionID: sub}, limit)
	}
	for _, set := range []string{v, resumed, other} {
		for i, sub := range []string{"sub-a", "sub-b"} {
			if held, err := take(set, fmt.Sprintf("vm-%d", i), sub); err != nil || !held {
				t.Fatalf("TakeSeat(%s, vm-%d) = %v, %v", set, i, held, err)
			}
		}
	}
	var asked []string
	res, err := p.PruneSeats(t.Context(), func(set string) bool {
		asked = append(asked, set)
		return set == v
	})
	if err != nil || res.Deleted != 1 || res.Stored != 2 {
		t.Fatalf("PruneSeats = %+v, %v; want 1 set deleted, 2 kept", res, err)
	}
	slices.Sort(asked)
	if want := []string{v, resumed, other}; !slices.Equal(asked, slices.Sorted(slices.Values(want))) {
		t.Errorf("PruneSeats asked about %q, want each set once: %q", asked, want)
	}
	if got := MustSeats(t, s, v); len(got) != 0 {
		t.Errorf("Seats(%s) after its prune = %v, want none", v, got)
	}
	for _, set := range []string{resumed, other} {
		if got := MustSeats(t, s, set); !slices.Equal(got, []string{"vm-0", "vm-1"}) {
			t.Errorf("Seats(%s) = %v, want its two holders kept", set, got)
		}
	}
	// Afresh: the count and the subscriptions' counts went too, so two
	// new vmIds of the same subscriptions take the set's two seats.
	for i, sub := range []string{"sub-a", "sub-b"} {
		if held, err := take(v, fmt.Sprintf("new-%d", i), sub); err != nil || !held {
			t.Errorf("TakeSeat(%s, new-%d of %s) after the prune = %v, %v; want a seat", v, i, sub, held, err)
		}
	}
	if held, err := take(v, "vm-0", "sub-c"); held || err != nil {
		t.Errorf("TakeSeat of a third vmId = %v, %v; want the set full again", held, err)
	}
	if res, err := p.PruneSeats(t.Context(), func(string) bool { return false }); err != nil || res.Deleted != 0 || res.Stored != 3 {
		t.Errorf("PruneSeats dropping nothing = %+v, %v; want 3 kept", res, err)
	}
}
