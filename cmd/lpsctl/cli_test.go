package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
)

func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out := mustRun(t, "completion", shell)
		if !strings.Contains(out, "lpsctl") || len(out) < 500 {
			t.Errorf("completion %s printed %d bytes:\n%.200s", shell, len(out), out)
		}
	}
	// Commands and, from a reachable lpsd, the versions it has.
	if out := mustRun(t, "__complete", "roll"); !strings.Contains(out, "rollout\t") {
		t.Errorf("completing roll: %q", out)
	}
	if out := mustRun(t, "__complete", "status", "-o", ""); !strings.Contains(out, "text\njson\nyaml\n") {
		t.Errorf("completing -o: %q", out)
	}
	srv := startServer(t)
	publishDraft(t, srv, "202604.01.3")
	out := mustRun(t, append([]string{"__complete", "rollout", "set"}, append(srv.conn(), "2026")...)...)
	if !strings.Contains(out, "202604.01.3\tdraft") {
		t.Errorf("completing a version: %q", out)
	}
	// An unreachable lpsd completes nothing, quickly, and without an error.
	out = mustRun(t, "__complete", "revoke", "--server", "127.0.0.1:1", "--token-file", srv.token, "")
	if strings.Contains(out, "202604") || !strings.Contains(out, ":4") {
		t.Errorf("completing from nowhere: %q", out)
	}
}

// TestCompletionOffersWhatTheCommandCanMove: a transition command
// completes only the releases the state machine lets it move: resume not a
// complete or revoked release, complete not a halted one.
func TestCompletionOffersWhatTheCommandCanMove(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	states := map[string][]string{
		"202604.01.3": nil, // draft
		"202604.01.4": {"pause"},
		"202604.01.5": {"halt"},
		"202604.01.6": {"complete"},
		"202604.01.7": {"revoke"},
	}
	for v, cmds := range states {
		publishDraft(t, srv, v)
		for _, c := range cmds {
			if c == "revoke" {
				mustRun(t, with("revoke", "--reason", "test", v)...)
				continue
			}
			mustRun(t, with("rollout", "set", "--reason", "test", v, "--percent", "5")...)
			mustRun(t, with("rollout", c, "--reason", "test", v)...)
		}
	}
	offered := func(cmd string) []string {
		t.Helper()
		var got []string
		for _, line := range strings.Split(mustRun(t, append(append([]string{"__complete", "rollout", cmd}, srv.conn()...), "2026")...), "\n") {
			if v, _, ok := strings.Cut(line, "\t"); ok && strings.HasPrefix(v, "2026") {
				got = append(got, v)
			}
		}
		slices.Sort(got)
		return got
	}
	for cmd, want := range map[string][]string{
		"resume":   {"202604.01.3", "202604.01.4", "202604.01.5"},
		"complete": {"202604.01.3", "202604.01.4"},
		"halt":     {"202604.01.3", "202604.01.4", "202604.01.6"},
		"pause":    nil,
	} {
		if diff := cmp.Diff(want, offered(cmd)); diff != "" {
			t.Errorf("rollout %s completes (-want +got):\n%s", cmd, diff)
		}
	}
}

func TestOutputFormats(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	publishDraft(t, srv, "202604.01.3")
	srv.reload(t)
	asJSON := mustRun(t, append([]string{"status", "--json"}, srv.conn()...)...)
	if o := mustRun(t, append([]string{"status", "-o", "json"}, srv.conn()...)...); o != asJSON {
		t.Errorf("-o json and --json differ:\n%s\n%s", o, asJSON)
	}
	var st statusJSON
	y := mustRun(t, append([]string{"status", "-o", "yaml"}, srv.conn()...)...)
	if err := yaml.Unmarshal([]byte(y), &st); err != nil || st.Region != "eastus" || len(st.Releases) != 1 || st.Releases[0].Version != "202604.01.3" {
		t.Errorf("status -o yaml = %+v, %v:\n%s", st, err, y)
	}
	if !strings.Contains(y, "version: 202604.01.3\n") {
		t.Errorf("status -o yaml is not YAML with the JSON field names:\n%s", y)
	}
}

// TestInterruptedChange: Ctrl-C while a change is in flight exits 130 and
// says the change may or may not have applied, and how to check.
func TestInterruptedChange(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	srv := startServerWith(t, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := req.(*adminv1.TransitionRequest); ok {
			arrived <- struct{}{}
			<-ctx.Done() // a server too slow to answer before Ctrl-C
			return nil, ctx.Err()
		}
		return h(ctx, req)
	})
	publishDraft(t, srv, "202604.01.3")
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() {
		<-arrived
		cancel(interrupted{os.Interrupt})
	}()
	var out, errOut bytes.Buffer
	code := run(ctx, append([]string{"rollout", "halt", "--reason", "test", "202604.01.3"}, srv.conn()...), &out, &errOut)
	if code != exitInterrupted || !strings.Contains(errOut.String(), "lpsctl rollout halt: interrupted: the change may or may not have been applied; check with 'lpsctl status' or 'lpsctl audit --target 202604.01.3'\n") {
		t.Errorf("interrupted halt: exit %d, stderr %q", code, errOut.String())
	}
	// A change whose answer times out may have been applied too.
	go func() { <-arrived }()
	_, errOut2, code := lpsctl(t, append([]string{"rollout", "halt", "--reason", "test", "202604.01.3", "--timeout", "200ms"}, srv.conn()...)...)
	if code != exitError || !strings.Contains(errOut2, "(DeadlineExceeded): the change may or may not have been applied; check with 'lpsctl status' or 'lpsctl audit --target 202604.01.3' (a slow lpsd may need a longer --timeout)") {
		t.Errorf("timed-out halt: exit %d, stderr %q", code, errOut2)
	}
	// A read is just interrupted.
	ctx, stop := interruptAfter(t, 50*time.Millisecond)
	defer stop()
	errOut.Reset()
	code = run(ctx, append([]string{"status", "--watch"}, srv.conn()...), &out, &errOut)
	if code != exitInterrupted || errOut.String() != "lpsctl status: interrupted\n" {
		t.Errorf("interrupted watch: exit %d, stderr %q", code, errOut.String())
	}
}

// TestHelp: every command has help that exits 0, shows each default once
// and lists the connection flags apart.
func TestHelp(t *testing.T) {
	t.Parallel()
	root := newRoot(&env{})
	var paths [][]string
	var visit func(path []string, cmds []*cobra.Command)
	visit = func(path []string, cmds []*cobra.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			p := append(append([]string(nil), path...), c.Name())
			paths = append(paths, p)
			visit(p, c.Commands())
		}
	}
	visit(nil, root.Commands())
	if len(paths) < 15 {
		t.Fatalf("found %d commands", len(paths))
	}
	for _, p := range paths {
		out, errOut, code := lpsctl(t, append(p, "-h")...)
		if code != exitOK || errOut != "" || !strings.Contains(out, "Usage:\n  lpsctl "+strings.Join(p, " ")) {
			t.Errorf("lpsctl %s -h: exit %d, stderr %q:\n%s", strings.Join(p, " "), code, errOut, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "default") > 1 {
				t.Errorf("lpsctl %s -h: a default twice: %q", strings.Join(p, " "), line)
			}
		}
	}
	out := mustRun(t, "rollout", "plan", "-h")
	for _, want := range []string{"--silent-after duration", "(default 30m)", "\nConnection flags:\n", "--timeout duration", "(default 30s)", "Examples:\n  lpsctl rollout plan"} {
		if !strings.Contains(out, want) {
			t.Errorf("rollout plan -h lacks %q:\n%s", want, out)
		}
	}
	if out := mustRun(t, "rollout", "-h"); !strings.Contains(out, "  set ") || !strings.Contains(out, "  halt ") {
		t.Errorf("rollout -h lists no subcommands:\n%s", out)
	}
}

const (
	subA = "3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f"
	subB = "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a"
)

// TestReasonsAndAuditFilters: --reason is stored with each change and
// shown; audit filters by target, actor and time.
func TestReasonsAndAuditFilters(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, "202604.01.3")
	publishDraft(t, srv, "202605.02.1")
	mustRun(t, with("rollout", "set", "202604.01.3", "--percent", "5", "--reason", "ICM 1234: kubelet flag")...)
	mustRun(t, with("rollout", "set", "--reason", "test", "202605.02.1", "--percent", "1")...)
	mustRun(t, with("rollout", "pause", "202605.02.1", "--reason", "wait")...)
	mustRun(t, with("revoke", "202605.02.1", "--reason", "superseded")...)

	var au auditJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("audit", "--target", "202604.01.3", "-o", "json")...)), &au); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range au.Entries {
		got = append(got, e.Action+"/"+e.Reason)
	}
	if want := []string{"publish/test", "rollout-set/ICM 1234: kubelet flag"}; !cmp.Equal(got, want) || au.More {
		t.Errorf("audit --target = %v (more %v), want %v", got, au.More, want)
	}
	out := mustRun(t, with("audit", "--target", "202605.02.1")...)
	for _, want := range []string{"REASON", "superseded", "wait"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "202604.01.3") {
		t.Errorf("audit --target 202605.02.1 shows another release:\n%s", out)
	}
	if out := mustRun(t, with("audit", "--actor", "token:ops", "--since", "1h", "-o", "json")...); strings.Count(out, `"seq"`) != 6 {
		t.Errorf("audit --actor token:ops --since 1h: want all 6 entries:\n%s", out)
	}
	if out := mustRun(t, with("audit", "--actor", "cert:nobody")...); !strings.Contains(out, "no audit entries") {
		t.Errorf("audit --actor of nobody:\n%s", out)
	}
	// --action, validated; a bare actor name that matches nothing is
	// pointed at its kinded form.
	if err := json.Unmarshal([]byte(mustRun(t, with("audit", "--action", "rollout-set", "-o", "json")...)), &au); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, e := range au.Entries {
		got = append(got, e.Action+"/"+e.Target)
	}
	if want := []string{"rollout-set/202604.01.3", "rollout-set/202605.02.1"}; !cmp.Equal(got, want) {
		t.Errorf("audit --action rollout-set = %v, want %v", got, want)
	}
	if _, errOut, code := lpsctl(t, with("audit", "--action", "revokd")...); code != exitUsage || !strings.Contains(errOut, `--action "revokd": want one of publish, rollout-set, plan, skip, pause, resume, halt, complete, revoke, rotate-keys, restore-log, freeze, unfreeze, request-approval, auto-advance, auto-halt, auto-pause, expire; did you mean "revoke"?`) {
		t.Errorf("audit --action revokd: exit %d, %q", code, errOut)
	}
	out, errOut, code := lpsctl(t, with("audit", "--actor", "ops")...)
	if code != exitOK || !strings.Contains(out, "no audit entries") || !strings.Contains(errOut, "no entries by actor ops: an operator's actor starts with its credential's kind; --actor token:ops has some") {
		t.Errorf("audit --actor ops: exit %d, stdout %q, stderr %q; want no entries and a hint at token:ops", code, out, errOut)
	}
	if _, errOut, _ := lpsctl(t, with("audit", "--actor", "ops", "--action", "plan")...); errOut != "" {
		t.Errorf("audit --actor ops --action plan hints though token:ops has no plan either: %q", errOut)
	}
	if out := mustRun(t, with("audit", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))...); !strings.Contains(out, "no audit entries") {
		t.Errorf("audit --since the future:\n%s", out)
	}
	// The paging hint repeats the filters.
	_, errOut, code = lpsctl(t, with("audit", "--target", "202605.02.1", "--limit", "1")...)
	if code != exitOK || !strings.Contains(errOut, "more entries may follow: lpsctl audit --after 2 --target 202605.02.1 --limit 1 --server ") {
		t.Errorf("audit page hint: exit %d, %q", code, errOut)
	}
	_, errOut, _ = lpsctl(t, with("audit", "--limit", "1", "--json")...)
	hint, ok := strings.CutPrefix(strings.TrimSpace(errOut), "more entries may follow: lpsctl ")
	if !ok || !strings.Contains(hint, " --json=true ") {
		t.Fatalf("audit --json page hint: %q", errOut)
	}
	if _, errOut, code := lpsctl(t, strings.Fields(hint)...); code != exitOK {
		t.Errorf("the page hint's command: exit %d, %q", code, errOut)
	}

	for _, bad := range []struct{ reason, want string }{
		{"oops\x1b[2J", "lpsctl rollout pause: --reason has the control or format character U+001B at byte 4"},
		{strings.Repeat("x", 1025), "lpsctl rollout pause: --reason is 1025 bytes, at most 1024\n"},
	} {
		if _, errOut, code := lpsctl(t, with("rollout", "pause", "202604.01.3", "--reason", bad.reason)...); code != exitUsage || !strings.Contains(errOut, bad.want) {
			t.Errorf("bad reason: exit %d, %q; want %q", code, errOut, bad.want)
		}
	}
	if _, _, code := lpsctl(t, with("audit", "--since", "yesterday")...); code != exitUsage {
		t.Errorf("audit --since yesterday: exit %d", code)
	}
}

// TestNoDeadEnds: the scope of a complete or paused release changes
// without halting it, repeats succeed, and refusals name a command that
// works.
func TestNoDeadEnds(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	mustRun(t, with("rollout", "complete", "--reason", "test", v)...)
	out := mustRun(t, with("rollout", "set", "--reason", "test", v, "--regions", "eastus,westus", "--subscription", subA, "--allow-unseen")...)
	if !strings.Contains(out, "complete at 100%, subscriptions "+subA+", regions eastus,westus") {
		t.Errorf("scope change on complete: %q", out)
	}
	// The manual's "all subscriptions", copied: '' and "".
	out = mustRun(t, with("rollout", "set", "--reason", "test", v, "--subscriptions", "", "--regions", "")...)
	if !strings.Contains(out, "complete at 100%, subscriptions all, regions all") {
		t.Errorf("scope reset on complete: %q", out)
	}
	// What gofmt once made of the manual's '': refused, naming it.
	if _, errOut, code := lpsctl(t, with("rollout", "set", "--reason", "test", v, "--subscriptions", "”")...); code != exitError || !strings.Contains(errOut, "InvalidArgument") || !strings.Contains(errOut, "”") {
		t.Errorf("a U+201D subscription: exit %d, %q", code, errOut)
	}
	if _, errOut, code := lpsctl(t, with("rollout", "set", "--reason", "test", v, "--regions", "east us")...); code != exitError || !strings.Contains(errOut, "InvalidArgument") {
		t.Errorf("a bad region: exit %d, %q", code, errOut)
	}
	if _, errOut, code := lpsctl(t, with("rollout", "resume", "--reason", "test", v)...); code != exitRefused || strings.Contains(errOut, "`lpsctl rollout resume") || !strings.Contains(errOut, "`lpsctl rollout halt "+v+"`") {
		t.Errorf("resume a complete release: exit %d, %q (must not suggest resume)", code, errOut)
	}
	mustRun(t, with("rollout", "halt", "--reason", "test", v)...)
	// A halted release's scope narrows before its resume, which then
	// serves only the narrowed scope.
	if out := mustRun(t, with("rollout", "set", "--reason", "test", v, "--regions", "eastus")...); !strings.Contains(out, "halted at 100%, subscriptions all, regions eastus") {
		t.Errorf("scope change on halted: %q", out)
	}
	if out := mustRun(t, with("rollout", "set", "--reason", "test", v, "--regions", "eastus")...); !strings.Contains(out, "is already halted; nothing changed") {
		t.Errorf("the same scope again: %q", out)
	}
	mustRun(t, with("revoke", "--reason", "test", v)...)
	if out := mustRun(t, with("revoke", "--reason", "test", v)...); !strings.Contains(out, "already revoked; nothing changed") {
		t.Errorf("revoke twice: %q", out)
	}
}

// TestExpiryShown: status shows each release's expiry, and marks it once
// passed.
func TestExpiryShown(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	publishDraft(t, srv, "202604.01.3")
	var st statusJSON
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"status", "-o", "json"}, srv.conn()...)...)), &st); err != nil {
		t.Fatal(err)
	}
	r := st.Releases[0]
	if r.NotAfter == nil || r.Expired || r.NotAfter.Before(time.Now().Add(719*time.Hour)) {
		t.Errorf("status -o json: not_after %v, expired %v; want about 720h ahead", r.NotAfter, r.Expired)
	}
	if out := mustRun(t, append([]string{"status"}, srv.conn()...)...); !strings.Contains(out, "NOT AFTER") || !strings.Contains(out, formatTime(*r.NotAfter)) {
		t.Errorf("status lacks the expiry:\n%s", out)
	}
	past := &adminv1.Release{Version: "202604.01.2", NotAfter: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	if got := expiryText(past); got != "EXPIRED 2026-01-02T03:04:05Z" {
		t.Errorf("expiryText(past) = %q", got)
	}
	if got := notAfterCell(&adminv1.Release{}); got != "EXPIRED" {
		t.Errorf("notAfterCell(no expiry) = %q", got)
	}
}

// TestServiceStringsQuoted: what the service sends is printed with
// control characters quoted, never raw to the terminal.
func TestServiceStringsQuoted(t *testing.T) {
	t.Parallel()
	evil := "202604.01.3\x1b]0;owned\x07"
	r := &adminv1.Release{Version: evil, Base: "202604.01\r", Rollout: &adminv1.Rollout{State: "rolling", Subscriptions: []string{"a\x1b[2J"}}}
	var out bytes.Buffer
	if err := printRelease(&out, &outputFlags{format: formatText}, r, ""); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07\r") || !strings.Contains(out.String(), `\x1b]0;owned\a`) {
		t.Errorf("printRelease let a control character through: %q", out.String())
	}
	e := &env{stdout: &out, stderr: io.Discard}
	out.Reset()
	if err := printStatus(e, &adminv1.StatusResponse{Region: "east\x1bus", Releases: []*adminv1.Release{r}, Requests: []*adminv1.OutcomeCount{{Outcome: "x\x1b", Count: 1}}}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07\r") {
		t.Errorf("printStatus let a control character through: %q", out.String())
	}
	for _, line := range pointerSummary([]byte(`{"hotfixes":{"202604.01":"202604.01.9"},"revoked":["202604.01.8"]}`)) {
		if strings.ContainsAny(line, "\x1b") {
			t.Errorf("pointerSummary: %q", line)
		}
	}
	if got := pointerSummary([]byte(`{"hotfixes":{"202604.01":"202604.01.0"},"revoked":["202604.01.8"]}`)); len(got) != 2 || !strings.Contains(got[0], "tombstone") || got[1] != "revoked: 202604.01.8" {
		t.Errorf("pointerSummary(tombstone) = %q", got)
	}
	if got := pointerSummary([]byte(`{"hotfixes":{},"revoked":["202604.01.8","x\u001b"]}`)); len(got) != 2 || got[0] != "revoked: 202604.01.8" || !strings.Contains(got[1], "not versions") || strings.ContainsAny(got[1], "\x1b") {
		t.Errorf("pointerSummary(unreadable revoked entry) = %q", got)
	}
}

// TestAuditActionAgainstOlderLPSD: an lpsd from before --action ignores the
// request field and answers unfiltered; lpsctl refuses to print that as the
// filtered list.
func TestAuditActionAgainstOlderLPSD(t *testing.T) {
	t.Parallel()
	older := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*adminv1.ListAuditRequest); ok {
			r.Action = ""
		}
		return handler(ctx, req)
	}
	srv := startServerWith(t, older)
	publishDraft(t, srv, "202604.01.3")
	mustRun(t, append([]string{"rollout", "set", "202604.01.3", "--percent", "5", "--reason", "r"}, srv.conn()...)...)
	_, errOut, code := lpsctl(t, append([]string{"audit", "--action", "publish"}, srv.conn()...)...)
	if code != exitError || !strings.Contains(errOut, "does not filter by --action") {
		t.Errorf("audit --action against an older lpsd: exit %d, %q; want a refusal", code, errOut)
	}
}

// TestPlanDryRunAgainstOlderLPSD: an lpsd from before dry runs ignores the
// field and applies the plan; lpsctl says so and fails.
func TestPlanDryRunAgainstOlderLPSD(t *testing.T) {
	t.Parallel()
	older := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*adminv1.SetPlanRequest); ok {
			r.DryRun = false
		}
		return handler(ctx, req)
	}
	srv := startServerWith(t, older)
	publishDraft(t, srv, "202604.01.3")
	_, errOut, code := lpsctl(t, append([]string{"rollout", "plan", "202604.01.3", "--steps", "5:1h:10,100:1h:20", "--dry-run"}, srv.conn()...)...)
	if code != exitError || !strings.Contains(errOut, "the plan was APPLIED") || !strings.Contains(errOut, "lpsctl rollout pause 202604.01.3") {
		t.Errorf("plan --dry-run against an older lpsd: exit %d, %q; want a failure saying it was applied and how to stop it", code, errOut)
	}
}

// TestEveryChangeNeedsAReason: every command that changes what lpsd
// serves refuses to run without a reason (a usage error saying how to
// give one, before anything is sent); $LPSCTL_REASON gives it for
// scripts, and a dry run needs none. Not parallel: it sets the
// environment.
func TestEveryChangeNeedsAReason(t *testing.T) {
	var changes []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Annotations[annotationChange] != "" {
			changes = append(changes, c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&env{stdout: io.Discard, stderr: io.Discard}))
	if len(changes) < 11 {
		t.Fatalf("found %d change commands, want every one (publish, rollout set/plan/skip/pause/resume/halt/complete, revoke, ...)", len(changes))
	}
	// Nothing answers there: a call that were sent would fail otherwise.
	dead := []string{"--server", "127.0.0.1:1", "--token-file", filepath.Join(t.TempDir(), "none")}
	for _, c := range changes {
		args := strings.Fields(c.CommandPath())[1:]
		if strings.Contains(c.Use, "VERSION") {
			args = append(args, "202604.01.3")
		}
		for _, reason := range []string{"", "  "} {
			a := append(append(slices.Clone(args), dead...), "--reason", reason)
			_, errOut, code := lpsctl(t, a...)
			if code != exitUsage || !strings.Contains(errOut, "--reason is required") || !strings.Contains(errOut, "$LPSCTL_REASON") {
				t.Errorf("lpsctl %s with --reason %q: exit %d, %q; want a usage error naming --reason and $LPSCTL_REASON", strings.Join(args, " "), reason, code, errOut)
			}
		}
	}

	srv := startServer(t)
	publishDraft(t, srv, "202604.01.3")
	t.Setenv("LPSCTL_REASON", "CHG 42: from the script's environment")
	mustRun(t, append([]string{"rollout", "set", "202604.01.3", "--percent", "5"}, srv.conn()...)...)
	if _, errOut, code := lpsctl(t, append([]string{"rollout", "plan", "202604.01.3", "--steps", "5:1h:10,100:1h:20", "--dry-run", "--reason", ""}, srv.conn()...)...); code != exitOK {
		t.Errorf("a dry run without a reason: exit %d, %q; want it run (it changes nothing)", code, errOut)
	}
	mustRun(t, append([]string{"rollout", "pause", "202604.01.3", "--reason", "the flag wins"}, srv.conn()...)...)
	var au auditJSON
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"audit", "--target", "202604.01.3", "-o", "json"}, srv.conn()...)...)), &au); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range au.Entries {
		got = append(got, e.Action+"/"+e.Reason)
	}
	if want := []string{"publish/test", "rollout-set/CHG 42: from the script's environment", "pause/the flag wins"}; !cmp.Equal(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
}

// TestFreezeAndUnfreeze: a frozen fleet refuses a rollout change with exit
// 3 naming the freeze and how to thaw it, status says FROZEN with who and
// why, a second freeze changes nothing, and unfreeze lets the change
// through.
func TestFreezeAndUnfreeze(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	publishDraft(t, srv, "202604.01.3")
	if out := mustRun(t, with("freeze", "--reason", "CHG 5120: holiday freeze")...); !strings.Contains(out, "FROZEN") || !strings.Contains(out, "CHG 5120") {
		t.Errorf("freeze printed %q, want FROZEN and the reason", out)
	}
	if out := mustRun(t, with("freeze", "--reason", "again")...); !strings.Contains(out, "nothing changed") {
		t.Errorf("freeze again printed %q, want nothing changed", out)
	}
	_, errOut, code := lpsctl(t, with("rollout", "set", "202604.01.3", "--percent", "5", "--reason", "test")...)
	if code != exitRefused || !strings.Contains(errOut, "frozen") || !strings.Contains(errOut, "lpsctl unfreeze") {
		t.Errorf("rollout set while frozen: exit %d, %q; want %d naming the freeze and lpsctl unfreeze", code, errOut, exitRefused)
	}
	if out := mustRun(t, with("status")...); !strings.Contains(out, "FROZEN") || !strings.Contains(out, "token:ops") {
		t.Errorf("status while frozen lacks the freeze:\n%s", out)
	}
	var st struct {
		Freeze *struct {
			Frozen   bool  `json:"frozen"`
			Revision int64 `json:"revision"`
		} `json:"freeze"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "-o", "json")...)), &st); err != nil || st.Freeze == nil || !st.Freeze.Frozen {
		t.Fatalf("status -o json freeze = %+v, %v; want frozen", st.Freeze, err)
	}
	_, errOut, code = lpsctl(t, with("unfreeze", "--reason", "over", "--if-revision", fmt.Sprint(st.Freeze.Revision-1))...)
	if code != exitRefused {
		t.Errorf("unfreeze at a stale revision: exit %d, %q; want %d", code, errOut, exitRefused)
	}
	mustRun(t, with("unfreeze", "--reason", "CHG 5120: over", "--if-revision", fmt.Sprint(st.Freeze.Revision))...)
	mustRun(t, with("rollout", "set", "202604.01.3", "--percent", "5", "--reason", "test")...)
	if out := mustRun(t, with("audit", "--target", "fleet")...); !strings.Contains(out, "freeze") || !strings.Contains(out, "unfreeze") {
		t.Errorf("audit --target fleet lacks the freeze and the thaw:\n%s", out)
	}
}

// TestTwoPersonRuleCLI: under lpsd's two-person rule, skipping a canary
// asked for by one operator exits 3 saying it waits for a second one;
// status shows the request; the same command by another actor (here the
// client certificate's) makes the change. The policy shows in status.
func TestTwoPersonRuleCLI(t *testing.T) {
	t.Parallel()
	srv := startServerPolicy(t, nil, rollout.Policy{MinCanaryNodes: 5, TwoPerson: true})
	with := func(args ...string) []string { return append(args, srv.conn()...) }
	const v = "202604.01.3"
	publishDraft(t, srv, v)
	_, errOut, code := lpsctl(t, with("rollout", "set", v, "--percent", "5", "--reason", "test")...)
	if code != exitRefused || !strings.Contains(errOut, "a canary of at least 5 nodes") {
		t.Errorf("rollout set on a draft: exit %d, %q; want %d naming the policy", code, errOut, exitRefused)
	}
	mustRun(t, with("rollout", "plan", v, "--steps", "5n:1h:5,50:1h:5,100:0s:5", "--reason", "canary")...)
	_, errOut, code = lpsctl(t, with("rollout", "skip", v, "--reason", "INC 7: canary is fine")...)
	if code != exitRefused || !strings.Contains(errOut, "waits for a second operator") || !strings.Contains(errOut, "token:ops") {
		t.Errorf("skip by one operator: exit %d, %q; want %d saying it waits for a second operator", code, errOut, exitRefused)
	}
	out := mustRun(t, with("status")...)
	for _, want := range []string{"rollout policy:", "a canary of at least 5 nodes", "AWAITING A SECOND OPERATOR", "INC 7: canary is fine"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	var st struct {
		Policy *struct {
			TwoPerson bool `json:"two_person"`
		} `json:"policy"`
		Releases []struct {
			Approval *struct {
				RequestedBy string `json:"requested_by"`
			} `json:"approval"`
		} `json:"releases"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "-o", "json")...)), &st); err != nil || st.Policy == nil || !st.Policy.TwoPerson || len(st.Releases) != 1 || st.Releases[0].Approval == nil || st.Releases[0].Approval.RequestedBy != "token:ops" {
		t.Fatalf("status -o json = %+v, %v; want the policy and the request", st, err)
	}
	mtls := []string{"--server", srv.addr, "--ca", srv.ca, "--server-name", "localhost", "--cert", srv.cert, "--key", srv.key}
	mustRun(t, append([]string{"rollout", "skip", v, "--reason", "approved: INC 7"}, mtls...)...)
	if out := mustRun(t, with("status")...); strings.Contains(out, "AWAITING") || !strings.Contains(out, "50%") {
		t.Errorf("status after the approval:\n%s", out)
	}
}
