package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/rollout"
)

// defaultAuditLimit is one page of audit entries.
const defaultAuditLimit = 100

type auditJSON struct {
	Entries []auditEntryJSON `json:"entries"`
}

type auditEntryJSON struct {
	Seq    int64           `json:"seq"`
	Time   time.Time       `json:"time"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	// Evidence is an automatic change's (autopilot.Evidence), omitted for
	// an operator's.
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

func runAudit(ctx context.Context, args []string, e *env) error {
	var c connFlags
	var after int64
	var limit int
	fs := newFlagSet("audit", "[--after SEQ] [--limit N] [connection flags]", e)
	fs.Int64Var(&after, "after", 0, "list entries after sequence number `SEQ`")
	fs.IntVar(&limit, "limit", defaultAuditLimit, "at most `N` entries (server maximum 1000)")
	c.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if after < 0 || limit <= 0 {
		return usagef("--after must be at least 0 and --limit at least 1")
	}
	var resp *adminv1.ListAuditResponse
	err := c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		resp, err = cl.ListAudit(ctx, &adminv1.ListAuditRequest{AfterSeq: after, Limit: int32(min(limit, 1<<30))})
		return err
	})
	if err != nil {
		return err
	}
	entries := resp.GetEntries()
	if len(entries) == limit {
		fmt.Fprintf(e.stderr, "more entries may follow: %s audit --after %d\n", programName, entries[len(entries)-1].GetSeq())
	}
	if c.json {
		out := auditJSON{Entries: []auditEntryJSON{}}
		for _, a := range entries {
			entry := auditEntryJSON{
				Seq: a.GetSeq(), Time: a.GetTime().AsTime(), Actor: a.GetActor(), Action: a.GetAction(), Target: a.GetTarget(),
				Before: rawOrNull(a.GetBeforeJson()), After: rawOrNull(a.GetAfterJson()),
			}
			if ev := a.GetEvidenceJson(); ev != "" && json.Valid([]byte(ev)) {
				entry.Evidence = json.RawMessage(ev)
			}
			out.Entries = append(out.Entries, entry)
		}
		return writeJSON(e.stdout, out)
	}
	if len(entries) == 0 {
		fmt.Fprintln(e.stdout, "no audit entries")
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tACTION\tTARGET\tCHANGE")
	for _, a := range entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.GetSeq(), formatTime(a.GetTime().AsTime()), a.GetActor(), a.GetAction(), a.GetTarget(),
			change(a.GetBeforeJson(), a.GetAfterJson())+why(a.GetEvidenceJson()))
	}
	return tw.Flush()
}

// why is an automatic change's reason for the table: its verdict's one
// line, quoted as it comes from the service.
func why(evidenceJSON string) string {
	var ev autopilot.Evidence
	if evidenceJSON == "" || json.Unmarshal([]byte(evidenceJSON), &ev) != nil || ev.Verdict.Detail == "" {
		return ""
	}
	return fmt.Sprintf(" (%s: %s)", quote.Text(ev.Verdict.Verdict), quote.Text(ev.Verdict.Detail))
}

func rawOrNull(s string) json.RawMessage {
	if s == "" || !json.Valid([]byte(s)) {
		return json.RawMessage("null")
	}
	return json.RawMessage(s)
}

// change summarises what an audit entry changed in a release's rollout.
func change(beforeJSON, afterJSON string) string {
	var before, after rollout.Release
	if json.Unmarshal([]byte(afterJSON), &after) != nil {
		return "?"
	}
	if beforeJSON == "" {
		return fmt.Sprintf("published as %s", after.Rollout.State)
	}
	if json.Unmarshal([]byte(beforeJSON), &before) != nil {
		return "?"
	}
	var parts []string
	b, a := before.Rollout, after.Rollout
	if b.State != a.State {
		parts = append(parts, fmt.Sprintf("state %s→%s", b.State, a.State))
	}
	if b.Percent != a.Percent {
		parts = append(parts, fmt.Sprintf("percent %d→%d", b.Percent, a.Percent))
	}
	if !slices.Equal(b.Subscriptions, a.Subscriptions) {
		parts = append(parts, fmt.Sprintf("subscriptions %s→%s", scope(b.Subscriptions), scope(a.Subscriptions)))
	}
	if !slices.Equal(b.Regions, a.Regions) {
		parts = append(parts, fmt.Sprintf("regions %s→%s", scope(b.Regions), scope(a.Regions)))
	}
	if before.Revoked != after.Revoked {
		parts = append(parts, fmt.Sprintf("revoked %s→%s", yesNo(before.Revoked), yesNo(after.Revoked)))
	}
	if len(parts) == 0 {
		return "no rollout change"
	}
	return strings.Join(parts, ", ")
}
