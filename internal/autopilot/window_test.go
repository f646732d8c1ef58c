package autopilot

import (
	"strings"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct{ in, want string }{
		{"Mon-Fri 09:00-17:00", "want DAYS HH:MM-HH:MM ZONE"},
		{"Mon-Fry 09:00-17:00 UTC", `day "Fry"`},
		{"Mon 9-17 UTC", `time "9": want HH:MM`},
		{"Mon 09:00 UTC", "want HH:MM-HH:MM"},
		{"Mon 09:00-24:00 UTC", `time "24:00"`},
		{"Mon 09:00-09:00 UTC", "is empty"},
		{"Mon 09:00-17:00 Mars/Olympus", `time zone "Mars/Olympus"`},
	} {
		if _, err := ParseWindow(bad.in); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseWindow(%q) = %v, want an error with %q", bad.in, err, bad.want)
		}
	}
	dublin, err := time.LoadLocation("Europe/Dublin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(loc *time.Location, day, hh, mm int) time.Time {
		// 2026-11-30 is a Monday.
		return time.Date(2026, 11, 30+day, hh, mm, 0, 0, loc)
	}
	for _, c := range []struct {
		window string
		t      time.Time
		open   bool
	}{
		{"", at(time.UTC, 5, 3, 0), true},
		{"Mon-Fri 09:00-17:00 Europe/Dublin", at(dublin, 0, 9, 0), true},
		{"Mon-Fri 09:00-17:00 Europe/Dublin", at(dublin, 0, 8, 59), false},
		{"Mon-Fri 09:00-17:00 Europe/Dublin", at(dublin, 4, 16, 59), true},
		{"Mon-Fri 09:00-17:00 Europe/Dublin", at(dublin, 4, 17, 0), false},
		{"Mon-Fri 09:00-17:00 Europe/Dublin", at(dublin, 5, 12, 0), false}, // Saturday
		// The zone decides: 16:30 UTC on a June Monday is 17:30 in Dublin.
		{"Mon-Fri 09:00-17:00 Europe/Dublin", time.Date(2026, 6, 1, 16, 30, 0, 0, time.UTC), false},
		{"Mon-Fri 09:00-17:00 Europe/Dublin", time.Date(2026, 12, 1, 16, 30, 0, 0, time.UTC), true},
		// Across midnight, and a day range that wraps.
		{"Fri-Mon 22:00-06:00 UTC", at(time.UTC, 4, 23, 0), true}, // Friday night
		{"Fri-Mon 22:00-06:00 UTC", at(time.UTC, 5, 5, 59), true}, // Saturday morning, after Friday
		{"Fri-Mon 22:00-06:00 UTC", at(time.UTC, 1, 5, 0), true},  // Tuesday morning, after Monday
		{"Fri-Mon 22:00-06:00 UTC", at(time.UTC, 1, 23, 0), false},
		{"Fri-Mon 22:00-06:00 UTC", at(time.UTC, 4, 5, 0), false}, // Friday morning, after Thursday
		{"Tue,Thu 10:00-11:00 UTC", at(time.UTC, 3, 10, 30), true},
		{"Tue,Thu 10:00-11:00 UTC", at(time.UTC, 2, 10, 30), false},
	} {
		w, err := ParseWindow(c.window)
		if err != nil {
			t.Fatalf("ParseWindow(%q): %v", c.window, err)
		}
		if got := w.Open(c.t); got != c.open {
			t.Errorf("%q.Open(%s) = %v, want %v", c.window, c.t.Format(time.RFC3339), got, c.open)
		}
	}
}

// TestAdvanceWindow: a healthy step due outside the window waits for it,
// and advances once it opens; a regressing one halts whatever the hour.
func TestAdvanceWindow(t *testing.T) {
	t.Parallel()
	w, err := ParseWindow("Mon-Fri 12:00-13:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.ap.cfg.AdvanceWindow = w
	f.report("", 500, 0, false)
	f.report(version, 30, 0, false)
	f.now = t0.Add(31 * time.Minute) // Tuesday 09:31, due
	if c := f.step(); len(c) != 0 {
		t.Fatalf("advanced outside the window: %+v", c)
	}
	f.now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if c := f.step(); len(c) != 1 || c[0].Action != ActionAdvance {
		t.Fatalf("in the window: %+v, want the advance", c)
	}
	f.now = time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	f.report(version, 40, 0, true) // falling back: the hotfix fails
	if c := f.step(); len(c) != 1 || c[0].Action != ActionHalt {
		t.Errorf("a regression outside the window: %+v, want the halt", c)
	}
}
