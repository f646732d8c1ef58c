package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store"
)

// publishDraft signs and publishes version as a draft on srv.
func publishDraft(t *testing.T, srv *testServer, version string) {
	t.Helper()
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "release.key"), filepath.Join(dir, "release.pub")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", pub)
	agent := fakeAgent(t, dir, "anc-amd64", version, "")
	env := filepath.Join(dir, "release.json")
	mustRun(t, "release", "sign", "--key", priv, "--base", version[:9], "--version", version,
		"--artifact", "linux/amd64="+agent+",https://blob.example.com/anc/amd64", "--valid-for", "720h", "--out", env)
	mustRun(t, append([]string{"release", "publish", "--envelope", env}, srv.conn()...)...)
}

// TestRolloutPlanCanary: a plan with a canary of nodes is set, shown with
// its seats in status and explained per node.
func TestRolloutPlanCanary(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, v)

	var rel releaseJSON
	out := mustRun(t, with("rollout", "plan", v, "--steps", "2n:10m:2, 50%:1h:10,100:1h:20", "--json")...)
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatalf("rollout plan --json: %v\n%s", err, out)
	}
	if rel.State != "rolling" || rel.Percent != 0 || rel.Plan == nil || len(rel.Plan.Steps) != 3 ||
		rel.Plan.Steps[0].Nodes != 2 || rel.Plan.Steps[0].Percent != 0 || rel.Plan.Steps[1].Percent != 50 {
		t.Fatalf("rollout plan --json = %+v, want rolling at 0%% on a canary of 2 nodes, then 50%% and 100%%", rel)
	}

	const vmSeated, vmOther = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0", "1f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
	if _, err := srv.store.TakeSeat(t.Context(), v, store.Seat{VMID: vmSeated, Since: time.Now()}, 2); err != nil {
		t.Fatal(err)
	}
	srv.reload(t)
	out = mustRun(t, with("status")...)
	if !strings.Contains(out, "1/3 canary 1/2 nodes") {
		t.Errorf("status does not show 1 of the canary's 2 seats held:\n%s", out)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "--json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Releases) != 1 || st.Releases[0].CanarySeats != 1 {
		t.Fatalf("status --json releases = %+v, want canary_seats 1", st.Releases)
	}
	// The text's "1/3" is JSON's index 0 into steps (doc.go).
	if p := st.Releases[0].Plan; p == nil || p.Step != 0 || p.Steps[p.Step].Nodes != 2 {
		t.Errorf("status --json plan = %+v, want step 0 indexing the canary of 2", p)
	}

	for vm, want := range map[string]string{
		vmSeated: "holds a canary seat",
		vmOther:  "(1 held): it takes a free one on its next request",
	} {
		out := mustRun(t, with("explain", "--vm-id", vm, "--subscription", subA)...)
		if !strings.Contains(out, want) || !strings.Contains(out, "step 1/3, a canary of 2 nodes") {
			t.Errorf("explain %s lacks %q and the plan's canary step:\n%s", vm, want, out)
		}
	}

	for steps, want := range map[string]string{
		"2x:10m:2":         "size \"2x\": want a percentage (10) or a number of nodes (20n, at most 10000)",
		"20000n:1h:1":      "at most 10000",
		"5:1h:9999999999":  "want a number of reports",
		"5:1h:10,3n:1h:1":  "canary steps come first",
		"3n:1h:4,100:1h:5": "it could never advance",
	} {
		_, errOut, code := lpsctl(t, with("rollout", "plan", v, "--steps", steps)...)
		if code == exitOK || !strings.Contains(errOut, want) {
			t.Errorf("--steps %s: exit %d, stderr %q; want a refusal saying %q", steps, code, errOut, want)
		}
	}
}
