package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/autopilot"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/rollout"
)

// defaultAuditLimit is one page of audit entries; maxAuditLimit is the
// server's cap on one.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

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

func newAuditCmd(e *env) *cobra.Command {
	var c service
	var after, limit int64
	cmd := &cobra.Command{
		Use:   "audit [--after SEQ] [--limit N]",
		Short: "list the audit log of changes",
		Long: `audit lists changes oldest first, 100 at a time; when a page is full,
stderr says how to get the next. Entries by actor "lpsd" are the
autopilot's, with the health verdict that made the change.`,
		Example: `  lpsctl audit
  lpsctl audit --after 100 -o json`,
		GroupID: groupInspect,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *adminv1.ListAuditResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.ListAudit(ctx, &adminv1.ListAuditRequest{AfterSeq: after, Limit: int32(limit)})
				return err
			})
			if err != nil {
				return err
			}
			entries := resp.GetEntries()
			if int64(len(entries)) == limit {
				fmt.Fprintf(e.stderr, "more entries may follow: %s audit --after %d\n", programName, entries[len(entries)-1].GetSeq())
			}
			if c.out.structured() {
				return c.out.write(e.stdout, toAuditJSON(entries))
			}
			return printAudit(e, entries)
		},
	}
	newInt(cmd.Flags(), &after, "after", 0, 0, math.MaxInt64, "list entries after sequence number `SEQ`")
	newInt(cmd.Flags(), &limit, "limit", defaultAuditLimit, 1, maxAuditLimit, "at most `N` entries")
	c.register(cmd)
	return cmd
}

func toAuditJSON(entries []*adminv1.AuditEntry) auditJSON {
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
	return out
}

func printAudit(e *env, entries []*adminv1.AuditEntry) error {
	if len(entries) == 0 {
		fmt.Fprintln(e.stdout, "no audit entries")
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tACTION\tTARGET\tCHANGE")
	for _, a := range entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.GetSeq(), formatTime(a.GetTime().AsTime()), quote.Text(a.GetActor()), quote.Text(a.GetAction()), quote.Text(a.GetTarget()),
			describeChange(a.GetBeforeJson(), a.GetAfterJson())+why(a.GetEvidenceJson()))
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

// describeChange summarises what an audit entry changed in a release's rollout.
func describeChange(beforeJSON, afterJSON string) string {
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
