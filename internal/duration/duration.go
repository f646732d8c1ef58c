// Package duration reads and writes the durations operators type: Go
// durations with days (30d, 1d12h), for lpsctl's flags and the dashboard's
// filters alike.
package duration

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Parse reads a Go duration with an optional leading whole number of
// days: 30d, 1d12h, 90m. Negative durations are refused.
func Parse(s string) (time.Duration, error) {
	bad := fmt.Errorf("want a duration such as 90s, 30m, 12h, 30d or 1d12h")
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16)
		if err != nil {
			return 0, bad
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || days+d < days {
		return 0, bad
	}
	return days + d, nil
}

// Format writes d the way Parse reads it: 30d, 1d12h, 30m.
func Format(d time.Duration) string {
	if d <= 0 || d%time.Second != 0 {
		return d.String()
	}
	var b strings.Builder
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			d -= n * u.unit
		}
	}
	return b.String()
}
