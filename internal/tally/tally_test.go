package tally

import (
	"fmt"
	"testing"
	"time"

	"nodehotfix/internal/store"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func TestOf(t *testing.T) {
	t.Parallel()
	rs := []store.Report{
		{VMID: "a", Boot: "1", Base: "202604.01", HotfixVersion: "202604.01.1", Time: t0},
		{VMID: "b", Boot: "1", Base: "202604.01", HotfixVersion: "202604.01.1", ExitCode: 3, Time: t0},
		{VMID: "c", Boot: "1", Base: "202604.01", HotfixVersion: "202604.01.1", Fallback: true, ExitCode: 0, Time: t0},
		{VMID: "d", Boot: "1", Base: "202604.01", Time: t0},
		{VMID: "e", Boot: "1", Base: "202604.01", ExitCode: 1, Time: t0},
	}
	got := Of(rs)
	if c := got.Releases["202604.01.1"]; c != (Counts{Reported: 3, OK: 1, Failed: 1, Fallback: 1}) || c.Failures() != 2 {
		t.Errorf("release = %+v", c)
	}
	if c := got.Control["202604.01"]; c != (Counts{Reported: 2, OK: 1, Failed: 1}) {
		t.Errorf("control = %+v", c)
	}
}

// TestOfOneVotePerNode: a node that invents boots or flips its outcome
// moves one vote, its latest report's, in each cohort.
func TestOfOneVotePerNode(t *testing.T) {
	t.Parallel()
	var rs []store.Report
	for i := range 16 {
		rs = append(rs, store.Report{VMID: "attacker", Boot: fmt.Sprint(i), Base: "202604.01", HotfixVersion: "202604.01.1", ExitCode: 1, Time: t0.Add(time.Duration(i) * time.Second)})
	}
	rs = append(rs, store.Report{VMID: "attacker", Boot: "last", Base: "202604.01", HotfixVersion: "202604.01.1", Time: t0.Add(time.Hour)})
	for i := range 16 {
		rs = append(rs, store.Report{VMID: "attacker", Boot: "c" + fmt.Sprint(i), Base: "202604.01", ExitCode: 1, Time: t0})
	}
	got := Of(rs)
	if c := got.Releases["202604.01.1"]; c != (Counts{Reported: 1, OK: 1}) {
		t.Errorf("release = %+v, want the attacker's one latest vote", c)
	}
	if c := got.Control["202604.01"]; c.Reported != 1 {
		t.Errorf("control = %+v, want one vote", c)
	}
}

func TestUnreported(t *testing.T) {
	t.Parallel()
	const v = "202604.01.1"
	seats := []store.Seat{
		{VMID: "reported", Since: t0},
		{VMID: "reported-control", Since: t0},
		{VMID: "old-boot-only", Since: t0},
		{VMID: "skewed", Since: t0},
		{VMID: "silent", Since: t0},
		{VMID: "pending", Since: t0.Add(time.Hour)},
	}
	reports := []store.Report{
		{VMID: "reported", Boot: "b", HotfixVersion: v, Time: t0.Add(time.Minute)},
		{VMID: "reported-control", Boot: "b", Time: t0.Add(time.Minute)}, // chose the baked agent: not silent
		{VMID: "old-boot-only", Boot: "a", Time: t0.Add(-time.Hour)},
		{VMID: "skewed", Boot: "b", Time: t0.Add(-10 * time.Second)}, // the report's replica runs 10 s behind
		{VMID: "not-seated", Boot: "b", Time: t0},
	}
	silent, pending := Unreported(reports, seats, v, t0.Add(30*time.Minute))
	if silent != 2 || pending != 1 {
		t.Errorf("Unreported = %d silent, %d pending; want 2 (silent, old-boot-only) and 1", silent, pending)
	}
	if silent, pending := Unreported(reports, seats, v, t0); silent != 0 || pending != 3 {
		t.Errorf("with the cutoff at the seats' time: %d silent, %d pending; want 0 and 3", silent, pending)
	}
}
