package autopilot

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/memstore"
)

// put stores r as published.
func put(t *testing.T, st *memstore.Store, r rollout.Release) {
	t.Helper()
	if _, err := st.PutRelease(t.Context(), r, 0, store.AuditEntry{Actor: "op", Action: "publish", Target: r.Version}, nil); err != nil {
		t.Fatal(err)
	}
}

func expiring(version string, state rollout.State, pct int, notAfter time.Time) rollout.Release {
	return rollout.Release{Version: version, Base: version[:9], Envelope: json.RawMessage(`{}`), NotAfter: notAfter, Rollout: rollout.Rollout{State: state, Percent: pct}}
}

// expireEntries returns the store's audit entries of action expire.
func expireEntries(t *testing.T, st *memstore.Store) []store.AuditEntry {
	t.Helper()
	all, err := st.Audit(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, e := range all {
		if e.Action == ActionExpire {
			out = append(out, e)
		}
	}
	return out
}

// TestAuditsAnExpiryOnce: a release whose envelope expires while it is
// served changes what its nodes get: the look that finds it writes one
// audit entry by lpsd with the record before and after, what the nodes
// got and get, and a reason; never a second, whether the same autopilot
// looks again, another replica or a restart looks (a new Autopilot), or a
// replica judged on what it read before the first one wrote. Releases
// whose expiry changed nothing (superseded, halted, draft, revoked) get
// none.
func TestAuditsAnExpiryOnce(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	expiry := t0.Add(time.Hour)
	later := t0.Add(30 * 24 * time.Hour)
	incumbent := expiring("202604.01.2", rollout.Complete, 100, expiry)
	revoked := expiring("202604.01.4", rollout.Complete, 100, expiry)
	revoked.Revoked = true
	for _, r := range []rollout.Release{
		expiring("202604.01.1", rollout.Complete, 100, expiry), // superseded by .2
		incumbent,
		expiring("202604.01.3", rollout.Rolling, 10, later),
		revoked,
		expiring("202605.01.1", rollout.Halted, 50, expiry),
		expiring("202605.01.2", rollout.Draft, 0, expiry),
	} {
		put(t, st, r)
	}
	now := expiry.Add(time.Minute)
	cfg := Config{Now: func() time.Time { return now }, Places: nil}
	stale, _, err := st.Releases(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	changes, err := New(st, cfg).Step(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Version != incumbent.Version || changes[0].Action != ActionExpire {
		t.Fatalf("changes = %+v, want the incumbent's expiry alone", changes)
	}
	entries := expireEntries(t, st)
	if len(entries) != 1 {
		t.Fatalf("%d expire entries, want 1", len(entries))
	}
	e := entries[0]
	if e.Actor != Actor || e.Target != incumbent.Version || !strings.Contains(e.Reason, "expired at "+expiry.Format(time.RFC3339)) ||
		!strings.Contains(e.Reason, "it was served to 90% of base 202604.01's nodes") || !strings.Contains(e.Reason, "the baked agent 90%") {
		t.Errorf("entry %+v", e)
	}
	var before, after rollout.Release
	if json.Unmarshal(e.Before, &before) != nil || json.Unmarshal(e.After, &after) != nil || before.ExpiryRecorded || !after.ExpiryRecorded {
		t.Errorf("before %s, after %s: want the record unmarked, then marked", e.Before, e.After)
	}
	if d := rollout.DescribeChange(string(e.Before), string(e.After)); !strings.Contains(d, "expired at") {
		t.Errorf("DescribeChange = %q", d)
	}
	var ev ExpiryEvidence
	if err := json.Unmarshal(e.Evidence, &ev); err != nil {
		t.Fatal(err)
	}
	want := []ExpiryCohort{{Places: []rollout.Place{{}}, Before: []Part{{"202604.01.3", 10}, {"202604.01.2", 90}}, After: []Part{{"202604.01.3", 10}, {"baked", 90}}}}
	if diff := cmp.Diff(want, ev.Cohorts); diff != "" || !ev.NotAfter.Equal(expiry) {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}

	// The same autopilot, a restart or another replica, and one that read
	// the releases before the entry was written: nothing more.
	for i, ap := range []*Autopilot{New(st, cfg), New(st, cfg)} {
		if c, err := ap.Step(t.Context()); err != nil || len(c) != 0 {
			t.Errorf("look %d: %+v, %v; want nothing", i, c, err)
		}
	}
	if c, errs := New(st, cfg).expiries(t.Context(), stale, now); len(c) != 0 || len(errs) != 0 {
		t.Errorf("a look on what was read before the entry: %+v, %v; want nothing", c, errs)
	}
	if n := len(expireEntries(t, st)); n != 1 {
		t.Errorf("%d expire entries, want 1", n)
	}
}

// TestExpiryPlaces: with the serving replicas' places, an expiry is judged
// where nodes are served: a release scoped to a region no replica serves
// reached nobody, so its expiry is not audited; one scoped to a served
// region is.
func TestExpiryPlaces(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	expiry := t0.Add(time.Hour)
	nowhere := expiring("202604.01.1", rollout.Complete, 100, expiry)
	nowhere.Rollout.Regions = []string{"westus"}
	here := expiring("202605.01.1", rollout.Rolling, 20, expiry)
	here.Rollout.Regions = []string{"eastus"}
	put(t, st, nowhere)
	put(t, st, here)
	now := expiry
	ap := New(st, Config{Now: func() time.Time { return now }, Places: func(context.Context) []rollout.Place { return []rollout.Place{{Region: "eastus"}} }})
	c, err := ap.Step(t.Context())
	if err != nil || len(c) != 1 || c[0].Version != here.Version {
		t.Fatalf("changes = %+v, %v; want the eastus release's expiry only", c, err)
	}
}
