package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"sigs.k8s.io/yaml"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
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
	srv := startServer(t)
	publishDraft(t, srv, "202604.01.3")
	out := mustRun(t, append([]string{"__complete", "rollout", "pause"}, append(srv.conn(), "2026")...)...)
	if !strings.Contains(out, "202604.01.3\tdraft") {
		t.Errorf("completing a version: %q", out)
	}
	// An unreachable lpsd completes nothing, quickly, and without an error.
	out = mustRun(t, "__complete", "revoke", "--server", "127.0.0.1:1", "--token-file", srv.token, "")
	if strings.Contains(out, "202604") || !strings.Contains(out, ":4") {
		t.Errorf("completing from nowhere: %q", out)
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
	code := run(ctx, append([]string{"rollout", "halt", "202604.01.3"}, srv.conn()...), &out, &errOut)
	if code != exitInterrupted || !strings.Contains(errOut.String(), "lpsctl rollout halt: interrupted: the change may or may not have been applied; check with 'lpsctl status' or 'lpsctl audit --target VERSION'") {
		t.Errorf("interrupted halt: exit %d, stderr %q", code, errOut.String())
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

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "30m": 30 * time.Minute, "12h": 12 * time.Hour, "30d": 30 * 24 * time.Hour,
		"1d12h": 36 * time.Hour, "0d": 0, "1d30m": 24*time.Hour + 30*time.Minute,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got, _ := parseDuration(formatDuration(want)); got != want {
			t.Errorf("formatDuration(%v) = %q does not read back", want, formatDuration(want))
		}
	}
	for _, bad := range []string{"", "d", "30", "30days", "-1h", "1d-1h", "1.5d", "d12h", "99999d", "1h2d"} {
		if got, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", bad, got)
		}
	}
	if got := formatDuration(36*time.Hour + 30*time.Minute); got != "1d12h30m" {
		t.Errorf("formatDuration = %q", got)
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
