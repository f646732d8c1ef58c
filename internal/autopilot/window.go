package autopilot

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Window is when the autopilot may advance a rollout: days of the week
// and a span of the day in a time zone, as an operator's change window
// ("Mon-Fri 09:00-17:00 Europe/Dublin"). Outside it a healthy step waits
// for the next opening; halts and pauses are never held back. The zero
// Window is always open.
type Window struct {
	days       [7]bool // by time.Weekday
	from, to   time.Duration
	loc        *time.Location
	spec       string
	restricted bool
}

// ParseWindow reads "DAYS HH:MM-HH:MM ZONE": DAYS a day (Mon), a range
// (Mon-Fri, wrapping as Fri-Mon) or a comma list of them; the span in the
// zone's local time, from inclusive to exclusive, crossing midnight when
// from is after to (22:00-06:00: from the day's 22:00 to the next day's
// 06:00); ZONE an IANA name (UTC, Europe/Dublin). "" is the zero Window.
func ParseWindow(s string) (Window, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Window{}, nil
	}
	fields := strings.Fields(s)
	if len(fields) != 3 {
		return Window{}, fmt.Errorf("advance window %q: want DAYS HH:MM-HH:MM ZONE, e.g. \"Mon-Fri 09:00-17:00 Europe/Dublin\"", s)
	}
	w := Window{spec: s, restricted: true}
	for part := range strings.SplitSeq(fields[0], ",") {
		a, b, isRange := strings.Cut(part, "-")
		first, err := weekday(a)
		if err != nil {
			return Window{}, fmt.Errorf("advance window %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = weekday(b); err != nil {
				return Window{}, fmt.Errorf("advance window %q: %w", s, err)
			}
		}
		for d := first; ; d = (d + 1) % 7 {
			w.days[d] = true
			if d == last {
				break
			}
		}
	}
	from, to, ok := strings.Cut(fields[1], "-")
	var err error
	if !ok {
		return Window{}, fmt.Errorf("advance window %q: span %q: want HH:MM-HH:MM", s, fields[1])
	}
	if w.from, err = clock(from); err != nil {
		return Window{}, fmt.Errorf("advance window %q: %w", s, err)
	}
	if w.to, err = clock(to); err != nil {
		return Window{}, fmt.Errorf("advance window %q: %w", s, err)
	}
	if w.from == w.to {
		return Window{}, fmt.Errorf("advance window %q: the span %s is empty", s, fields[1])
	}
	if w.loc, err = time.LoadLocation(fields[2]); err != nil {
		return Window{}, fmt.Errorf("advance window %q: time zone %q: %w", s, fields[2], err)
	}
	return w, nil
}

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func weekday(s string) (time.Weekday, error) {
	i := slices.Index(weekdays, strings.ToLower(s))
	if i < 0 {
		return 0, fmt.Errorf("day %q: want one of Mon, Tue, Wed, Thu, Fri, Sat, Sun", s)
	}
	return time.Weekday(i), nil
}

func clock(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want HH:MM, 00:00 to 23:59", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// Open reports whether the autopilot may advance at t.
func (w Window) Open(t time.Time) bool {
	if !w.restricted {
		return true
	}
	t = t.In(w.loc)
	into := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	day := t.Weekday()
	if w.from < w.to {
		return w.days[day] && into >= w.from && into < w.to
	}
	// Across midnight: the evening of an allowed day, or the morning
	// after one.
	return w.days[day] && into >= w.from || w.days[(day+6)%7] && into < w.to
}

// String returns the window as parsed ("" for always open).
func (w Window) String() string { return w.spec }

// Set parses s into w (ParseWindow), so a Window is a flag.Value.
func (w *Window) Set(s string) error {
	v, err := ParseWindow(s)
	if err != nil {
		return err
	}
	*w = v
	return nil
}
