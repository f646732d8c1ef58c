package dashboard

import (
	"cmp"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// chartData is a release's history and the baseline it is judged
// against (Baseline names it).
type chartData struct {
	Release, Control []sample
	Baseline         string
}

type series struct {
	name, class string
	t           []time.Time
	y           []float64
}

const (
	chartW, chartH = 640, 200
	padL, padR     = 56, 12
	padT, padB     = 12, 28
)

// chartSVG draws kind ("counts": the release's reports; "rates": its
// failure rate against the control cohort's) as an inline SVG, which
// needs no script and no request. Every string in it is ours, so it is
// safe to mark as HTML.
func chartSVG(c chartData, kind string) template.HTML {
	var ss []series
	var title, unit string
	switch kind {
	case "counts":
		title, unit = "Outcome reports over time", ""
		ss = []series{
			counts("reported", "s-reported", c.Release, func(s sample) uint64 { return s.Reported }),
			counts("ok", "s-ok", c.Release, func(s sample) uint64 { return s.OK }),
			counts("failed", "s-failed", c.Release, func(s sample) uint64 { return s.Failed }),
			counts("fell back", "s-fallback", c.Release, func(s sample) uint64 { return s.Fallback }),
			counts("refused", "s-refused", c.Release, func(s sample) uint64 { return s.RefusedIntegrity + s.RefusedDelivery }),
			counts("silent", "s-silent", c.Release, func(s sample) uint64 { return s.Silent }),
		}
	default:
		title, unit = "Failure rate: release against its baseline", "%"
		ss = []series{rates("release", "s-failed", c.Release), rates(cmp.Or(c.Baseline, "baseline"), "s-control", c.Control)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`, chartW, chartH, title, title)
	t0, t1, ymax := bounds(ss)
	if t0.IsZero() {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="empty">no node counted for it yet</text></svg>`, chartW/2, chartH/2)
		return template.HTML(b.String())
	}
	x := func(t time.Time) float64 {
		if !t1.After(t0) {
			return padL
		}
		return padL + float64(t.Sub(t0))/float64(t1.Sub(t0))*(chartW-padL-padR)
	}
	y := func(v float64) float64 { return chartH - padB - v/ymax*(chartH-padT-padB) }
	// Axes, with the top value and the time span.
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, chartH-padB, chartW-padR, chartH-padB)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, padT, padL, chartH-padB)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s%s</text>`, padL-6, padT+8, trimFloat(ymax), unit)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">0</text>`, padL-6, chartH-padB)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d">%s</text>`, padL, chartH-8, t0.UTC().Format("15:04:05"))
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s UTC</text>`, chartW-padR, chartH-8, t1.UTC().Format("15:04:05"))
	for i, s := range ss {
		if len(s.y) == 0 {
			continue
		}
		var pts []string
		for j := range s.y {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.t[j]), y(s.y[j])))
		}
		fmt.Fprintf(&b, `<polyline class="line %s" points="%s"/>`, s.class, strings.Join(pts, " "))
		last := s.y[len(s.y)-1]
		fmt.Fprintf(&b, `<text class="legend %s" x="%d" y="%d">%s %s%s</text>`, s.class, padL+8+i*96, padT+12, s.name, trimFloat(last), unit)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func counts(name, class string, h []sample, f func(sample) uint64) series {
	s := series{name: name, class: class}
	for _, x := range h {
		s.t, s.y = append(s.t, x.T), append(s.y, float64(f(x)))
	}
	return s
}

func rates(name, class string, h []sample) series {
	s := series{name: name, class: class}
	for _, x := range h {
		if r := percentFailed(x.Counts); r >= 0 {
			s.t = append(s.t, x.T)
			s.y = append(s.y, r)
		}
	}
	return s
}

// bounds returns the time span of ss and a rounded-up top value.
func bounds(ss []series) (t0, t1 time.Time, ymax float64) {
	for _, s := range ss {
		for i, t := range s.t {
			if t0.IsZero() || t.Before(t0) {
				t0 = t
			}
			if t.After(t1) {
				t1 = t
			}
			ymax = max(ymax, s.y[i])
		}
	}
	if ymax <= 0 {
		return t0, t1, 1
	}
	// 1, 2 or 5 times a power of ten, at or above ymax.
	step := 1.0
	for step*10 <= ymax {
		step *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*step >= ymax {
			return t0, t1, m * step
		}
	}
	return t0, t1, ymax
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}
