package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// minServedPct is the target for every attack phase.
const minServedPct = 99.0

// result is one measurement, the -o json document.
type result struct {
	Config config        `json:"config"`
	Phases []phaseReport `json:"phases"`
	// Check lists the attack phases under MinServedPct; empty means every
	// one met it.
	Check        []string `json:"check_failures"`
	MinServedPct float64  `json:"min_served_pct"`
}

type config struct {
	Probes      int      `json:"probes"`
	IntervalMs  float64  `json:"probe_interval_ms"`
	BudgetS     float64  `json:"probe_budget_s"`
	ProbeLocal  string   `json:"probe_local_address"`
	AttackLocal string   `json:"attacker_local_address"`
	ReopenS     float64  `json:"attacker_reopen_s"`
	Parallel    int      `json:"attacker_parallel_setups"`
	NoFile      uint64   `json:"rlimit_nofile"`
	LPSDNoFile  int      `json:"lpsd_rlimit_nofile"`
	LPSDArgs    []string `json:"lpsd_extra_args"`
	Notes       []string `json:"notes,omitempty"`
}

// phaseReport is one phase. Seconds is the window in which the counted
// probe calls started; an attack runs one node budget longer, so each of
// them ends under attack, and lpsd's and the machine's figures cover that
// too.
type phaseReport struct {
	Name     string        `json:"name"`
	Seconds  float64       `json:"seconds"`
	Probe    probeReport   `json:"probe"`
	Attacker *attackReport `json:"attacker,omitempty"`
	LPSD     lpsdReport    `json:"lpsd"`
	Machine  machineReport `json:"machine"`
}

// machineReport is the machine's CPU use over a phase, in percent of all
// its CPUs: this tool (probes and attacker), lpsd, and everything else.
type machineReport struct {
	BusyPct   float64 `json:"busy_pct"`
	ToolPct   float64 `json:"tool_pct"`
	LPSDPct   float64 `json:"lpsd_pct"`
	OthersPct float64 `json:"others_pct"`
}

type probeReport struct {
	Calls        int64            `json:"calls"`
	Served       int64            `json:"served"`
	NotFound     int64            `json:"served_not_found"`
	Failed       int64            `json:"failed"`
	ServedPct    float64          `json:"served_pct"`
	P50ms        float64          `json:"served_p50_ms"`
	P99ms        float64          `json:"served_p99_ms"`
	Failures     map[string]int64 `json:"failures,omitempty"`
	PeakInFlight int64            `json:"peak_in_flight"`
	// CallsPerSecond and ServedPerSecond count the calls by the second of
	// the phase they started in.
	CallsPerSecond  []int64 `json:"calls_per_second"`
	ServedPerSecond []int64 `json:"served_per_second"`
}

type attackReport struct {
	Kind         string  `json:"kind"`
	Target       int     `json:"target"`
	Local        string  `json:"local_address"`
	Dials        int64   `json:"dials"`
	Established  int64   `json:"established"`
	SetupErrors  int64   `json:"setup_errors"`
	FirstError   string  `json:"first_setup_error,omitempty"`
	ClosedByLPSD int64   `json:"closed_by_lpsd"`
	HeldP50s     float64 `json:"closed_held_p50_s"`
	HeldMaxS     float64 `json:"closed_held_max_s"`
	PeakOpen     int64   `json:"peak_open"`
	PeakAfterS   float64 `json:"peak_open_after_s"`
	FullAfterS   float64 `json:"all_open_after_s"` // 0: never all open at once
}

type lpsdReport struct {
	CPUPct        float64            `json:"cpu_pct_of_one_cpu"`
	OpenFilesPeak int                `json:"open_files_peak"`
	CountersDelta map[string]float64 `json:"counters_delta"`
	GaugesPeak    map[string]float64 `json:"gauges_peak"`
	ScrapeErrors  int                `json:"scrape_errors,omitempty"`
	cpu           time.Duration
}

// check returns the attack phases (those with an attacker) whose probe
// calls were under minPct served; a phase with no call fails.
func check(phases []phaseReport, minPct float64) []string {
	var bad []string
	for _, p := range phases {
		if p.Attacker == nil {
			continue
		}
		if p.Probe.Calls == 0 || p.Probe.ServedPct < minPct {
			bad = append(bad, fmt.Sprintf("%s: %.2f%% of %d probe calls served, under %.0f%%", p.Name, p.Probe.ServedPct, p.Probe.Calls, minPct))
		}
	}
	return bad
}

func writeJSON(w io.Writer, r result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func writeText(w io.Writer, r result) {
	c := r.Config
	fmt.Fprintf(w, "\n%d probe nodes from %s, a new connection + one GetComponentConfig each every %.0f ms (open loop), %.0f s budget; attacker from %s, reopening a closed connection after ~%.1f s\n",
		c.Probes, c.ProbeLocal, c.IntervalMs, c.BudgetS, c.AttackLocal, c.ReopenS)
	fmt.Fprintf(w, "RLIMIT_NOFILE: this process %d, lpsd %d; lpsd extra args: %s\n", c.NoFile, c.LPSDNoFile, strings.Join(c.LPSDArgs, " "))
	for _, n := range c.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, p := range r.Phases {
		pr := p.Probe
		fmt.Fprintf(w, "\n%s (%.1f s): probe calls %d, served %d (%.2f%%, %d NotFound), failed %d%s; served p50 %.1f ms p99 %.1f ms; peak in flight %d\n",
			p.Name, p.Seconds, pr.Calls, pr.Served, pr.ServedPct, pr.NotFound, pr.Failed, kinds(pr.Failures), pr.P50ms, pr.P99ms, pr.PeakInFlight)
		fmt.Fprintf(w, "  served %% per %d s: %s\n", timelineStep, timeline(pr, timelineStep))
		if a := p.Attacker; a != nil {
			full := "never all open at once"
			if a.FullAfterS > 0 {
				full = fmt.Sprintf("all open after %.1f s", a.FullAfterS)
			}
			fmt.Fprintf(w, "  attacker %s x%d: %d dials, %d established, %d setup errors, %d closed by lpsd (held p50 %.1f s, max %.1f s), peak open %d (at %.1f s), %s\n",
				a.Kind, a.Target, a.Dials, a.Established, a.SetupErrors, a.ClosedByLPSD, a.HeldP50s, a.HeldMaxS, a.PeakOpen, a.PeakAfterS, full)
			if a.FirstError != "" {
				fmt.Fprintf(w, "  first setup error: %s\n", a.FirstError)
			}
		}
		l := p.LPSD
		fmt.Fprintf(w, "  lpsd: CPU %.0f%% of one CPU, open files peak %d", l.CPUPct, l.OpenFilesPeak)
		for _, k := range slices.Sorted(maps.Keys(l.CountersDelta)) {
			fmt.Fprintf(w, ", %s +%.0f", k, l.CountersDelta[k])
		}
		for _, k := range slices.Sorted(maps.Keys(l.GaugesPeak)) {
			fmt.Fprintf(w, ", %s peak %.0f", k, l.GaugesPeak[k])
		}
		if l.ScrapeErrors > 0 {
			fmt.Fprintf(w, " (%d scrapes failed)", l.ScrapeErrors)
		}
		mc := p.Machine
		fmt.Fprintf(w, "\n  machine: CPU busy %.0f%% (this tool %.0f%%, lpsd %.0f%%, everything else %.0f%%)\n", mc.BusyPct, mc.ToolPct, mc.LPSDPct, mc.OthersPct)
	}
	fmt.Fprintf(w, "\n%-10s %8s %8s %8s %9s %9s %9s  %s\n", "phase", "calls", "served", "failed", "served %", "p50 ms", "p99 ms", "attacker open peak / closed by lpsd")
	for _, p := range r.Phases {
		pr := p.Probe
		att := "-"
		if a := p.Attacker; a != nil {
			att = fmt.Sprintf("%d of %d / %d", a.PeakOpen, a.Target, a.ClosedByLPSD)
		}
		fmt.Fprintf(w, "%-10s %8d %8d %8d %9.2f %9.1f %9.1f  %s\n", p.Name, pr.Calls, pr.Served, pr.Failed, pr.ServedPct, pr.P50ms, pr.P99ms, att)
	}
	if len(r.Check) == 0 {
		fmt.Fprintf(w, "\nevery attack phase served at least %.0f%% of probe calls\n", r.MinServedPct)
	} else {
		fmt.Fprintf(w, "\nunder the %.0f%% target:\n  %s\n", r.MinServedPct, strings.Join(r.Check, "\n  "))
	}
}

// timelineStep is the window of the text report's served timeline.
const timelineStep = 5

// timeline renders the served percentage of each step seconds of a phase.
func timeline(p probeReport, step int) string {
	var parts []string
	for i := 0; i < len(p.CallsPerSecond); i += step {
		var calls, served int64
		for j := i; j < min(i+step, len(p.CallsPerSecond)); j++ {
			calls, served = calls+p.CallsPerSecond[j], served+p.ServedPerSecond[j]
		}
		if calls == 0 {
			parts = append(parts, "-")
			continue
		}
		parts = append(parts, fmt.Sprintf("%.0f", 100*float64(served)/float64(calls)))
	}
	return strings.Join(parts, " ")
}

func kinds(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
