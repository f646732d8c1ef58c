package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/quote"
)

// maxHistoryLimit is the most points one GetHistory returns
// (store.MaxPointsRead).
const maxHistoryLimit = 10000

// maxHistoryResponse bounds a GetHistory answer lpsctl reads: as many
// points as it may ask for, each of a point's most (store.MaxPointSize,
// 4 KiB, of strings) and its framing, above gRPC's default 4 MiB, which
// an answer of long-stringed points (another writer's) exceeds.
const maxHistoryResponse = maxHistoryLimit * (4<<10 + 512)

type historyJSON struct {
	Version string             `json:"version"`
	Points  []historyPointJSON `json:"points"`
	// Kept is false when lpsd's store keeps no history.
	Kept bool `json:"kept"`
	// Unreadable counts stored points this lpsd could not decode.
	Unreadable            int32  `json:"unreadable"`
	FailureRateDefinition string `json:"failure_rate_definition"`
}

type historyPointJSON struct {
	Time    time.Time `json:"time"`
	State   string    `json:"state"`
	Percent int32     `json:"percent"`
	// Step is the plan's current step as every "step" in JSON is, an
	// index from 0 (null without a plan); Steps its length.
	Step    *int32      `json:"step"`
	Steps   int32       `json:"steps"`
	Reason  string      `json:"reason"`
	Revoked bool        `json:"revoked"`
	Expired bool        `json:"expired"`
	Health  string      `json:"health"`
	Counts  *countsJSON `json:"counts"`
	Seated  uint64      `json:"seated"`
	// FailureRate is the rule's (failure_rate_definition), a fraction;
	// null while nobody is judged.
	FailureRate         *float64    `json:"failure_rate"`
	Baseline            string      `json:"baseline"`
	BaselineCounts      *countsJSON `json:"baseline_counts"`
	BaselineFailureRate *float64    `json:"baseline_failure_rate"`
}

func newHistoryCmd(e *env) *cobra.Command {
	var c service
	var limit int64
	var changes bool
	cmd := &cobra.Command{
		Use:   "history VERSION [--changes] [--limit N]",
		Short: "show a release's recorded assessment over time: counts, state, percentage, baseline",
		Long: `history shows what the deciding replica's autopilot judged a release on,
look after look, as lpsd's store recorded it: its nodes by outcome, its
failure rate beside its baseline's (the incumbent of a planned release,
the base's control cohort without a plan), and the rollout's state,
percentage and plan step then. A point is recorded when any of those
changed, while the release is served and once when it stops: of a
minute's looks the last, and each after which the rollout moved; points
are kept for the release's life and 90 days after, on
every replica alike, after reports are pruned and after a revoke.

--changes shows only the points where the rollout moved (state,
percentage, step, reason, health, revoked or expired), with the first and
the last. Nothing is recorded while lpsd runs with --autopilot-interval=0.`,
		Example: `  lpsctl history 202604.01.3
  lpsctl history 202604.01.3 --changes
  lpsctl history 202604.01.3 --limit 60 -o json`,
		GroupID: groupInspect,
		Args:    positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *adminv1.GetHistoryResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.GetHistory(ctx, &adminv1.GetHistoryRequest{Version: args[0], Limit: int32(limit)}, grpc.MaxCallRecvMsgSize(maxHistoryResponse))
				return err
			})
			if err != nil {
				return err
			}
			if n := resp.GetUnreadable(); n > 0 {
				fmt.Fprintf(e.stderr, "%d points this lpsd cannot read were left out (a newer lpsd's encoding, or damage): see lpsd's log\n", n)
			}
			ps := resp.GetPoints()
			if changes {
				ps = movements(ps)
			}
			if c.out.structured() {
				out := historyJSON{Version: args[0], Points: []historyPointJSON{}, Kept: resp.GetKept(), Unreadable: resp.GetUnreadable(),
					FailureRateDefinition: admin.FailureRateDefinition}
				for _, p := range ps {
					out.Points = append(out.Points, toHistoryPointJSON(p))
				}
				return c.out.write(e.stdout, out)
			}
			switch {
			case !resp.GetKept():
				fmt.Fprintln(e.stdout, "no history: this lpsd's store keeps none")
				return nil
			case len(ps) == 0:
				fmt.Fprintf(e.stdout, "no history recorded for %s yet: the deciding replica records a point when a look changes what it judged (never with lpsd --autopilot-interval=0)\n", quote.Text(args[0]))
				return nil
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "TIME\tSTATE\tPERCENT\tSTEP\tHEALTH\tSERVED\tOK\tFAILED\tFELL BACK\tREFUSED\tSILENT\tPENDING\tFAILURE RATE\tBASELINE\tBASELINE RATE")
			for _, p := range ps {
				rc, bc := admin.CountsOf(p.GetCounts()), admin.CountsOf(p.GetBaselineCounts())
				state := quote.Text(p.GetState())
				switch {
				case p.GetRevoked():
					state += " (revoked)"
				case p.GetExpired():
					state += " (expired)"
				}
				if r := p.GetReason(); r != "" {
					state += ": " + quote.Text(r)
				}
				step := "-"
				if p.GetSteps() > 0 {
					step = fmt.Sprintf("%d/%d", p.GetStep(), p.GetSteps())
				}
				fmt.Fprintf(tw, "%s\t%s\t%d%%\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", formatTime(p.GetTime().AsTime()), state, p.GetPercent(), step,
					dash(quote.Text(p.GetHealth())), rc.Served(), rc.OK, rc.Failed, rc.Fallback, rc.RefusedIntegrity+rc.RefusedDelivery, rc.Silent, rc.Pending,
					rateText(rc.Failures(), rc.Judged()), dash(quote.Text(p.GetBaseline())), rateText(bc.Failures(), bc.Judged()))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "\n"+admin.FailureRateDefinition)
			return nil
		},
	}
	cmd.Flags().BoolVar(&changes, "changes", false, "only the points where the rollout moved (state, percentage, step, reason, health, revoked, expired), the first and the last")
	newInt(cmd.Flags(), &limit, "limit", 1440, 1, maxHistoryLimit, "the newest `N` points (a day's at one a minute)")
	c.register(cmd)
	cmd.ValidArgsFunction = completeVersions(&c.conn, nil)
	return cmd
}

// movements returns the points of ps where the rollout moved from the
// point before, with the first and the last.
func movements(ps []*adminv1.HistoryPoint) []*adminv1.HistoryPoint {
	var out []*adminv1.HistoryPoint
	for i, p := range ps {
		if i == 0 || i == len(ps)-1 || moved(ps[i-1], p) {
			out = append(out, p)
		}
	}
	return out
}

func moved(a, b *adminv1.HistoryPoint) bool {
	return a.GetState() != b.GetState() || a.GetPercent() != b.GetPercent() || a.GetStep() != b.GetStep() || a.GetSteps() != b.GetSteps() ||
		a.GetReason() != b.GetReason() || a.GetHealth() != b.GetHealth() || a.GetRevoked() != b.GetRevoked() || a.GetExpired() != b.GetExpired()
}

func toHistoryPointJSON(p *adminv1.HistoryPoint) historyPointJSON {
	var step *int32
	// The API's step counts from 1; one that is not a step of the plan
	// (a damaged or hand-written point) is no index either.
	if p.GetSteps() > 0 && p.GetStep() >= 1 && p.GetStep() <= p.GetSteps() {
		i := p.GetStep() - 1
		step = &i
	}
	return historyPointJSON{
		Time: p.GetTime().AsTime(), State: p.GetState(), Percent: p.GetPercent(), Step: step, Steps: p.GetSteps(), Reason: p.GetReason(),
		Revoked: p.GetRevoked(), Expired: p.GetExpired(), Health: p.GetHealth(), Counts: toCountsJSON(p.GetCounts()), Seated: p.GetSeated(),
		FailureRate: rateOrNil(admin.CountsOf(p.GetCounts()).FailureRate()), Baseline: p.GetBaseline(),
		BaselineCounts: toCountsJSON(p.GetBaselineCounts()), BaselineFailureRate: rateOrNil(admin.CountsOf(p.GetBaselineCounts()).FailureRate()),
	}
}

func rateOrNil(r float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return &r
}
