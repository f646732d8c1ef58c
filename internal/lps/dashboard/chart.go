package dashboard

import (
	"cmp"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// chartData is a release's history and the baseline it is judged
// against (Baseline names it). Empty says, when there is no history to
// draw, why.
type chartData struct {
	Release, Control []sample
	Baseline         string
	Empty            string
}

// Why a chart has nothing to draw.
const (
	emptyNotRecorded = "no look has recorded its history yet (none with lpsd --autopilot-interval=0)"
	emptyNotKept     = "this lpsd's store keeps no history"
	emptyUnreadable  = "its history could not be read: see lpsd's log"
)

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

// chartSVG draws kind ("counts": the release's nodes by outcome;
// "rates": its failure rate against its baseline's; "rollout": its
// percentage and state) as an inline SVG, which needs no script and no
// request. Every string in it is ours, so it is safe to mark as HTML.
func chartSVG(c chartData, kind string) template.HTML {
	var ss []series
	var title, unit string
	switch kind {
	case "rollout":
		return rolloutSVG(c)
	case "counts":
		title, unit = "Outcome reports over time", ""
		ss = []series{
			counts("served", "s-served", c.Release, func(s sample) uint64 { return s.Served }),
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
	t0, t1, ymax := bounds(ss)
	empty := ""
	switch {
	case len(c.Release) == 0:
		empty = cmp.Or(c.Empty, emptyNotRecorded)
	case t0.IsZero():
		empty = "no node judged yet"
	default:
		// Every chart of a release spans its whole history, so they
		// line up one above the other.
		t0, t1 = c.Release[0].T, c.Release[len(c.Release)-1].T
	}
	b, x, y := frame(title, empty, t0, t1, ymax, unit)
	if empty != "" {
		return template.HTML(b.String())
	}
	lx, ly := padL+8, padT+12 // the next legend's place
	for _, s := range ss {
		if len(s.y) == 0 {
			continue
		}
		var pts []string
		for j := range s.y {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.t[j]), y(s.y[j])))
		}
		fmt.Fprintf(b, `<polyline class="line %s" points="%s"/>`, s.class, strings.Join(pts, " "))
		legend := fmt.Sprintf("%s %s%s", s.name, trimFloat(s.y[len(s.y)-1]), unit)
		if lx > padL+8 && lx+textWidth(legend) > chartW-padR {
			lx, ly = padL+8, ly+14 // a row of its own
		}
		fmt.Fprintf(b, `<text class="legend %s" x="%d" y="%d">%s</text>`, s.class, lx, ly, template.HTMLEscapeString(legend))
		lx += textWidth(legend) + 16
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// frame starts a chart titled title over t0..t1 and 0..ymax (in unit):
// its axes, their top value and the time span, and the functions placing
// a time and a value; with empty set, that sentence alone, the chart
// closed.
func frame(title, empty string, t0, t1 time.Time, ymax float64, unit string) (b *strings.Builder, x func(time.Time) float64, y func(float64) float64) {
	b = &strings.Builder{}
	fmt.Fprintf(b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`, chartW, chartH, title, title)
	if empty != "" {
		fmt.Fprintf(b, `<text x="%d" y="%d" class="empty">%s</text></svg>`, chartW/2, chartH/2, template.HTMLEscapeString(empty))
		return b, nil, nil
	}
	x = func(t time.Time) float64 {
		if !t1.After(t0) {
			return padL
		}
		return padL + float64(t.Sub(t0))/float64(t1.Sub(t0))*(chartW-padL-padR)
	}
	y = func(v float64) float64 { return chartH - padB - v/ymax*(chartH-padT-padB) }
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, chartH-padB, chartW-padR, chartH-padB)
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, padT, padL, chartH-padB)
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s%s</text>`, padL-6, padT+8, trimFloat(ymax), unit)
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">0</text>`, padL-6, chartH-padB)
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d">%s</text>`, padL, chartH-8, t0.UTC().Format("15:04:05"))
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s UTC</text>`, chartW-padR, chartH-8, t1.UTC().Format("15:04:05"))
	return b, x, y
}

// rolloutSVG draws the release's percentage over time as steps, on bands
// coloured by its state then, each change of state named where it
// happened.
func rolloutSVG(c chartData) template.HTML {
	const title = "Rollout: percentage and state over time"
	h := c.Release
	var t0, t1 time.Time
	if len(h) > 0 {
		t0, t1 = h[0].T, h[len(h)-1].T
	}
	b, x, y := frame(title, cond(len(h) == 0, cmp.Or(c.Empty, emptyNotRecorded), ""), t0, t1, 100, "%")
	if len(h) == 0 {
		return template.HTML(b.String())
	}
	// A band from each change of state to the next; the name of the
	// state at its start, staggered so neighbours do not overlap.
	for i, n := 0, 0; i < len(h); n++ {
		j := i + 1
		for j < len(h) && h[j].State == h[i].State && h[j].Revoked == h[i].Revoked {
			j++
		}
		end := h[len(h)-1].T
		if j < len(h) {
			end = h[j].T
		}
		x0, x1 := x(h[i].T), x(end)
		class, name := stateClass(h[i].State), template.HTMLEscapeString(h[i].State)
		if h[i].Revoked {
			class, name = class+" revoked", name+", revoked"
		}
		fmt.Fprintf(b, `<rect class="band %s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`, class,
			x0, padT, max(x1-x0, 1), chartH-padT-padB, name)
		// Staggered below the legend, so neighbours do not overlap; the
		// last ones end at the right edge rather than run past it.
		ty := padT + 28 + 12*(n%3)
		if x0+3+float64(textWidth(name)) > chartW-padR {
			fmt.Fprintf(b, `<text class="state-mark" x="%d" y="%d" text-anchor="end">%s</text>`, chartW-padR-3, ty, name)
		} else {
			fmt.Fprintf(b, `<text class="state-mark" x="%.1f" y="%d">%s</text>`, x0+3, ty, name)
		}
		i = j
	}
	var pts []string
	for i, s := range h {
		if i > 0 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.T), y(float64(h[i-1].Percent))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.T), y(float64(s.Percent))))
	}
	last := h[len(h)-1]
	fmt.Fprintf(b, `<polyline class="line s-percent" points="%s"/>`, strings.Join(pts, " "))
	name := template.HTMLEscapeString(last.State)
	if last.Revoked {
		name += ", revoked"
	}
	fmt.Fprintf(b, `<text class="legend s-percent" x="%d" y="%d" text-anchor="end">%d%% %s</text>`, chartW-padR-4, padT+12, last.Percent, name)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// textWidth is about how many pixels s takes in a chart's 11 to 12 px
// text: enough to keep labels apart without measuring them in a browser.
func textWidth(s string) int { return 7 * len([]rune(s)) }

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
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
