package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// Config returns a valid draft configuration of component at version
// whose envelope has insignificant whitespace, so byte-exact storage
// shows.
func Config(component string, version int64) rollout.Config {
	return rollout.Config{
		Component:   component,
		Version:     version,
		Envelope:    json.RawMessage(`{ "payload": "` + rollout.ConfigID(component, version) + `",  "sig": "c2ln" }`),
		Rollout:     rollout.Rollout{State: rollout.Draft},
		NotAfter:    time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
		PublishedAt: time.Date(2026, 4, 1, 12, 30, 45, 123456789, time.UTC),
		UpdatedAt:   time.Date(2026, 4, 1, 12, 30, 45, 123456789, time.UTC),
	}
}

// MustPutConfig writes c with PutConfig and fails the test on error.
func MustPutConfig(t testing.TB, s store.Store, c rollout.Config, ifRev int64) int64 {
	t.Helper()
	rev, err := s.PutConfig(t.Context(), c, ifRev, Entry("publish", c.ID()))
	if err != nil {
		t.Fatalf("PutConfig(%s, %d) = %v", c.ID(), ifRev, err)
	}
	return rev
}

func testConfigsRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, _, err := s.Config(ctx, "localDNS", 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Config(missing) = %v, want ErrNotFound", err)
	}
	c := Config("localDNS", 2)
	c.Rollout = rollout.Rollout{State: rollout.Rolling, Percent: 5, DeployEnvs: []string{"prod"},
		Plan: &rollout.Plan{Timed: true, Steps: []rollout.PlanStep{{Percent: 5, Bake: time.Hour}, {Percent: 100}}, StepSince: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)}}
	rev := MustPutConfig(t, s, c, 0)
	MustPutConfig(t, s, Config("localDNS", 10), 0)
	MustPutConfig(t, s, Config("aComponent", 1), 0)
	got, gotRev, err := s.Config(ctx, "localDNS", 2)
	if err != nil {
		t.Fatal(err)
	}
	if gotRev != rev {
		t.Errorf("Config revision = %d, want %d", gotRev, rev)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("Config() mismatch (-want +got):\n%s", diff)
	}
	list, listRev, err := s.Configs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID())
	}
	if diff := cmp.Diff([]string{"aComponent@1", "localDNS@2", "localDNS@10"}, ids); diff != "" {
		t.Errorf("Configs() order (-want +got):\n%s", diff)
	}
	if listRev < rev {
		t.Errorf("Configs revision %d is behind a write's %d", listRev, rev)
	}
	if _, err := s.PutConfig(ctx, rollout.Config{Component: "local-dns", Version: 1, Envelope: []byte(`{}`), Rollout: rollout.Rollout{State: rollout.Draft}}, 0, Entry("publish", "x")); err == nil {
		t.Error("PutConfig(invalid name) = nil error")
	}
}

func testConfigsCompareAndSwap(t *testing.T, s store.Store) {
	ctx := t.Context()
	rev := MustPutConfig(t, s, Config("localDNS", 1), 0)
	if _, err := s.PutConfig(ctx, Config("localDNS", 1), 0, Entry("publish", "localDNS@1")); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutConfig(exists, 0) = %v, want ErrConflict", err)
	}
	c := Config("localDNS", 1)
	c.Rollout.State = rollout.Complete
	c.Rollout.Percent = 100
	next, err := s.PutConfig(ctx, c, rev, Entry("complete", c.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if next <= rev {
		t.Errorf("revision after a write %d, want above %d", next, rev)
	}
	if _, err := s.PutConfig(ctx, c, rev, Entry("complete", c.ID())); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutConfig(stale revision) = %v, want ErrConflict", err)
	}
	entries := allAudit(t, s)
	if len(entries) != 2 || entries[1].Action != "complete" || entries[1].Target != "localDNS@1" {
		t.Errorf("audit after two writes = %+v", entries)
	}
}

func testConfigsWatch(t *testing.T, s store.Store) {
	w := s.Watch(t.Context())
	MustPutConfig(t, s, Config("localDNS", 1), 0)
	WaitSignal(t, w)
}

func testConfigsApart(t *testing.T, s store.Store) {
	ctx := t.Context()
	MustPut(t, s, Release("202604.01.1"), 0)
	_, relRev, err := s.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfgRev := MustPutConfig(t, s, Config("localDNS", 1), 0)
	rels, _, err := s.Releases(ctx)
	if err != nil || len(rels) != 1 {
		t.Fatalf("Releases() = %d releases, %v; want the one release", len(rels), err)
	}
	configs, _, err := s.Configs(ctx)
	if err != nil || len(configs) != 1 {
		t.Fatalf("Configs() = %d configs, %v; want the one config", len(configs), err)
	}
	// What a snapshot compares: the highest of the two revisions moves
	// with either kind of write.
	if cfgRev <= relRev {
		t.Errorf("a config written after a release has revision %d, not above the release's %d", cfgRev, relRev)
	}
}
