package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/test/harness"
)

// previousBuild is the commit whose lpsd runs beside this one in
// TestIntegrationMixedVersions: the build "Closed loop v2" was filed
// against, before served records, beats, the election, the freeze, reason
// codes, evidence windows and approvals were stored.
const previousBuild = "78eeaa8"

// buildPrevious builds lpsd and lpsctl of commit rev from this
// repository's history into dir, or says why it cannot.
func buildPrevious(ctx context.Context, dir, rev string) (harness.Binaries, error) {
	var b harness.Binaries
	root, err := harness.RepoRoot()
	if err != nil {
		return b, err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return b, err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return b, fmt.Errorf("git archive %s: %v\n%s", rev, err, out)
	}
	b.LPSD, b.LPSCtl = filepath.Join(dir, "lpsd-"+rev), filepath.Join(dir, "lpsctl-"+rev)
	for bin, pkg := range map[string]string{b.LPSD: "./cmd/lpsd", b.LPSCtl: "./cmd/lpsctl"} {
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			return b, fmt.Errorf("build %s at %s: %v\n%s", pkg, rev, err, out)
		}
	}
	return b, nil
}

// TestIntegrationMixedVersions runs the previous build's lpsd beside this
// one on one etcd, as during a rolling upgrade, both directions: a release
// published and rolled out through the new replica is served to a node by
// the old one, whose report (stored by the old code) the new one counts;
// a halt through the old replica (which rewrites the record in its
// encoding, without the fields it does not know) stops the new replica
// serving it, and its audit entry reads there; the records only the new
// build writes (served records, beats, the election and heartbeats, a
// freeze) do not stop the old replica serving or answering.
func TestIntegrationMixedVersions(t *testing.T) {
	integration(t)
	t.Parallel()
	if shallow, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output(); err == nil && strings.TrimSpace(string(shallow)) == "true" {
		t.Skipf("a shallow clone holds no %s to build (clone the repository with its history to run this test)", previousBuild)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	old, err := buildPrevious(ctx, t.TempDir(), previousBuild)
	if err != nil {
		t.Fatal(err)
	}
	old.IMDS = env.bins.IMDS
	endpoints := etcdtest.Start(t)
	spec := "etcd:" + strings.Join(endpoints, ",")
	s := newStack(t, stackOpts{store: spec, lpsdFlags: []string{"--autopilot-interval=100ms"}})
	prev, err := harness.StartLPSD(t.Context(), old, s.dir, harness.LPSDOptions{
		Name: "lpsd-" + previousBuild, IMDSRoots: s.imds.RootsFile, Store: spec, TLS: s.lpsd.TLS, Region: "eastus",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prev.Stop(10 * time.Second) })

	// New → old: the old replica serves what the new one published.
	s.publish(hotfix1, "", 100)
	s.waitSynced(prev)
	n := s.node(nodeOpts{})
	expect(t, n, s.launch(n, "", prev.GRPCAddr), hotfix1, "lpsRead", "staged")
	// The old replica stored the node's report; the new one counts it.
	deadline := time.Now().Add(15 * time.Second)
	for s.releaseCounts(hotfix1).OK < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the new replica never counted the report the old one took: %+v\nold lpsd log:\n%s", s.releaseCounts(hotfix1), prev.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A node served by the new replica writes a served record the old
	// build never wrote; a freeze is a record kind it never read.
	n2 := s.node(nodeOpts{})
	expect(t, n2, s.launch(n2, "", ""), hotfix1, "lpsRead", "staged")
	s.ctl("freeze", "--reason", "e2e: mixed versions")
	s.ctl("unfreeze", "--reason", "e2e: mixed versions")

	// Old → new: a halt through the old replica's admin API (its lpsctl),
	// written in its encoding, stops the new replica serving the release.
	if _, err := prev.Ctl(t.Context(), "rollout", "halt", hotfix1, "--reason", "e2e: halted by the previous build"); err != nil {
		t.Fatal(err)
	}
	s.waitSynced(s.lpsd)
	if state, _ := s.releaseState(hotfix1); state != "halted" {
		t.Fatalf("the new replica reads %s as %s after the old one halted it", hotfix1, state)
	}
	n3 := s.node(nodeOpts{})
	expect(t, n3, s.launch(n3, "", ""), bakedVersion, "noHotfixAvailable", "")
	if audit := s.ctl("audit"); !strings.Contains(audit, "halted by the previous build") {
		t.Errorf("the new replica's audit lacks the old one's halt:\n%s", audit)
	}
	// The old replica still serves and answers: a node through it now
	// gets nothing, and its status reads the store the new one wrote.
	n4 := s.node(nodeOpts{})
	expect(t, n4, s.launch(n4, "", prev.GRPCAddr), bakedVersion, "noHotfixAvailable", "")
	if st, err := prev.Ctl(t.Context(), "status"); err != nil || !strings.Contains(st, hotfix1) {
		t.Errorf("the old replica's status = %v:\n%s", err, st)
	}
	if log := s.lpsd.Log(); strings.Contains(log, "could not be read") {
		t.Errorf("the new replica skipped records it could not read:\n%s", log)
	}
	if log := prev.Log(); strings.Contains(log, "panic") {
		t.Errorf("the old replica panicked:\n%s", log)
	}
}
