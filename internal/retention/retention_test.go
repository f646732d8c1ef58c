package retention_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"nodehotfix/internal/retention"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/internal/store/storetest"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// put stores, for each age, one report and one served record of a VM of
// its own, the report a second after the served record.
func put(t *testing.T, s store.Store, ages ...time.Duration) {
	t.Helper()
	for i, age := range ages {
		vm := fmt.Sprintf("vm-%02d", i)
		sv := storetest.Served("202604.01.2", vm, "boot-1")
		sv.Time = now.Add(-age)
		if err := s.PutServed(t.Context(), []store.Served{sv}); err != nil {
			t.Fatal(err)
		}
		r := storetest.Report(vm, "boot-1")
		r.Time = sv.Time.Add(time.Second)
		storetest.MustPutReports(t, s, r)
	}
}

func stored(t *testing.T, s store.Store) (reports, served []string) {
	t.Helper()
	rs, err := s.Reports(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		reports = append(reports, r.VMID)
	}
	for _, sv := range storetest.MustServed(t, s) {
		served = append(served, sv.VMID)
	}
	return reports, served
}

func TestPrune(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name      string
		cfg       retention.Config
		ages      []time.Duration
		want      []string // the VMs whose report and served record stay
		overLimit bool
		// wantServed, when set, are the VMs whose served record stays:
		// served records go up to a minute past the reports' cutoff.
		wantServed []string
	}{
		{"none", retention.Config{}, []time.Duration{1000 * h, h}, []string{"vm-00", "vm-01"}, false, nil},
		{"age", retention.Config{MaxAge: 72 * h}, []time.Duration{100 * h, 73 * h, 71 * h, h}, []string{"vm-02", "vm-03"}, false, nil},
		{"count", retention.Config{MaxRecords: 2}, []time.Duration{100 * h, 90 * h, 80 * h, h}, []string{"vm-02", "vm-03"}, false, []string{"vm-03"}},
		{"protected", retention.Config{MaxRecords: 1}, []time.Duration{100 * h, 47 * h, 2 * h, h}, []string{"vm-01", "vm-02", "vm-03"}, true, nil},
		{"protected-edge", retention.Config{MaxRecords: 1, MaxAge: 48 * h}, []time.Duration{49 * h, 48*h - time.Minute, h}, []string{"vm-01", "vm-02"}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := memstore.New()
			defer s.Close()
			put(t, s, tt.ages...)
			cfg := tt.cfg
			cfg.Now = func() time.Time { return now }
			var got []retention.Result
			cfg.OnPrune = func(r retention.Result) { got = append(got, r) }
			res, err := retention.New(s, cfg).Prune(t.Context())
			if err != nil {
				t.Fatalf("Prune = %v", err)
			}
			reports, served := stored(t, s)
			wantServed := tt.want
			if tt.wantServed != nil {
				wantServed = tt.wantServed
			}
			if !slices.Equal(reports, tt.want) || !slices.Equal(served, wantServed) {
				t.Errorf("Prune left reports of %v, served records of %v; want %v, %v", reports, served, tt.want, wantServed)
			}
			if res.Reports.OverKeep != tt.overLimit {
				t.Errorf("Prune reports' OverKeep = %v, want %v", res.Reports.OverKeep, tt.overLimit)
			}
			if len(got) != 1 || got[0].Reports.Stored != len(tt.want) {
				t.Errorf("OnPrune got %+v, want one result of %d reports stored", got, len(tt.want))
			}
		})
	}
}

// TestPruneServedFollowsReports: a served record whose report a count
// prune deleted goes too, though served records are within their bound.
func TestPruneServedFollowsReports(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	put(t, s, 100*time.Hour, 90*time.Hour, time.Hour)
	for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour} {
		r := storetest.Report(fmt.Sprintf("vm-x%d", i), "boot-1")
		r.Time = now.Add(-age)
		storetest.MustPutReports(t, s, r)
	}
	res, err := retention.New(s, retention.Config{MaxRecords: 3, Now: func() time.Time { return now }}).Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	reports, served := stored(t, s)
	if want := []string{"vm-02", "vm-x0", "vm-x1"}; !slices.Equal(reports, want) {
		t.Errorf("after Prune: reports %v, want %v", reports, want)
	}
	if want := []string{"vm-02"}; !slices.Equal(served, want) {
		t.Errorf("after Prune: served records %v, want %v", served, want)
	}
	if res.Served.Deleted != 2 {
		t.Errorf("Prune deleted %d served records, want 2", res.Served.Deleted)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []retention.Config{
		{MaxAge: 24 * time.Hour},
		{MaxAge: -time.Hour},
		{MaxRecords: -1},
		{MaxRecords: retention.MaxRecordsLimit + 1},
		{Interval: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	for _, c := range []retention.Config{{}, {MaxAge: retention.Protected, MaxRecords: retention.MaxRecordsLimit}, {MaxAge: retention.DefaultMaxAge, MaxRecords: retention.DefaultMaxRecords}} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", c, err)
		}
	}
}

// TestPruneSeatSets: a release's seats of an earlier evidence window go
// once its current window opened before the protected history; its
// current seats, those of a window opened within it, and those of a set no
// stored release names stay.
func TestPruneSeatSets(t *testing.T) {
	s := memstore.New()
	at := func(v string, since time.Time) rollout.Release {
		r := storetest.Release(v)
		r.Rollout.EvidenceSince = since
		storetest.MustPut(t, s, r, 0)
		return r
	}
	long := at("202604.01.1", now.Add(-retention.Protected-time.Hour)) // resumed three days ago
	recent := at("202604.01.2", now.Add(-time.Hour))                   // resumed an hour ago
	fresh := at("202604.01.3", time.Time{})                            // never resumed
	sets := []string{
		"202604.01.1", "202604.01.1+1", long.SeatSet(), // two earlier windows, then the current one
		"202604.01.2", recent.SeatSet(),
		fresh.SeatSet(),
		"202699.01.1", // no such release
	}
	for _, set := range sets {
		storetest.MustTakeSeat(t, s, set, "vm-1", 1)
	}
	res, err := retention.New(s, retention.Config{MaxRecords: 10, Now: func() time.Time { return now }}).Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Seats.Deleted != 2 || res.Seats.Stored != 5 {
		t.Errorf("seat sets pruned %+v, want 2 deleted, 5 kept", res.Seats)
	}
	for _, set := range sets {
		gone := set == "202604.01.1" || set == "202604.01.1+1"
		if held := len(storetest.MustSeats(t, s, set)) > 0; held == gone {
			t.Errorf("seat set %s held %v after the prune, want %v", set, held, !gone)
		}
	}
}

// unreadableRelease is a store one of whose release records nobody can
// read: Releases returns the others with a *store.UnreadableError.
type unreadableRelease struct{ *memstore.Store }

func (s unreadableRelease) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	rels, rev, err := s.Store.Releases(ctx)
	if err != nil {
		return rels, rev, err
	}
	return rels, rev, &store.UnreadableError{Kind: "release", Count: 1, First: errors.New("bit flip"), Keys: []string{"202604.01.9"}}
}

// TestPruneSeatSetsPastAnUnreadableRelease: a release record nobody can
// read does not stop the prune; its seat sets stay (nothing says they
// are done with), the readable releases' earlier windows go.
func TestPruneSeatSetsPastAnUnreadableRelease(t *testing.T) {
	s := unreadableRelease{memstore.New()}
	r := storetest.Release("202604.01.1")
	r.Rollout.EvidenceSince = now.Add(-retention.Protected - time.Hour)
	storetest.MustPut(t, s, r, 0)
	for _, set := range []string{"202604.01.1", r.SeatSet(), "202604.01.9", "202604.01.9+1"} {
		storetest.MustTakeSeat(t, s, set, "vm-1", 1)
	}
	res, err := retention.New(s, retention.Config{MaxRecords: 10, Now: func() time.Time { return now }}).Prune(t.Context())
	if err != nil || res.Seats.Deleted != 1 || res.Seats.Stored != 3 {
		t.Fatalf("Prune = %+v, %v; want the readable release's earlier set deleted, 3 sets kept", res.Seats, err)
	}
	if len(storetest.MustSeats(t, s, "202604.01.9+1")) == 0 {
		t.Error("the unreadable release's seats were pruned")
	}
}

// resumingStore is a memstore whose Releases lets an operator resume a
// release (a new evidence window, and a first seat taken in it) once it
// has read the list, as a resume through any replica's admin API between
// a prune's Releases and its PruneSeats does.
type resumingStore struct {
	*memstore.Store
	during func()
}

func (s *resumingStore) Releases(ctx context.Context) ([]rollout.Release, int64, error) {
	rels, rev, err := s.Store.Releases(ctx)
	if s.during != nil {
		s.during()
		s.during = nil
	}
	return rels, rev, err
}

// TestPruneSeatSetsKeepsAWindowOpenedMeanwhile: a release resumed three
// days ago is resumed again while the prune runs: the set the resume just
// opened is its current one, and stays, with the earlier one dropped (a
// hostile review found the new set deleted: everything but the set read
// as current was).
func TestPruneSeatSetsKeepsAWindowOpenedMeanwhile(t *testing.T) {
	s := &resumingStore{Store: memstore.New()}
	r := storetest.Release("202604.01.1")
	r.Rollout.EvidenceSince = now.Add(-72 * time.Hour)
	rev := storetest.MustPut(t, s, r, 0)
	storetest.MustTakeSeat(t, s, "202604.01.1", "first-holder", 2)
	storetest.MustTakeSeat(t, s, r.SeatSet(), "old-holder", 2)
	resumed := r
	resumed.Rollout.EvidenceSince = now
	s.during = func() {
		storetest.MustPut(t, s.Store, resumed, rev)
		storetest.MustTakeSeat(t, s.Store, resumed.SeatSet(), "new-holder", 2)
	}
	res, err := retention.New(s, retention.Config{MaxRecords: 10, Now: func() time.Time { return now }}).Prune(t.Context())
	if err != nil || res.Seats.Deleted != 1 {
		t.Fatalf("Prune = %+v, %v; want the release's own set, from before its windows, deleted", res.Seats, err)
	}
	for set, want := range map[string]int{"202604.01.1": 0, r.SeatSet(): 1, resumed.SeatSet(): 1} {
		if got := storetest.MustSeats(t, s, set); len(got) != want {
			t.Errorf("seat set %s holds %v after the prune, want %d", set, got, want)
		}
	}
}

// TestPruneSeatSetsOfAReleaseWithoutAWindow: a release with no evidence
// window had no resume, so a windowed set of it can only be one its stored
// record lost (a record restored from a backup): kept, never dropped for
// a window the record does not know.
func TestPruneSeatSetsOfAReleaseWithoutAWindow(t *testing.T) {
	s := memstore.New()
	r := storetest.Release("202604.01.1")
	storetest.MustPut(t, s, r, 0)
	windowed := r
	windowed.Rollout.EvidenceSince = now.Add(-time.Hour)
	storetest.MustTakeSeat(t, s, windowed.SeatSet(), "vm-1", 1)
	if _, err := retention.New(s, retention.Config{MaxRecords: 10, Now: func() time.Time { return now }}).Prune(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := storetest.MustSeats(t, s, windowed.SeatSet()); len(got) != 1 {
		t.Errorf("set %s of a release with no window: %v, want its holder kept", windowed.SeatSet(), got)
	}
}

// failingReleases fails Releases as a timed-out etcd would.
type failingReleases struct{ *memstore.Store }

func (failingReleases) Releases(context.Context) ([]rollout.Release, int64, error) {
	return nil, 0, context.DeadlineExceeded
}

// TestPruneWhenTheReleasesCannotBeRead: the releases are read only for the
// seat sets, so a failure to read them skips those and leaves the prune of
// the reports and served records whole, published to OnPrune (the
// metrics) as ever (a hostile review found the whole run failed, its
// deletions never counted).
func TestPruneWhenTheReleasesCannotBeRead(t *testing.T) {
	s := failingReleases{memstore.New()}
	put(t, s, time.Hour, 100*time.Hour, 200*time.Hour)
	var got []retention.Result
	res, err := retention.New(s, retention.Config{MaxAge: 72 * time.Hour, Now: func() time.Time { return now }, OnPrune: func(r retention.Result) { got = append(got, r) }}).Prune(t.Context())
	if err != nil || res.Reports.Deleted != 2 || len(got) != 1 || got[0].Reports.Deleted != 2 {
		t.Errorf("Prune = %+v, %v; OnPrune got %+v; want the 2 old reports deleted and published", res, err, got)
	}
}
