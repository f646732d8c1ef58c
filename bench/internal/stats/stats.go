// Package stats summarises benchmark samples (percentiles, median, extremes).
package stats

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes a set of samples.
type Summary struct {
	N                   int
	Min, Median, Max    float64
	P90, P99, Mean, Sum float64
}

// Of summarises xs; the zero Summary for no samples. xs is not modified.
func Of(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Summary{
		N:      len(s),
		Min:    s[0],
		Median: Quantile(s, 0.5),
		Max:    s[len(s)-1],
		P90:    Quantile(s, 0.9),
		P99:    Quantile(s, 0.99),
		Mean:   sum / float64(len(s)),
		Sum:    sum,
	}
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of sorted by linear
// interpolation between closest ranks; NaN for no samples.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	frac := pos - float64(lo)
	return sorted[lo] + (sorted[hi]-sorted[lo])*frac
}

// Millis converts durations to milliseconds, the unit the reports use.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// String renders s as "median M (min A, max B, n N)" with unit.
func (s Summary) String(unit string) string {
	return fmt.Sprintf("median %.2f%s (min %.2f, max %.2f, p90 %.2f, n %d)", s.Median, unit, s.Min, s.Max, s.P90, s.N)
}
