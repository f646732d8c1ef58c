package fleet

import (
	"testing"
	"time"

	"nodehotfix/bench/internal/mint"
)

// TestIntegrationFleetSimFailuresAndChange runs a small fleet through an
// etcd leader stop, a replica kill and restart, and a percentage change,
// and checks the service's invariants on every answer. Timing is reported,
// not asserted, except the one-second convergence bound of a change: the
// change travels by etcd watch to a snapshot reload, milliseconds on an
// idle machine, so a second leaves two orders of magnitude for a loaded CI
// runner under -race.
func TestIntegrationFleetSimFailuresAndChange(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a 3-member etcd cluster and 3 replicas")
	}
	cfg := Config{
		Nodes:   2000,
		Bursts:  40,
		Arrival: 4 * time.Second,
		// Correctness, not capacity, is under test: pacing the bursts and
		// a generous deadline keep a slow runner (-race, shared cores)
		// from turning queueing into timeouts.
		Paced:            true,
		NodeTimeout:      time.Minute,
		Replicas:         3,
		Members:          3,
		Leaf:             mint.ECDSA,
		Percent:          30,
		ChangeTo:         60,
		StopMemberAt:     8,
		KillReplicaAt:    12,
		RestartReplicaAt: 20,
		ChangeAt:         28,
		Seed:             "ci",
		Progress:         t.Output(),
	}
	rep, err := Run(t.Context(), t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep.Print(t.Output())

	counts := rep.Counts()
	if counts[Wrong] != 0 {
		for _, n := range rep.Nodes {
			if n.Outcome == Wrong {
				t.Errorf("node %d (replica %d): wrong answer: %s", n.Node, n.Replica, n.Detail)
			}
		}
	}
	if counts[FailedOther] != 0 {
		t.Errorf("%d nodes failed while their replica was up, want 0", counts[FailedOther])
	}
	var restarted time.Duration
	for _, e := range rep.Events {
		if e.What == "lpsd replica 0 serving again" {
			restarted = e.At
		}
	}
	if restarted == 0 {
		t.Fatalf("replica 0 was not restarted; events: %v", rep.Events)
	}
	servedAfterRestart := 0
	for _, n := range rep.Nodes {
		if n.Outcome == FailedReplicaDown && n.Replica != 0 {
			t.Errorf("node %d failed on replica %d, which was never down", n.Node, n.Replica)
		}
		if n.Outcome == Served && n.Replica == 0 && n.Start > restarted {
			servedAfterRestart++
		}
	}
	if servedAfterRestart == 0 {
		t.Error("no node was served by replica 0 after its restart")
	}
	if counts[Served] < cfg.Nodes/2 {
		t.Errorf("served %d of %d nodes, want most", counts[Served], cfg.Nodes)
	}

	for _, f := range rep.Fractions() {
		// Small groups (a replica caught mid-change) carry no statistical
		// weight; their every answer was still checked exactly above.
		if f.Nodes >= 100 && !f.Within() {
			t.Errorf("%s at %d%%: served %.2f%% of %d nodes, want within ±%.2f%%", f.Version, f.Configured, f.Observed(), f.Nodes, f.Tolerance())
		}
	}
	if len(rep.Fractions()) < 3 {
		t.Errorf("fractions %v: want the rolling release at both percentages and the other base", rep.Fractions())
	}

	cv := rep.Convergence
	switch {
	case cv == nil:
		t.Error("the percentage change did not happen")
	case !cv.Converged:
		t.Errorf("the change to %d%% did not reach every replica within the poll deadline: %v", cv.Percent, cv.PerReplica)
	case cv.Max > time.Second:
		t.Errorf("the change to %d%% took %s to reach every replica, want within 1s", cv.Percent, cv.Max)
	}
}
