package tally

import (
	"math/rand/v2"
	"testing"
)

// TestSpreadCapBruteForce: spreadCap against a brute force over every c.
func TestSpreadCapBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		k := 10 + rng.IntN(15)
		sizes := make([]int, k)
		mx := 0
		for i := range sizes {
			sizes[i] = 1 + rng.IntN([]int{3, 50, 1000}[rng.IntN(3)])
			mx = max(mx, sizes[i])
		}
		want := 1
		for c := 1; c <= mx; c++ {
			n := 0
			for _, s := range sizes {
				n += min(s, c)
			}
			if 10*c <= n {
				want = c
			}
		}
		if got := spreadCap(sizes); got != want {
			t.Fatalf("spreadCap(%v) = %d, want %d", sizes, got, want)
		}
	}
}
