package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestIntegrationAbuse runs the whole tool at small sizes against the real
// lpsd, so that it cannot rot: every phase runs, probes are served in the
// baseline, and the attackers hold their connections.
func TestIntegrationAbuse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lpsd")
	}
	var out, errOut bytes.Buffer
	args := []string{"-o", "json", "-probes", "2", "-baseline", "1s", "-silent", "20", "-silent-dur", "2s", "-idle", "20", "-idle-dur", "2s",
		"-trickle", "20", "-trickle-dur", "2s", "-open-call", "20", "-open-call-dur", "2s"}
	if code := run(t.Context(), args, &out, &errOut); code != 0 {
		t.Fatalf("run(%q) = %d, want 0; stderr:\n%s", args, code, errOut.String())
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("parse -o json output: %v\n%s", err, out.String())
	}
	var names []string
	for _, p := range r.Phases {
		names = append(names, p.Name)
	}
	if len(r.Phases) != 5 {
		t.Fatalf("phases = %q, want baseline, silent, idle-h2, trickle, open-call", names)
	}
	if b := r.Phases[0].Probe; b.Calls == 0 || b.Served == 0 {
		t.Errorf("baseline probe = %+v, want calls served", b)
	}
	for _, p := range r.Phases[1:] {
		if p.Attacker == nil || p.Attacker.PeakOpen != 20 {
			t.Errorf("phase %s attacker = %+v, want 20 connections held", p.Name, p.Attacker)
		}
		if p.Probe.Calls == 0 {
			t.Errorf("phase %s: no probe calls", p.Name)
		}
	}
}
