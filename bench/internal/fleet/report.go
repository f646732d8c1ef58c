package fleet

import (
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"time"

	"nodehotfix/bench/internal/stats"
	"nodehotfix/internal/lps"
)

// Fraction is how often a rolling release was served at one configured
// percentage, among nodes answered while their replica's snapshot held
// that percentage from the start to the end of the call.
type Fraction struct {
	Version    string
	Configured int // percent
	Nodes      int
	Got        int
}

// Observed returns the served fraction in percent.
func (f Fraction) Observed() float64 { return 100 * float64(f.Got) / float64(f.Nodes) }

// Tolerance returns four binomial standard deviations, in percent: the
// bucket hash makes each node an independent draw at the configured rate.
func (f Fraction) Tolerance() float64 {
	p := float64(f.Configured) / 100
	return 100 * 4 * math.Sqrt(p*(1-p)/float64(f.Nodes))
}

// Within reports whether the observed fraction is within Tolerance of the
// configured one.
func (f Fraction) Within() bool {
	return f.Nodes > 0 && math.Abs(f.Observed()-float64(f.Configured)) <= f.Tolerance()
}

// Sampled reports whether the answered nodes are a fair sample of the
// fleet, so that served fractions can be compared with the configured
// ones: at most 5% of the nodes went unanswered other than because their
// replica was down. Under overload the nodes that beat their deadline are
// not a random sample (in our runs those with the larger, two-base answer
// got through more often).
func (r *Report) Sampled() bool {
	return r.Counts()[FailedOther]*20 <= len(r.Nodes)
}

// Counts returns how many nodes ended with each outcome.
func (r *Report) Counts() map[Outcome]int {
	m := map[Outcome]int{}
	for _, n := range r.Nodes {
		m[n.Outcome]++
	}
	return m
}

// Fractions returns the served fractions of RollingVer per configured
// percentage, and of OtherVer; none for a version no node was answered
// about. In a closed-loop run nodes declare their base, Base, so OtherVer
// (of OtherBase) is never theirs and has no fraction.
func (r *Report) Fractions() []Fraction {
	byPct := map[int]*Fraction{}
	other := Fraction{Version: OtherVer, Configured: OtherPercent}
	for _, n := range r.Nodes {
		if n.Outcome != Served {
			continue
		}
		if r.Config.Loop == nil {
			other.Nodes++
			if n.Other {
				other.Got++
			}
		}
		if !n.Stable || n.Percent < 0 {
			continue
		}
		f := byPct[n.Percent]
		if f == nil {
			f = &Fraction{Version: RollingVer, Configured: n.Percent}
			byPct[n.Percent] = f
		}
		f.Nodes++
		if n.Rolling {
			f.Got++
		}
	}
	var out []Fraction
	for _, p := range slices.Sorted(maps.Keys(byPct)) {
		out = append(out, *byPct[p])
	}
	if other.Nodes > 0 {
		out = append(out, other)
	}
	return out
}

// Print writes the human-readable report.
func (r *Report) Print(w io.Writer) {
	c := r.Config
	maxConns := "4096 (default)"
	if c.MaxConnections > 0 {
		maxConns = fmt.Sprint(c.MaxConnections)
	}
	maxHands := fmt.Sprint(c.handshakes())
	if c.MaxHandshakes == 0 {
		maxHands += fmt.Sprintf(" (lpsd's %d per CPU x a replica's share of %d CPUs)", lps.DefaultHandshakesPerCPU, runtime.GOMAXPROCS(0))
	}
	fmt.Fprintf(w, "nodes %d in %d bursts over %s, %d lpsd replicas (max connections %s, max handshakes %s each), %d etcd members, node deadline %s, %s documents\n",
		c.Nodes, c.Bursts, c.Arrival, c.Replicas, maxConns, maxHands, c.Members, c.NodeTimeout, c.Leaf)
	fmt.Fprintf(w, "all nodes done after %s; %s\n", r.Elapsed.Round(time.Millisecond), r.Load)
	for _, e := range r.Events {
		fmt.Fprintf(w, "  event t=%6.3fs %s\n", e.At.Seconds(), e.What)
	}
	counts := r.Counts()
	fmt.Fprintf(w, "outcomes: served %d, wrong %d, failed while the node's replica was down %d, failed otherwise %d\n",
		counts[Served], counts[Wrong], counts[FailedReplicaDown], counts[FailedOther])
	codes := map[string]int{}
	replicas := map[int]int{}
	for _, n := range r.Nodes {
		if n.Outcome == FailedReplicaDown || n.Outcome == FailedOther {
			codes[string(n.Outcome)+"/"+n.Code]++
		}
		if n.Outcome == FailedReplicaDown {
			replicas[n.Replica]++
		}
	}
	if len(codes) > 0 {
		fmt.Fprintf(w, "  failures by code: %v; replica-down failures by replica: %v\n", codes, replicas)
	}
	shown := 0
	for _, n := range r.Nodes {
		if n.Outcome == Wrong && shown < 5 {
			fmt.Fprintf(w, "  WRONG node %d (replica %d, code %s): %s\n", n.Node, n.Replica, n.Code, n.Detail)
			shown++
		}
	}
	var lat, failLat []time.Duration
	for _, n := range r.Nodes {
		switch n.Outcome {
		case Served:
			lat = append(lat, n.Latency)
		case FailedReplicaDown, FailedOther:
			failLat = append(failLat, n.Latency)
		}
	}
	ls := stats.Of(stats.Millis(lat))
	fmt.Fprintf(w, "latency of served calls: p50 %.1fms p90 %.1fms p99 %.1fms max %.1fms\n", ls.Median, ls.P90, ls.P99, ls.Max)
	if len(failLat) > 0 {
		fs := stats.Of(stats.Millis(failLat))
		fmt.Fprintf(w, "time to failure (the node then fails open): p50 %.1fms p90 %.1fms p99 %.1fms max %.1fms\n", fs.Median, fs.P90, fs.P99, fs.Max)
	}
	if !r.Sampled() {
		fmt.Fprintln(w, "rollout fractions below are of a biased sample: more than 5% of the nodes failed with their replica up (overload: shed or timed out)")
	}
	for _, f := range r.Fractions() {
		fmt.Fprintf(w, "rollout %s at %d%%: served to %d of %d = %.2f%% (tolerance ±%.2f%%, within: %v)\n",
			f.Version, f.Configured, f.Got, f.Nodes, f.Observed(), f.Tolerance(), f.Within())
	}
	if cv := r.Convergence; cv != nil {
		fmt.Fprintf(w, "percentage change to %d%% (write acknowledged after %s) reached all replicas: %v, %s after the acknowledgement (per replica %v)\n",
			cv.Percent, cv.Write.Round(time.Millisecond), cv.Converged, cv.Max, cv.PerReplica)
	}
	if r.Loop != nil {
		r.Loop.print(w, c)
	}
	r.printPerSecond(w)
}

// printPerSecond writes completions per second of the run.
func (r *Report) printPerSecond(w io.Writer) {
	type row struct{ started, served, down, other, wrong int }
	secs := int(r.Elapsed/time.Second) + 1
	rows := make([]row, secs)
	for _, n := range r.Nodes {
		s := min(int(n.Start/time.Second), secs-1)
		e := min(int((n.Start+n.Latency)/time.Second), secs-1)
		rows[s].started++
		switch n.Outcome {
		case Served:
			rows[e].served++
		case FailedReplicaDown:
			rows[e].down++
		case FailedOther:
			rows[e].other++
		case Wrong:
			rows[e].wrong++
		}
	}
	fmt.Fprintf(w, "per second (by the second a call started / ended): %4s %8s %8s %12s %8s %6s\n", "s", "started", "served", "failed-down", "failed", "wrong")
	for i, rw := range rows {
		fmt.Fprintf(w, "%51s %4d %8d %8d %12d %8d %6d\n", "", i, rw.started, rw.served, rw.down, rw.other, rw.wrong)
	}
}
