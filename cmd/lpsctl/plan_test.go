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
	mustRun(t, append([]string{"release", "publish", "--reason", "test", "--envelope", env}, srv.conn()...)...)
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
	out := mustRun(t, with("rollout", "plan", "--reason", "test", v, "--steps", "2n:10m:2, 50%:1h:10,100:1h:20", "--json")...)
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatalf("rollout plan --json: %v\n%s", err, out)
	}
	if rel.State != "rolling" || rel.Percent != 0 || rel.Plan == nil || len(rel.Plan.Steps) != 3 ||
		rel.Plan.Steps[0].Nodes != 2 || rel.Plan.Steps[0].Percent != 0 || rel.Plan.Steps[1].Percent != 50 {
		t.Fatalf("rollout plan --json = %+v, want rolling at 0%% on a canary of 2 nodes, then 50%% and 100%%", rel)
	}

	const vmSeated, vmOther = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0", "1f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
	if _, err := srv.store.TakeSeat(t.Context(), v, store.Seat{VMID: vmSeated, Since: time.Now()}, store.SeatLimit{Seats: 2}); err != nil {
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
		_, errOut, code := lpsctl(t, with("rollout", "plan", "--reason", "test", v, "--steps", steps)...)
		if code == exitOK || !strings.Contains(errOut, want) {
			t.Errorf("--steps %s: exit %d, stderr %q; want a refusal saying %q", steps, code, errOut, want)
		}
	}
}

// TestRolloutPlanSkipsNoCanary: the README's `rollout set --percent 5`
// then a plan with a canary is refused with what to type; --dry-run shows
// the steps, baseline and deadlines and changes nothing; --from-step
// starts where asked; rollout skip needs a reason and is audited.
func TestRolloutPlanSkipsNoCanary(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.4"
	const steps = "20n:30m:20,10:1h:100,100:2h:500"
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, v)
	mustRun(t, with("rollout", "set", "--reason", "test", v, "--percent", "5")...)

	_, errOut, code := lpsctl(t, with("rollout", "plan", "--reason", "test", v, "--steps", steps)...)
	if code != exitRefused || !strings.Contains(errOut, "past step 1 of the plan (a canary of 20 nodes)") || !strings.Contains(errOut, "add --from-step 2") {
		t.Errorf("plan with a canary on a release at 5%%: exit %d, stderr %q; want exit %d naming the canary and --from-step 2", code, errOut, exitRefused)
	}

	out := mustRun(t, with("rollout", "plan", v, "--steps", steps, "--from-step", "2", "--dry-run")...)
	for _, want := range []string{
		"dry run, nothing changed: " + v + " would be rolling at 10%, at step 2/3 (10%)",
		"1/3   a canary of 20 nodes  30m   20       skipped",
		"complete at the soonest",
		"ceiling 0.2 (--max-failure)", "margin of 0.05 (--margin)", "the incumbent of base 202604.01", "nothing is judged on fewer than 20 reports",
		"has not reported within 30m counts as silent",
		"2/3   10%                   1h    100",
		"pauses the release as inconclusive (DEADLINE)",
		"(as of now the baked agent)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--dry-run output lacks %q:\n%s", want, out)
		}
	}
	// The plan's own ceilings and deadline reach lpsd.
	out = mustRun(t, with("rollout", "plan", v, "--steps", steps, "--from-step", "2", "--dry-run", "--max-silent", "0.1", "--max-delivery", "0.3", "--deadline", "2h", "--silent-after", "45m")...)
	for _, want := range []string{"ceilings of 0.1 and 0.3", "has not reported within 45m counts as silent", "2h after its bake pauses the release as inconclusive"} {
		if !strings.Contains(out, want) {
			t.Errorf("--dry-run with --max-silent, --max-delivery and --deadline lacks %q:\n%s", want, out)
		}
	}
	if _, errOut, code := lpsctl(t, with("rollout", "plan", v, "--steps", steps, "--from-step", "2", "--dry-run", "--max-silent", "1.5")...); code != exitError || !strings.Contains(errOut, "max silent rate 1.5 out of range") {
		t.Errorf("--max-silent 1.5: exit %d, %q; want lpsd refusing it, naming the range", code, errOut)
	}
	var dry releaseJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("rollout", "plan", v, "--steps", steps, "--from-step", "2", "--dry-run", "-o", "json")...)), &dry); err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || dry.Percent != 10 || dry.Plan == nil || dry.Plan.Step != 1 || dry.Preview == nil || len(dry.Preview.Steps) != 3 ||
		dry.Preview.Steps[0].EarliestStart != nil || dry.Preview.Steps[1].EarliestStart == nil || dry.Preview.Baseline.Floor != 20 ||
		dry.Preview.EarliestComplete == nil || !dry.Preview.EarliestComplete.Equal(dry.Preview.Steps[1].EarliestStart.Add(3*time.Hour)) {
		t.Errorf("--dry-run -o json = %+v, want step index 1 at 10%%, the canary skipped, 3h to completion, floor 20", dry)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "--json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if r := st.Releases[0]; r.Plan != nil || r.Percent != 5 {
		t.Errorf("after dry runs, status = %+v, want no plan at 5%%", r)
	}

	if _, errOut, code := lpsctl(t, with("rollout", "plan", "--reason", "test", v, "--steps", steps, "--from-step", "4")...); code != exitUsage || !strings.Contains(errOut, "--steps has 3 steps") {
		t.Errorf("--from-step 4 of 3: exit %d, stderr %q; want a usage error", code, errOut)
	}
	out = mustRun(t, with("rollout", "plan", v, "--steps", steps, "--from-step", "2", "--reason", "canary run by hand")...)
	if !strings.Contains(out, "plan put in place: step 2/3 (10%)") {
		t.Errorf("plan --from-step 2 output:\n%s", out)
	}

	if _, errOut, code := lpsctl(t, with("rollout", "skip", v)...); code != exitUsage || !strings.Contains(errOut, "--reason is required") {
		t.Errorf("skip without --reason: exit %d, stderr %q; want a usage error", code, errOut)
	}
	if _, errOut, code := lpsctl(t, with("rollout", "skip", v, "--reason", "x", "--if-revision", "1")...); code != exitRefused || !strings.Contains(errOut, "changed since revision 1") {
		t.Errorf("skip at a stale revision: exit %d, stderr %q; want refused", code, errOut)
	}
	var skipped releaseJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("rollout", "skip", v, "--reason", "10% looks fine by hand", "--json")...)), &skipped); err != nil {
		t.Fatal(err)
	}
	if skipped.SkippedStep == nil || *skipped.SkippedStep != 1 || skipped.Plan.Step != 2 || skipped.Percent != 100 {
		t.Errorf("skip --json = %+v, want skipped_step 1, now step index 2 at 100%%", skipped)
	}
	if _, errOut, code := lpsctl(t, with("rollout", "skip", v, "--reason", "again")...); code != exitRefused || !strings.Contains(errOut, "lpsctl rollout complete "+v) {
		t.Errorf("skip at the last step: exit %d, stderr %q; want refused, naming rollout complete", code, errOut)
	}
	out = mustRun(t, with("audit", "--action", "skip")...)
	if !strings.Contains(out, "plan step 2/3→3/3") || !strings.Contains(out, "10% looks fine by hand") {
		t.Errorf("audit --action skip:\n%s", out)
	}
}

// TestResumeAfterHaltCLI: a resume after a halt says from when reports
// count; a release halted while complete resumes to complete.
func TestResumeAfterHaltCLI(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.5"
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, v)
	mustRun(t, with("rollout", "complete", "--reason", "test", v)...)
	var halted releaseJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("rollout", "halt", "--reason", "test", v, "--json")...)), &halted); err != nil {
		t.Fatal(err)
	}
	if halted.HaltedFrom != "complete" || halted.EvidenceSince != nil {
		t.Errorf("halt --json = %+v, want halted_from complete and no evidence window yet", halted)
	}
	out := mustRun(t, with("rollout", "resume", "--reason", "test", v)...)
	if !strings.Contains(out, "complete at 100%") || !strings.Contains(out, "counting reports accepted since") {
		t.Errorf("resume of a release halted while complete:\n%s\nwant it complete, counting reports from the resume", out)
	}
	out = mustRun(t, with("audit", "--action", "resume")...)
	if !strings.Contains(out, "state halted→complete") || !strings.Contains(out, "reports accepted before it do not count") {
		t.Errorf("audit of the resume:\n%s", out)
	}
}
