package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
)

// maxNodesPage is the most nodes one ListNodes page holds; maxNodes the
// most --all collects, whatever lpsd says (a fleet is far smaller).
const (
	maxNodesPage = 1000
	maxNodes     = 10_000_000
)

// pagingFault reports whether lpsd kept paging past what a listing of
// total nodes in pages of size needs: twice the pages, and ten more for
// nodes reporting meanwhile, or a token it just gave (a cycle or a stuck
// service, never a long listing).
func pagingFault(pages int, size, total int64, token, next string) bool {
	size = max(size, 1)
	need := (total + size - 1) / size
	return next == token || int64(pages) > 2*need+10 || int64(pages)*size > maxNodes
}

// nodesOutcomes are the values --outcome takes (ListNodesRequest.outcome).
var nodesOutcomes = []string{"failed", "fellBack", "refusedIntegrity", "refusedDelivery", "refused", "silent", "pending", "ok", "notApplicable"}

type nodesJSON struct {
	Nodes         []nodeJSON   `json:"nodes"`
	Total         int64        `json:"total"`
	TopReasons    []reasonJSON `json:"top_reasons"`
	NextPageToken string       `json:"next_page_token,omitempty"`
}

type nodeJSON struct {
	VMID           string     `json:"vm_id"`
	SubscriptionID string     `json:"subscription_id"`
	Base           string     `json:"base"`
	Release        string     `json:"release"`
	Outcome        string     `json:"outcome"`
	Reason         string     `json:"reason,omitempty"`
	Ran            string     `json:"ran,omitempty"`
	ExitCode       int32      `json:"exit_code"`
	Boot           string     `json:"boot"`
	Time           *time.Time `json:"time"`
	ServedAt       *time.Time `json:"served_at"`
	// Replica is the lpsd replica that served it.
	Replica string `json:"replica"`
}

// reasonJSON is how many of the matching nodes share an outcome and a
// reason, the commonest first.
type reasonJSON struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Nodes   int64  `json:"nodes"`
}

func newNodesCmd(e *env) *cobra.Command {
	var c service
	var release, base, outcome, subscription, page string
	var since sinceValue
	var limit int64
	var all bool
	cmd := &cobra.Command{
		Use:   "nodes [--release VERSION] [--base BASE] [--outcome OUTCOME] [--subscription ID] [--since TIME|DURATION] [--limit N] [--page TOKEN] [--all]",
		Short: "list the nodes counted for releases, worst outcome first, with their reasons",
		Long: `nodes lists, per release, every node it was served to or that reported
on it, one per vmId by its worst outcome (failed, fellBack,
refusedIntegrity, silent, refusedDelivery, ok, notApplicable, pending):
what it ran, its exit code, why (the fallback reason, a refusal's
decision and download outcome), its boot and when. These are the nodes
behind status's counts and the health verdict. --outcome refused means
both refusals. A full page says on stderr how to get the next; --all
follows every page (an incident's list: --outcome
failed,fellBack,refusedIntegrity --all -o json).`,
		Example: `  lpsctl nodes --release 202604.01.3 --outcome failed
  lpsctl nodes --release 202604.01.3 --outcome failed,fellBack,refusedIntegrity --all -o json
  lpsctl nodes --release 202604.01.3 --outcome refused -o json
  lpsctl nodes --base 202604.01 --since 2h
  lpsctl nodes --subscription 8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a`,
		GroupID:           groupInspect,
		Args:              positional(),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for o := range strings.SplitSeq(outcome, ",") {
				if outcome != "" && !slices.Contains(nodesOutcomes, o) {
					return usagef("--outcome %s: want one of %s, or several joined by commas", quote.Text(o), strings.Join(nodesOutcomes, ", "))
				}
			}
			if all && !cmd.Flags().Changed("limit") {
				limit = maxNodesPage
			}
			var resp *adminv1.ListNodesResponse
			for token, pages := page, 1; ; pages++ {
				var got *adminv1.ListNodesResponse
				err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
					got, err = cl.ListNodes(ctx, &adminv1.ListNodesRequest{
						Release: release, Base: base, Outcome: outcome, SubscriptionId: subscription, Since: since.timestamp(),
						PageSize: int32(limit), PageToken: token,
					})
					return err
				})
				if err != nil {
					return err
				}
				if resp == nil {
					resp = got
				} else {
					// The total and the reasons are over every matching
					// node: the last page's are the newest.
					resp.Nodes, resp.Total, resp.TopReasons, resp.NextPageToken = append(resp.Nodes, got.GetNodes()...), got.GetTotal(), got.GetTopReasons(), got.GetNextPageToken()
				}
				next := got.GetNextPageToken()
				if !all || next == "" {
					break
				}
				if pagingFault(pages, int64(len(got.GetNodes())), got.GetTotal(), token, next) {
					return fmt.Errorf("lpsd kept paging (%d pages, the last token %s): an lpsd fault; list a page at a time with --page", pages, shellQuote(next))
				}
				token = next
			}
			if t := resp.GetNextPageToken(); t != "" {
				fmt.Fprintf(e.stderr, "%d of %d nodes shown; the next page: add --page %s\n", len(resp.GetNodes()), resp.GetTotal(), shellQuote(t))
			}
			if c.out.structured() {
				out := nodesJSON{Nodes: []nodeJSON{}, TopReasons: []reasonJSON{}, Total: resp.GetTotal(), NextPageToken: resp.GetNextPageToken()}
				for _, r := range resp.GetTopReasons() {
					out.TopReasons = append(out.TopReasons, reasonJSON{Outcome: r.GetOutcome(), Reason: r.GetReason(), Nodes: r.GetNodes()})
				}
				for _, n := range resp.GetNodes() {
					out.Nodes = append(out.Nodes, nodeJSON{
						VMID: n.GetVmId(), SubscriptionID: n.GetSubscriptionId(), Base: n.GetBase(), Release: n.GetRelease(), Outcome: n.GetOutcome(),
						Reason: n.GetReason(), Ran: n.GetRan(), ExitCode: n.GetExitCode(), Boot: n.GetBoot(),
						Time: timeOrNil(n.GetTime()), ServedAt: timeOrNil(n.GetServedAt()), Replica: n.GetReplica(),
					})
				}
				return c.out.write(e.stdout, out)
			}
			tw := newTable(e.stdout)
			if len(resp.GetNodes()) == 0 {
				fmt.Fprintln(tw, "no nodes match")
				return tw.Flush()
			}
			if top := resp.GetTopReasons(); len(top) > 0 {
				// What an incident asks first: the commonest ways they
				// failed, over every matching node, not just this page.
				rt := newTable(e.stdout)
				fmt.Fprintln(rt, "NODES\tOUTCOME\tREASON")
				for _, r := range top {
					fmt.Fprintf(rt, "%d\t%s\t%s\n", r.GetNodes(), quote.Text(r.GetOutcome()), dash(quote.Text(r.GetReason())))
				}
				if err := rt.Flush(); err != nil {
					return err
				}
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintln(tw, "VM\tSUBSCRIPTION\tRELEASE\tOUTCOME\tRAN\tEXIT\tREASON\tBOOT\tTIME\tREPLICA")
			for _, n := range resp.GetNodes() {
				exit, at := "-", "-"
				if n.GetRan() != "" {
					exit = fmt.Sprint(n.GetExitCode())
				}
				if t := n.GetTime(); t != nil {
					at = formatTime(t.AsTime())
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", quote.Text(n.GetVmId()), dash(quote.Text(n.GetSubscriptionId())), quote.Text(n.GetRelease()),
					quote.Text(n.GetOutcome()), dash(quote.Text(n.GetRan())), exit, dash(quote.Text(n.GetReason())), dash(quote.Text(n.GetBoot())), at, dash(quote.Text(n.GetReplica())))
			}
			return tw.Flush()
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&release, "release", "", "only the nodes counted for this release `VERSION`")
	fs.StringVar(&base, "base", "", "only the releases of this image `BASE` (YYYYMM.DD)")
	fs.StringVar(&outcome, "outcome", "", "only this `OUTCOME` ("+strings.Join(nodesOutcomes, ", ")+"), or several joined by commas")
	fs.StringVar(&subscription, "subscription", "", "only the nodes of this subscription `ID`")
	fs.Var(&since, "since", "only nodes heard from at this RFC 3339 `time` or later, or this long ago (2h, 7d)")
	newInt(fs, &limit, "limit", 100, 1, maxNodesPage, "at most `N` nodes per page")
	fs.StringVar(&page, "page", "", "the page `TOKEN` a full page printed")
	fs.BoolVar(&all, "all", false, "follow every page, "+fmt.Sprint(maxNodesPage)+" nodes at a time unless --limit says otherwise: every matching node")
	c.register(cmd)
	return cmd
}
