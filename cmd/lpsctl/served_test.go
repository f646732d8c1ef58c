package main

import (
	"encoding/json"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

// TestStatusServedNowAndReplicas: status shows which replicas carry which
// labels, and per base what each part of the nodes gets now and why, with
// the fallbacks and failure rate and the rate's definition; -o json the
// same as documents.
func TestStatusServedNowAndReplicas(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, "202604.01.1")
	publishDraft(t, srv, "202604.01.2")
	mustRun(t, with("rollout", "complete", "202604.01.1", "--reason", "test")...)
	mustRun(t, with("rollout", "set", "202604.01.2", "--percent", "25", "--reason", "test")...)
	if err := srv.snap.Load(t.Context()); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, with("status")...)
	for _, want := range [][]string{
		{"REPLICA", "REGION", "DEPLOY ENV", "LAST HEARTBEAT"},
		{"lpsd-1", "(this one)", "eastus"},
		{"SERVED NOW", "NODES", "SHARE", "GETS", "ROLE", "FELL BACK", "FAILURE RATE*", "WHY"},
		{"202604.01", "all subscriptions @ eastus", "25%", "202604.01.2", "candidate", "rolling at 25%"},
		{"202604.01", "all subscriptions @ eastus", "75%", "202604.01.1", "incumbent", "complete"},
		{"* failure rate = (failed + fell back + refused as signed) / judged nodes"},
	} {
		if !hasLine(out, want...) {
			t.Errorf("status has no line with %q:\n%s", want, out)
		}
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "-o", "json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Replicas) != 1 || !st.Replicas[0].Self || st.Replicas[0].Region != "eastus" {
		t.Errorf("replicas %+v", st.Replicas)
	}
	if len(st.ServedNow) != 1 || len(st.ServedNow[0].Cohorts) != 1 {
		t.Fatalf("served_now %+v", st.ServedNow)
	}
	var got []string
	for _, s := range st.ServedNow[0].Cohorts[0].Shares {
		got = append(got, s.Version+"="+s.Role)
		if s.Version == "202604.01.2" && s.Percent != 25 {
			t.Errorf("candidate's percent %v, want 25", s.Percent)
		}
	}
	if strings.Join(got, ",") != "202604.01.2=candidate,202604.01.1=incumbent,=baked" || st.FailureRateDefinition == "" {
		t.Errorf("shares %v, definition %q", got, st.FailureRateDefinition)
	}
}

// TestScopeTypoRefused: a region no replica serves, or a subscription no
// node of was seen, is refused (exit 3) naming it, the nearest seen
// spelling and --allow-unseen, which lets it through.
func TestScopeTypoRefused(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, "202604.01.3")
	_, errOut, code := lpsctl(t, with("rollout", "set", "202604.01.3", "--percent", "5", "--regions", "eastuss", "--reason", "test")...)
	if code != exitRefused || !strings.Contains(errOut, `no live replica serves region "eastuss" (did you mean "eastus"?)`) || !strings.Contains(errOut, "--allow-unseen") {
		t.Errorf("a region typo: exit %d, %q", code, errOut)
	}
	_, errOut, code = lpsctl(t, with("rollout", "set", "202604.01.3", "--percent", "5", "--subscriptions", subA, "--reason", "test")...)
	if code != exitRefused || !strings.Contains(errOut, `no node of subscription "`+subA+`" was seen in the last 24 h`) {
		t.Errorf("a subscription no node has: exit %d, %q", code, errOut)
	}
	mustRun(t, with("rollout", "set", "202604.01.3", "--percent", "5", "--subscriptions", subA, "--allow-unseen", "--reason", "new cluster")...)
	// A plan sets no scope: the scope forced above is not checked again.
	mustRun(t, with("rollout", "plan", "202604.01.3", "--steps", "5:1h:10,100:1h:20", "--reason", "new cluster")...)
}

// hasLine reports whether a line of out holds every part, in order.
func hasLine(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}

// TestPrintReplicaClocks: the replicas table says how old each heartbeat
// was, or how far ahead, and marks the replicas whose stamped times the
// looks read corrected, with what to do.
func TestPrintReplicaClocks(t *testing.T) {
	t.Parallel()
	age := func(d time.Duration) *int64 { n := d.Milliseconds(); return &n }
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	printReplicas(tw, []*adminv1.Replica{
		{Id: "a", Self: true, HeartbeatAgeMs: age(2100 * time.Millisecond)},
		{Id: "b", HeartbeatAgeMs: age(3 * time.Minute), ClockCorrected: true},
		{Id: "c", HeartbeatAgeMs: age(-time.Minute)},
		{Id: "d"},
	})
	tw.Flush()
	out := b.String()
	for _, want := range [][]string{
		{"REPLICA", "CLOCK"},
		{"a (this one)", "beat 2s ago"},
		{"b", "beat 3m0s ago *"},
		{"c", "ahead 1m0s"},
		{"* its clock is behind", "fix its time sync"},
	} {
		if !hasLine(out, want...) {
			t.Errorf("no line with %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "d" && (f[len(f)-1] != "-" || strings.Contains(l, "*")) {
			t.Errorf("a replica without a heartbeat: %q", l)
		}
	}
}
