package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"nodehotfix/internal/duration"
)

// The margin and failure-rate ceiling an operator's plan gets unless it
// says otherwise (lpsctl rollout plan's and the dashboard's defaults).
const (
	DefaultMargin         = 0.05
	DefaultMaxFailureRate = 0.2
)

// ParseSteps reads a plan's steps as operators type them,
// "SIZE:BAKE:REPORTS,...": SIZE a percentage (10) or a canary of a number
// of nodes (20n), BAKE a duration (30m, 1d), REPORTS how many reports the
// step needs by its end. It checks each field's form and range; Validate
// checks the steps as a plan.
func ParseSteps(s string) ([]PlanStep, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required, e.g. 20n:30m:20,10:1h:100,100:2h:500")
	}
	var steps []PlanStep
	for i, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("step %d %q: want SIZE:BAKE:REPORTS, SIZE a percentage (10) or a number of nodes (20n)", i+1, part)
		}
		var pct, nodes int
		var err error
		if n, ok := strings.CutSuffix(f[0], "n"); ok {
			nodes, err = strconv.Atoi(n)
		} else {
			pct, err = strconv.Atoi(strings.TrimSuffix(f[0], "%"))
		}
		if err != nil || pct < 0 || pct > 100 || nodes < 0 || nodes > MaxCanaryNodes {
			return nil, fmt.Errorf("step %d: size %q: want a percentage (10) or a number of nodes (20n, at most %d)", i+1, f[0], MaxCanaryNodes)
		}
		bake, err := duration.Parse(f[1])
		if err != nil {
			return nil, fmt.Errorf("step %d: bake %q: %v", i+1, f[1], err)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, fmt.Errorf("step %d: reports %q: want a number of reports, 1 to 1000000", i+1, f[2])
		}
		steps = append(steps, PlanStep{Percent: pct, Nodes: nodes, Bake: bake, MinReports: n})
	}
	return steps, nil
}
