package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/autopilot"
	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/typo"
)

// defaultAuditLimit is one page of audit entries; maxAuditLimit is the
// server's cap on one.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

type auditJSON struct {
	Entries []auditEntryJSON `json:"entries"`
	// NextAfterSeq is the --after of the next page; More says whether
	// entries after it may match.
	NextAfterSeq int64 `json:"next_after_seq"`
	More         bool  `json:"more"`
}

type auditEntryJSON struct {
	Seq    int64           `json:"seq"`
	Time   time.Time       `json:"time"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Reason string          `json:"reason"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	// Evidence is an automatic change's (autopilot.Evidence), omitted for
	// an operator's.
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

func newAuditCmd(e *env) *cobra.Command {
	var c service
	var after, limit int64
	var target, actor, action string
	var since sinceValue
	cmd := &cobra.Command{
		Use:   "audit [--target VERSION] [--actor ID] [--action ACTION] [--since TIME|DURATION] [--after SEQ] [--limit N]",
		Short: "list the audit log of changes",
		Long: `audit lists changes oldest first, 100 at a time; when a page is full,
stderr says how to get the next. Entries by actor "lpsd" are the
autopilot's, with the health verdict that made the change.`,
		Example: `  lpsctl audit
  lpsctl audit --target 202604.01.3 --since 2d
  lpsctl audit --actor lpsd --since 2026-12-01T00:00:00Z -o json
  lpsctl audit --action halt --since 7d
  lpsctl audit --after 100`,
		GroupID: groupInspect,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkAction(action); err != nil {
				return err
			}
			var resp *adminv1.ListAuditResponse
			var actorHint string
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				req := &adminv1.ListAuditRequest{AfterSeq: after, Limit: int32(limit), Target: target, Actor: actor, Action: action, Since: since.timestamp()}
				if resp, err = cl.ListAudit(ctx, req); err != nil || len(resp.GetEntries()) > 0 {
					return err
				}
				// The hint is a courtesy: the listing has succeeded whatever
				// its lookups meet.
				actorHint, _ = kindedActor(ctx, cl, req)
				return nil
			})
			if err != nil {
				return err
			}
			// An lpsd older than --action ignores the field (proto3) and
			// answers unfiltered: never print that as the filtered list.
			for _, en := range resp.GetEntries() {
				if action != "" && en.GetAction() != action {
					return fmt.Errorf("this lpsd does not filter by --action (it sent a %q entry): upgrade it, or filter the unfiltered list (-o json) yourself", en.GetAction())
				}
			}
			if actorHint != "" {
				fmt.Fprintf(e.stderr, "no entries by actor %s: an operator's actor starts with its credential's kind; --actor %s has some\n", shellQuote(actor), shellQuote(actorHint))
			}
			if resp.GetMore() {
				next := []string{programName, "audit", "--after", strconv.FormatInt(resp.GetNextAfterSeq(), 10)}
				// The same flags, so the next page continues this one.
				cmd.Flags().Visit(func(f *pflag.Flag) {
					switch {
					case f.Name == "after":
					case f.Value.Type() == "bool":
						next = append(next, "--"+f.Name+"="+f.Value.String())
					default:
						next = append(next, "--"+f.Name, shellQuote(f.Value.String()))
					}
				})
				fmt.Fprintf(e.stderr, "more entries may follow: %s\n", strings.Join(next, " "))
			}
			if c.out.structured() {
				out := toAuditJSON(resp.GetEntries())
				out.NextAfterSeq, out.More = resp.GetNextAfterSeq(), resp.GetMore()
				return c.out.write(e.stdout, out)
			}
			return printAudit(e, resp.GetEntries())
		},
	}
	cmd.Flags().StringVar(&target, "target", "", "only the entries of this release `VERSION`")
	cmd.Flags().StringVar(&actor, "actor", "", "only the entries of this `actor`, as audit shows it (token:ops, cert:alice, lpsd)")
	cmd.Flags().StringVar(&action, "action", "", "only the entries of this `action`: "+strings.Join(admin.Actions(), ", "))
	cmd.Flags().Var(&since, "since", "only entries from this RFC 3339 `time` on, or this long ago (2h, 7d)")
	newInt(cmd.Flags(), &after, "after", 0, 0, math.MaxInt64, "list entries after sequence number `SEQ`")
	newInt(cmd.Flags(), &limit, "limit", defaultAuditLimit, 1, maxAuditLimit, "at most `N` entries")
	c.register(cmd)
	return cmd
}

// checkAction refuses an --action the audit log never records, which
// would list nothing and look like a quiet log.
func checkAction(action string) error {
	known := admin.Actions()
	if action == "" || slices.Contains(known, action) {
		return nil
	}
	hint := ""
	if s := typo.Closest(action, known); s != "" {
		hint = fmt.Sprintf("; did you mean %q?", s)
	}
	return usagef("--action %q: want one of %s%s", action, strings.Join(known, ", "), hint)
}

// kindedActor returns the actor req's would be with its credential's kind
// in front (token:ops for ops), if req's actor has none and that one has
// entries req would list; else "". A bare name is the likeliest reason an
// actor filter matches nothing.
func kindedActor(ctx context.Context, cl adminv1.AdminServiceClient, req *adminv1.ListAuditRequest) (string, error) {
	a := req.GetActor()
	if a == "" || a == autopilot.Actor || strings.HasPrefix(a, admin.TokenActor) || strings.HasPrefix(a, admin.CertActor) {
		return "", nil
	}
	for _, kind := range []string{admin.TokenActor, admin.CertActor} {
		try := proto.CloneOf(req)
		try.Actor, try.Limit = kind+a, 1
		resp, err := cl.ListAudit(ctx, try)
		if err != nil {
			return "", err
		}
		if len(resp.GetEntries()) > 0 {
			return try.Actor, nil
		}
	}
	return "", nil
}

func toAuditJSON(entries []*adminv1.AuditEntry) auditJSON {
	out := auditJSON{Entries: []auditEntryJSON{}}
	for _, a := range entries {
		entry := auditEntryJSON{
			Seq: a.GetSeq(), Time: a.GetTime().AsTime(), Actor: a.GetActor(), Action: a.GetAction(), Target: a.GetTarget(), Reason: a.GetReason(),
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
	fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tACTION\tTARGET\tREASON\tCHANGE")
	for _, a := range entries {
		// An automatic change's reason is its evidence in words: the
		// verdict is not repeated after the change then.
		reason, verdict := "-", why(a.GetEvidenceJson())
		if a.GetReason() != "" {
			reason, verdict = quote.Text(a.GetReason()), ""
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.GetSeq(), formatTime(a.GetTime().AsTime()), quote.Text(a.GetActor()), quote.Text(a.GetAction()), quote.Text(a.GetTarget()),
			reason, quote.Text(rollout.DescribeChange(a.GetBeforeJson(), a.GetAfterJson()))+verdict)
	}
	return tw.Flush()
}

// why is an automatic change's reason for the table: its verdict's one
// line, quoted as it comes from the service.
func why(evidenceJSON string) string {
	ev, ok := autopilot.ParseEvidence(evidenceJSON)
	if !ok {
		return ""
	}
	return fmt.Sprintf(" (%s: %s)", quote.Text(ev.Verdict.Health), quote.Text(ev.Verdict.Detail))
}

func rawOrNull(s string) json.RawMessage {
	if s == "" || !json.Valid([]byte(s)) {
		return json.RawMessage("null")
	}
	return json.RawMessage(s)
}

// sinceValue is --since: an RFC 3339 time, or a duration before now.
type sinceValue struct {
	t   time.Time
	set bool
}

func (v *sinceValue) String() string {
	if !v.set {
		return ""
	}
	return formatTime(v.t)
}

func (v *sinceValue) Type() string { return "time" }

func (v *sinceValue) Set(s string) error {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		v.t, v.set = t, true
		return nil
	}
	d, err := duration.Parse(s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time (2026-12-01T00:00:00Z) or a duration ago (2h, 7d)")
	}
	v.t, v.set = time.Now().Add(-d), true
	return nil
}

func (v *sinceValue) timestamp() *timestamppb.Timestamp {
	if !v.set {
		return nil
	}
	return timestamppb.New(v.t)
}

// shellQuote quotes s for a command line a person can paste.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/,=+@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
