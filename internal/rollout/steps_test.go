package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseSteps(t *testing.T) {
	t.Parallel()
	got, err := ParseSteps("20n:30m:20, 10%:1h:100,100:2d:500")
	want := []PlanStep{{Nodes: 20, Bake: 30 * time.Minute, MinReports: 20}, {Percent: 10, Bake: time.Hour, MinReports: 100}, {Percent: 100, Bake: 48 * time.Hour, MinReports: 500}}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("ParseSteps = %v, %v; want %v", got, err, want)
	}
	for in, wantErr := range map[string]string{
		"":            "required",
		"10:1h":       "want SIZE:BAKE:REPORTS",
		"101:1h:5":    "size",
		"20000n:1h:5": "at most 10000",
		"10:soon:5":   "bake",
		"10:1h:0":     "reports",
	} {
		if _, err := ParseSteps(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseSteps(%q) = %v, want an error about %s", in, err, wantErr)
		}
	}
}

// FuzzParseSteps: any input is parsed or refused, never a panic, and what
// parses is in range.
func FuzzParseSteps(f *testing.F) {
	for _, s := range []string{"20n:30m:20,10:1h:100,100:2h:500", "5:1d:50", "x:y:z", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		steps, err := ParseSteps(s)
		if err != nil {
			return
		}
		for _, st := range steps {
			if st.Percent < 0 || st.Percent > 100 || st.Nodes < 0 || st.Nodes > MaxCanaryNodes || st.Bake < 0 || st.MinReports < 1 {
				t.Errorf("ParseSteps(%q) = %v: out of range", s, steps)
			}
		}
	})
}
