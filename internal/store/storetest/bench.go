package storetest

import (
	"fmt"
	"testing"

	"nodehotfix/internal/store"
)

// BenchmarkReportsList benchmarks s.Reports over 20,000 stored reports:
// "every-value" after forget, which empties what the backend kept from
// its last list (as every list did before lists kept what they decoded),
// and "after-1pct-changed", a list after 1 % of them were rewritten.
func BenchmarkReportsList(b *testing.B, s store.Store, forget func()) {
	ctx := b.Context()
	const n = 20_000
	rs := make([]store.Report, n)
	for i := range rs {
		rs[i] = Report(fmt.Sprintf("vm-%05d", i), "b")
	}
	MustPutReports(b, s, rs...)
	b.Run("every-value", func(b *testing.B) {
		for b.Loop() {
			forget()
			if _, err := s.Reports(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("after-1pct-changed", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			changed := make([]store.Report, n/100)
			for j := range changed {
				changed[j] = rs[(i*n/100+j)%n]
				changed[j].ExitCode = i + 1
			}
			MustPutReports(b, s, changed...)
			b.StartTimer()
			if _, err := s.Reports(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
