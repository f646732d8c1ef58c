package main

import (
	"fmt"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/quote"
)

// replicaJSON is a replica in status's -o json output.
type replicaJSON struct {
	ID            string     `json:"id"`
	Region        string     `json:"region"`
	DeployEnv     string     `json:"deploy_env"`
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	Self          bool       `json:"self"`
	// HeartbeatAgeSeconds is its heartbeat's age by the answering
	// replica's clock (null without one); ClockCorrected says the looks
	// read the times it stamps moved by it.
	HeartbeatAgeSeconds *float64 `json:"heartbeat_age_seconds"`
	ClockCorrected      bool     `json:"clock_corrected"`
}

// servedBaseJSON is what the nodes of one base get now (status -o json).
type servedBaseJSON struct {
	Base           string             `json:"base"`
	Cohorts        []servedCohortJSON `json:"cohorts"`
	OmittedCohorts int32              `json:"omitted_cohorts"`
}

type servedCohortJSON struct {
	Subscriptions      []string          `json:"subscriptions"`
	OtherSubscriptions bool              `json:"other_subscriptions"`
	Places             []placeJSON       `json:"places"`
	Shares             []servedShareJSON `json:"shares"`
}

type placeJSON struct {
	Region    string `json:"region"`
	DeployEnv string `json:"deploy_env"`
}

type servedShareJSON struct {
	Version     string  `json:"version"` // "" is the baked agent
	State       string  `json:"state"`
	Percent     float64 `json:"percent"`
	Role        string  `json:"role"`
	Why         string  `json:"why"`
	Instead     string  `json:"instead"`
	CanarySeats int32   `json:"canary_seats"`
	FellBack    uint64  `json:"fell_back"`
	Failures    uint64  `json:"failures"`
	Judged      uint64  `json:"judged"`
	// FailureRate is failures/judged; null with nothing judged.
	FailureRate *float64 `json:"failure_rate"`
}

func toReplicasJSON(rs []*adminv1.Replica) []replicaJSON {
	out := []replicaJSON{}
	for _, r := range rs {
		rj := replicaJSON{ID: r.GetId(), Region: r.GetRegion(), DeployEnv: r.GetDeployEnv(), LastHeartbeat: timeOrNil(r.GetLastHeartbeat()), Self: r.GetSelf(), ClockCorrected: r.GetClockCorrected()}
		if r.HeartbeatAgeMs != nil {
			age := float64(r.GetHeartbeatAgeMs()) / 1000
			rj.HeartbeatAgeSeconds = &age
		}
		out = append(out, rj)
	}
	return out
}

func toServedJSON(bs []*adminv1.ServedBase) []servedBaseJSON {
	out := []servedBaseJSON{}
	for _, b := range bs {
		sb := servedBaseJSON{Base: b.GetBase(), Cohorts: []servedCohortJSON{}, OmittedCohorts: b.GetOmittedCohorts()}
		for _, c := range b.GetCohorts() {
			sc := servedCohortJSON{Subscriptions: nonNil(c.GetSubscriptions()), OtherSubscriptions: c.GetOtherSubscriptions(), Places: []placeJSON{}, Shares: []servedShareJSON{}}
			for _, p := range c.GetPlaces() {
				sc.Places = append(sc.Places, placeJSON{Region: p.GetRegion(), DeployEnv: p.GetDeployEnv()})
			}
			for _, s := range c.GetShares() {
				sh := servedShareJSON{Version: s.GetVersion(), State: s.GetState(), Percent: percentOf(s.GetFraction()), Role: s.GetRole(), Why: s.GetWhy(), Instead: s.GetInstead(),
					CanarySeats: s.GetCanarySeats(), FellBack: s.GetFellBack(), Failures: s.GetFailures(), Judged: s.GetJudged()}
				if s.GetJudged() > 0 {
					r := float64(s.GetFailures()) / float64(s.GetJudged())
					sh.FailureRate = &r
				}
				sc.Shares = append(sc.Shares, sh)
			}
			sb.Cohorts = append(sb.Cohorts, sc)
		}
		out = append(out, sb)
	}
	return out
}

// percentOf is a fraction in percent, to a hundredth.
func percentOf(f float64) float64 { return math.Round(f*10000) / 100 }

// rateText is a failure rate for a table, its fraction beside it:
// "12.5% (1/8)", or "-" while nobody is judged.
func rateText(failures, judged uint64) string {
	if judged == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% (%d/%d)", 100*float64(failures)/float64(judged), failures, judged)
}

// printReplicas prints the replicas serving from the store and the labels
// rollout scopes match.
func printReplicas(tw *tabwriter.Writer, rs []*adminv1.Replica) {
	if len(rs) == 0 {
		return // an lpsd from before replicas were listed
	}
	fmt.Fprintln(tw, "REPLICA\tREGION\tDEPLOY ENV\tLAST HEARTBEAT\tCLOCK")
	corrected := false
	for _, r := range rs {
		id := quote.Text(r.GetId())
		if r.GetSelf() {
			id += " (this one)"
		}
		beat := "-"
		if r.GetLastHeartbeat() != nil {
			beat = formatTime(r.GetLastHeartbeat().AsTime())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(id), dash(quote.Text(r.GetRegion())), dash(quote.Text(r.GetDeployEnv())), beat, admin.ReplicaClock(r))
		corrected = corrected || r.GetClockCorrected()
	}
	if corrected {
		fmt.Fprintln(tw, "* "+admin.ReplicaClockNote)
	}
	fmt.Fprintln(tw)
}

// printServedNow prints what the nodes of each base get now: one row per
// part of a cohort, with why, the release's fallbacks and its failure
// rate, whose definition follows the table.
func printServedNow(tw *tabwriter.Writer, bs []*adminv1.ServedBase, definition string) {
	if len(bs) == 0 {
		return
	}
	fmt.Fprintln(tw, "SERVED NOW\tNODES\tSHARE\tGETS\tROLE\tFELL BACK\tFAILURE RATE*\tWHY")
	for _, b := range bs {
		for _, c := range b.GetCohorts() {
			nodes := quote.Text(c.GetNodes())
			for _, s := range c.GetShares() {
				gets, fell, rate := quote.Text(s.GetVersion()), "-", "-"
				if gets == "" {
					gets = "baked agent"
				} else {
					fell = strconv.FormatUint(s.GetFellBack(), 10)
					rate = rateText(s.GetFailures(), s.GetJudged())
				}
				share := strconv.FormatFloat(percentOf(s.GetFraction()), 'f', -1, 64) + "%"
				if n := s.GetCanarySeats(); n > 0 {
					share += fmt.Sprintf(" +%d seats", n)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", quote.Text(b.GetBase()), nodes, share, gets, quote.Text(s.GetRole()), fell, rate, quote.Text(s.GetWhy()))
			}
		}
		if n := b.GetOmittedCohorts(); n > 0 {
			fmt.Fprintf(tw, "%s\t(%d more cohorts: more subscription sets than status shows)\t\t\t\t\t\t\n", quote.Text(b.GetBase()), n)
		}
	}
	if definition != "" {
		fmt.Fprintln(tw, "* "+quote.Text(definition))
	}
}
