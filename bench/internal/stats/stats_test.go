package stats

import (
	"math"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	sorted := []float64{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		q, want float64
	}{
		{0, 1}, {0.5, 3}, {1, 5}, {0.25, 2}, {0.9, 4.6},
	} {
		if got := Quantile(sorted, tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", sorted, tc.q, got, tc.want)
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile(nil, 0.5) = %v, want NaN", got)
	}
}

func TestOf(t *testing.T) {
	t.Parallel()
	in := []float64{5, 1, 3}
	s := Of(in)
	if s.N != 3 || s.Min != 1 || s.Max != 5 || s.Median != 3 || s.Mean != 3 {
		t.Errorf("Of(%v) = %+v", in, s)
	}
	if in[0] != 5 {
		t.Errorf("Of modified its input: %v", in)
	}
	if got := Of(nil); got != (Summary{}) {
		t.Errorf("Of(nil) = %+v, want zero", got)
	}
}

func TestMillis(t *testing.T) {
	t.Parallel()
	got := Millis([]time.Duration{1500 * time.Microsecond})
	if len(got) != 1 || got[0] != 1.5 {
		t.Errorf("Millis(1.5ms) = %v, want [1.5]", got)
	}
}
