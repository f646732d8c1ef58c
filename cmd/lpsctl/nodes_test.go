package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store"
)

// TestNodesCLI: lpsctl nodes lists the nodes behind a release's counts,
// worst first, as a table and as JSON, and refuses an outcome it does not
// know before asking lpsd.
func TestNodesCLI(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	const v = "202604.01.3"
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, v)
	mustRun(t, with("rollout", "set", "--reason", "test", v, "--percent", "100")...)
	now := time.Now()
	if _, err := srv.store.PutReports(t.Context(), []store.Report{
		{VMID: "vm-ok", Boot: "b", SubscriptionID: "sub-a", Base: "202604.01", HotfixVersion: v, Agent: "hotfix", AgentVersion: v, Time: now},
		{VMID: "vm-bad", Boot: "b", SubscriptionID: "sub-a", Base: "202604.01", HotfixVersion: v, Agent: "hotfix", AgentVersion: v, ExitCode: 7, Time: now},
	}); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, with("nodes", "--release", v)...)
	reasons, table, ok := strings.Cut(strings.TrimSpace(out), "\n\n")
	if r := strings.Split(reasons, "\n"); !ok || len(r) != 2 || !strings.HasPrefix(r[0], "NODES") || strings.Join(strings.Fields(r[1]), " ") != "1 failed provision exited 7" {
		t.Errorf("nodes, want the failing nodes' reasons summed up first:\n%s", out)
	}
	lines := strings.Split(table, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "vm-bad ") || !strings.Contains(lines[1], "provision exited 7") || !strings.HasPrefix(lines[2], "vm-ok ") {
		t.Errorf("nodes table, want the failed node first with its reason:\n%s", out)
	}
	var doc nodesJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("nodes", "--release", v, "--outcome", "failed", "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Total != 1 || len(doc.Nodes) != 1 || doc.Nodes[0].VMID != "vm-bad" || doc.Nodes[0].ExitCode != 7 || doc.Nodes[0].Time == nil ||
		len(doc.TopReasons) != 1 || doc.TopReasons[0] != (reasonJSON{Outcome: "failed", Reason: "provision exited 7", Nodes: 1}) {
		t.Errorf("nodes --outcome failed -o json = %+v", doc)
	}
	// The incident's list: several outcomes at once.
	if err := json.Unmarshal([]byte(mustRun(t, with("nodes", "--release", v, "--outcome", "failed,fellBack,refusedIntegrity", "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Total != 1 || doc.Nodes[0].VMID != "vm-bad" {
		t.Errorf("nodes --outcome failed,fellBack,refusedIntegrity -o json = %+v, want the failed node only", doc)
	}
	if err := json.Unmarshal([]byte(mustRun(t, with("nodes", "--release", v, "--outcome", "ok,failed", "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Total != 2 {
		t.Errorf("nodes --outcome ok,failed -o json = %+v, want both nodes", doc)
	}
	if _, errOut, code := lpsctl(t, with("nodes", "--outcome", "failed,broke")...); code != exitUsage || !strings.Contains(errOut, "--outcome broke:") {
		t.Errorf("nodes --outcome failed,broke: exit %d, %q; want a usage error naming broke", code, errOut)
	}
	if _, errOut, code := lpsctl(t, with("nodes", "--outcome", "broke")...); code != exitUsage || !strings.Contains(errOut, "want one of failed, fellBack") {
		t.Errorf("nodes --outcome broke: exit %d, %q; want a usage error listing the outcomes", code, errOut)
	}
	if _, errOut, code := lpsctl(t, with("nodes", "--release", "202604.01.9")...); code != exitNotFound || !strings.Contains(errOut, "lpsctl status") {
		t.Errorf("nodes of an unknown release: exit %d, %q; want not found, pointing at status", code, errOut)
	}

	// Paged: one at a time, the next page named on stderr; --all follows
	// every page.
	out, errOut, code := lpsctl(t, with("nodes", "--release", v, "--limit", "1", "-o", "yaml")...)
	if code != exitOK || !strings.Contains(out, "vm_id: vm-bad") || strings.Contains(out, "vm-ok") || !strings.Contains(out, "next_page_token:") || !strings.Contains(errOut, "1 of 2 nodes shown; the next page: add --page") {
		t.Errorf("nodes --limit 1 -o yaml: exit %d\n%s\nstderr %q", code, out, errOut)
	}
	if err := json.Unmarshal([]byte(mustRun(t, with("nodes", "--release", v, "--limit", "1", "--all", "-o", "json")...)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Nodes) != 2 || doc.Total != 2 || doc.NextPageToken != "" || doc.Nodes[0].VMID != "vm-bad" || doc.Nodes[1].VMID != "vm-ok" {
		t.Errorf("nodes --all --limit 1 -o json = %+v, want both nodes, worst first, and no next page", doc)
	}
	// The filters, each through the CLI.
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"--base", "202604.01"}, 2},
		{[]string{"--base", "202605.01"}, 0},
		{[]string{"--subscription", "SUB-A"}, 2},
		{[]string{"--subscription", "sub-b"}, 0},
		{[]string{"--since", "1h"}, 2},
		{[]string{"--since", now.Add(time.Hour).UTC().Format(time.RFC3339)}, 0},
	} {
		if err := json.Unmarshal([]byte(mustRun(t, with(append([]string{"nodes", "-o", "json"}, tt.args...)...)...)), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Nodes) != tt.want {
			t.Errorf("nodes %v: %d nodes, want %d", tt.args, len(doc.Nodes), tt.want)
		}
	}
}

// TestPagingFault: --all follows as many pages as the listing needs, a
// page of one node at a time over more than ten thousand nodes included,
// and stops on an lpsd that repeats its token or keeps paging past twice
// what its total needs.
func TestPagingFault(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		pages       int
		size, total int64
		token, next string
		want        bool
	}{
		{"a long listing a node at a time", 10_001, 1, 10_500, "a", "b", false},
		{"pages of 1000", 30, 1000, 30_000, "a", "b", false},
		{"nodes reporting meanwhile", 15, 1000, 10_000, "a", "b", false},
		{"the same token again", 2, 1000, 30_000, "a", "a", true},
		{"past twice the pages", 71, 1000, 30_000, "a", "b", true},
		{"empty pages, new tokens", 11, 0, 0, "a", "b", true},
		{"over the most nodes", 10_001, 1000, 20_000_000, "a", "b", true},
	} {
		if got := pagingFault(tt.pages, tt.size, tt.total, tt.token, tt.next); got != tt.want {
			t.Errorf("%s: pagingFault(%d, %d, %d, %q, %q) = %v, want %v", tt.name, tt.pages, tt.size, tt.total, tt.token, tt.next, got, tt.want)
		}
	}
}
