package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
)

// releaseJSON is a release in -o json output (schema in doc.go).
type releaseJSON struct {
	Version       string   `json:"version"`
	Base          string   `json:"base"`
	State         string   `json:"state"`
	Percent       int32    `json:"percent"`
	Subscriptions []string `json:"subscriptions"`
	Regions       []string `json:"regions"`
	Revoked       bool     `json:"revoked"`
	// NotAfter is the signed envelope's expiry (null when it does not
	// decode); Expired is whether it has passed, as the client's clock
	// sees it: lpsd serves an expired release to no node.
	NotAfter    *time.Time `json:"not_after"`
	Expired     bool       `json:"expired"`
	PublishedAt time.Time  `json:"published_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	Revision    int64      `json:"revision"`
	// Counts are nodes' outcome reports (status only).
	Counts *countsJSON `json:"counts,omitempty"`
	// Served is the node requests this lpsd instance answered with the
	// release (status only).
	Served uint64    `json:"served"`
	Plan   *planJSON `json:"plan,omitempty"`
	// CanarySeats is how many nodes hold a seat of the plan's canary
	// (status only).
	CanarySeats int32 `json:"canary_seats,omitempty"`
	// Health is the rule's verdict on the plan's current step (status only).
	Health *healthJSON `json:"health,omitempty"`
	// EvidenceSince, when set, is when the release's evidence window
	// opened (a resume after a halt): reports accepted before it do not
	// count.
	EvidenceSince *time.Time `json:"evidence_since,omitempty"`
	// HaltedFrom is the state a halted release was halted from.
	HaltedFrom string `json:"halted_from,omitempty"`
	// Reason is the reason code of the autopilot's automatic pause or halt
	// (regression, silent, refusedIntegrity, refusedDelivery,
	// inconclusive, stalled); empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Approval is a change waiting for a second operator (lpsd
	// --policy-two-person; status only).
	Approval *approvalJSON `json:"approval,omitempty"`
	// Unchanged says a change was already in effect (changes only).
	Unchanged bool `json:"unchanged,omitempty"`
	// DryRun says nothing changed: the release is as the plan would
	// leave it (rollout plan --dry-run only).
	DryRun bool `json:"dry_run,omitempty"`
	// Preview is what the plan will do (rollout plan only).
	Preview *previewJSON `json:"preview,omitempty"`
	// NeedsApproval says why the plan, applied, would wait for a second
	// operator (rollout plan --dry-run only).
	NeedsApproval string `json:"needs_approval,omitempty"`
	// SkippedStep is the index (from 0) of the step a skip left (rollout
	// skip only).
	SkippedStep *int32 `json:"skipped_step,omitempty"`
}

type previewJSON struct {
	// Steps are the plan's steps' soonest windows, at the same index;
	// null times for a skipped step.
	Steps            []stepWindowJSON `json:"steps"`
	EarliestComplete *time.Time       `json:"earliest_complete"`
	Baseline         planBaselineJSON `json:"baseline"`
}

type stepWindowJSON struct {
	EarliestStart *time.Time `json:"earliest_start"`
	EarliestEnd   *time.Time `json:"earliest_end"`
	Deadline      *time.Time `json:"deadline"`
}

// planBaselineJSON is what a plan's preview says the release is judged
// against.
type planBaselineJSON struct {
	MaxFailureRate  float64 `json:"max_failure_rate"`
	Margin          float64 `json:"margin"`
	Floor           int32   `json:"floor"`
	Incumbent       string  `json:"incumbent"`
	MaxSilentRate   float64 `json:"max_silent_rate"`
	MaxDeliveryRate float64 `json:"max_delivery_rate"`
	ComparedWith    string  `json:"compared_with"`
}

func toPreviewJSON(p *adminv1.PlanPreview) *previewJSON {
	if p == nil {
		return nil
	}
	b := p.GetBaseline()
	out := &previewJSON{
		Steps:            []stepWindowJSON{},
		EarliestComplete: timeOrNil(p.GetEarliestComplete()),
		Baseline: planBaselineJSON{MaxFailureRate: b.GetMaxFailureRate(), Margin: b.GetMargin(), Floor: b.GetFloor(), ComparedWith: b.GetComparedWith(),
			Incumbent: b.GetIncumbent(), MaxSilentRate: b.GetMaxSilentRate(), MaxDeliveryRate: b.GetMaxDeliveryRate()},
	}
	for _, w := range p.GetSteps() {
		out.Steps = append(out.Steps, stepWindowJSON{EarliestStart: timeOrNil(w.GetEarliestStart()), EarliestEnd: timeOrNil(w.GetEarliestEnd()), Deadline: timeOrNil(w.GetDeadline())})
	}
	return out
}

// timeOrNil is ts as a time, or nil when unset.
func timeOrNil(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

type planJSON struct {
	Steps              []planStepJSON `json:"steps"`
	Margin             float64        `json:"margin"`
	MaxFailureRate     float64        `json:"max_failure_rate"`
	SilentAfterSeconds int64          `json:"silent_after_seconds"`
	// Step indexes Steps (from 0), as in the audit log's records and
	// evidence; text shows Step+1 (doc.go).
	Step      int32     `json:"step"`
	StepSince time.Time `json:"step_since"`
}

type planStepJSON struct {
	Percent     int32 `json:"percent"`
	Nodes       int32 `json:"nodes,omitempty"`
	BakeSeconds int64 `json:"bake_seconds"`
	MinReports  int32 `json:"min_reports"`
}

type healthJSON struct {
	Verdict  string    `json:"verdict"`
	Rule     string    `json:"rule,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Detail   string    `json:"detail"`
	NextDue  time.Time `json:"next_due"`
	Deadline time.Time `json:"deadline"`
	// Baseline is what the release is compared with: its base's
	// incumbent, from the last 24 h of reports or (recorded) its record.
	Baseline baselineJSON `json:"baseline"`
}

type baselineJSON struct {
	Incumbent string      `json:"incumbent"`
	Recorded  bool        `json:"recorded"`
	Counts    *countsJSON `json:"counts"`
}

func toPlanJSON(p *adminv1.Plan) *planJSON {
	if p == nil {
		return nil
	}
	out := &planJSON{Margin: p.GetMargin(), MaxFailureRate: p.GetMaxFailureRate(), Step: p.GetStep(), StepSince: p.GetStepSince().AsTime(), SilentAfterSeconds: p.GetSilentAfterSeconds(), Steps: []planStepJSON{}}
	for _, s := range p.GetSteps() {
		out.Steps = append(out.Steps, planStepJSON{Percent: s.GetPercent(), Nodes: s.GetNodes(), BakeSeconds: s.GetBakeSeconds(), MinReports: s.GetMinReports()})
	}
	return out
}

func toHealthJSON(h *adminv1.Health) *healthJSON {
	if h == nil {
		return nil
	}
	return &healthJSON{Verdict: h.GetVerdict(), Rule: h.GetRule(), Reason: h.GetReason(), Detail: h.GetDetail(), NextDue: h.GetNextDue().AsTime(),
		Deadline: h.GetDeadline().AsTime(),
		Baseline: baselineJSON{Incumbent: h.GetBaselineIncumbent(), Recorded: h.GetBaselineRecorded(), Counts: toCountsJSON(h.GetBaseline())}}
}

// countsJSON is the JSON of adminv1.Counts: nodes by outcome
// (docs/closed-loop.md).
type countsJSON struct {
	Reported         uint64 `json:"reported"`
	OK               uint64 `json:"ok"`
	Failed           uint64 `json:"failed"`
	Fallback         uint64 `json:"fallback"`
	RefusedIntegrity uint64 `json:"refused_integrity"`
	RefusedDelivery  uint64 `json:"refused_delivery"`
	NotApplicable    uint64 `json:"not_applicable"`
	Silent           uint64 `json:"silent"`
	Pending          uint64 `json:"pending"`
}

func toCountsJSON(c *adminv1.Counts) *countsJSON {
	if c == nil {
		return nil
	}
	return &countsJSON{Reported: c.GetReported(), OK: c.GetOk(), Failed: c.GetFailed(), Fallback: c.GetFallback(),
		RefusedIntegrity: c.GetRefusedIntegrity(), RefusedDelivery: c.GetRefusedDelivery(), NotApplicable: c.GetNotApplicable(),
		Silent: c.GetSilent(), Pending: c.GetPending()}
}

func toReleaseJSON(r *adminv1.Release) releaseJSON {
	return releaseJSON{
		NotAfter:      timeOrNil(r.GetNotAfter()),
		Expired:       expired(r),
		Version:       r.GetVersion(),
		Base:          r.GetBase(),
		State:         r.GetRollout().GetState(),
		Percent:       r.GetRollout().GetPercent(),
		Subscriptions: nonNil(r.GetRollout().GetSubscriptions()),
		Regions:       nonNil(r.GetRollout().GetRegions()),
		Revoked:       r.GetRevoked(),
		PublishedAt:   r.GetPublishedAt().AsTime(),
		UpdatedAt:     r.GetUpdatedAt().AsTime(),
		Revision:      r.GetRevision(),
		Counts:        toCountsJSON(r.GetCounts()),
		Served:        r.GetServed(),
		Plan:          toPlanJSON(r.GetRollout().GetPlan()),
		Health:        toHealthJSON(r.GetRollout().GetHealth()),
		CanarySeats:   r.GetRollout().GetCanarySeats(),
		EvidenceSince: timeOrNil(r.GetRollout().GetEvidenceSince()),
		HaltedFrom:    r.GetRollout().GetHaltedFrom(),
		Reason:        r.GetRollout().GetReason(),
		Approval:      toApprovalJSON(r.GetRollout().GetApproval()),
	}
}

// approvalJSON is a change waiting for a second operator.
type approvalJSON struct {
	Action      string    `json:"action"`
	Change      string    `json:"change"`
	RequestedBy string    `json:"requested_by"`
	Reason      string    `json:"reason"`
	RequestedAt time.Time `json:"requested_at"`
	Expires     time.Time `json:"expires"`
}

func toApprovalJSON(a *adminv1.Approval) *approvalJSON {
	if a == nil {
		return nil
	}
	return &approvalJSON{Action: a.GetAction(), Change: a.GetChange(), RequestedBy: a.GetRequestedBy(), Reason: a.GetReason(), RequestedAt: a.GetRequestedAt().AsTime(), Expires: a.GetExpires().AsTime()}
}

// policyJSON is the rollout policy lpsd enforces.
type policyJSON struct {
	MinCanaryNodes int32 `json:"min_canary_nodes"`
	MaxStepPercent int32 `json:"max_step_percent"`
	MinBakeSeconds int64 `json:"min_bake_seconds"`
	TwoPerson      bool  `json:"two_person"`
	// AdvanceWindow is when plan steps advance (lpsd --advance-window);
	// "" any time.
	AdvanceWindow string `json:"advance_window"`
	Summary       string `json:"summary"`
}

func toPolicyJSON(p *adminv1.Policy) *policyJSON {
	if p == nil {
		return nil // an lpsd from before the policy
	}
	return &policyJSON{MinCanaryNodes: p.GetMinCanaryNodes(), MaxStepPercent: p.GetMaxStepPercent(), MinBakeSeconds: p.GetMinBakeSeconds(), TwoPerson: p.GetTwoPerson(), AdvanceWindow: p.GetAdvanceWindow(), Summary: p.GetSummary()}
}

// unchangedAs returns what printRelease or printConfig says a release or
// component configuration already was when unchanged, as its state shows
// it.
func unchangedAs(unchanged bool, r interface{ GetRollout() *adminv1.Rollout }) string {
	if !unchanged {
		return ""
	}
	return quote.Text(r.GetRollout().GetState())
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// printRelease prints the release a change left: a document, or one
// descriptive line. already, when not empty, says what the release already
// was, so the change was in effect and (like its --reason) not recorded.
func printRelease(w io.Writer, o *outputFlags, r *adminv1.Release, already string) error {
	if o.structured() {
		doc := toReleaseJSON(r)
		doc.Unchanged = already != ""
		return o.write(w, doc)
	}
	printAlready(w, quote.Text(r.GetVersion()), already)
	ro := r.GetRollout()
	line := fmt.Sprintf("%s (base %s): %s at %d%%, subscriptions %s, regions %s, revision %d",
		quote.Text(r.GetVersion()), quote.Text(r.GetBase()), quote.Text(ro.GetState()), ro.GetPercent(), scope(ro.GetSubscriptions()), scope(ro.GetRegions()), r.GetRevision())
	if r.GetRevoked() {
		line += ", REVOKED"
	}
	if from := ro.GetHaltedFrom(); from != "" && ro.GetState() == "halted" {
		line += ", halted from " + quote.Text(from)
	}
	if es := ro.GetEvidenceSince(); es != nil {
		line += ", counting reports accepted since " + formatTime(es.AsTime())
	}
	line += ", " + expiryText(r)
	_, err := fmt.Fprintln(w, line)
	return err
}

// printAlready says, when already is not empty, that the change to what
// id names was in effect as already: nothing was written or audited.
func printAlready(w io.Writer, id, already string) {
	if already != "" {
		fmt.Fprintf(w, "%s is already %s; nothing changed (nothing recorded in the audit log)\n", id, already)
	}
}

// scope is a scope list for text output, quoted as it comes from the
// service.
func scope(ids []string) string {
	if len(ids) == 0 {
		return "all"
	}
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = quote.Text(id)
	}
	return strings.Join(q, ",")
}

// expiring is a release or a component configuration: what carries a
// signed expiry.
type expiring interface {
	GetNotAfter() *timestamppb.Timestamp
}

// expired reports whether r's envelope has expired (or has no readable
// expiry, which lpsd treats alike).
func expired(r expiring) bool {
	return r.GetNotAfter() == nil || !time.Now().Before(r.GetNotAfter().AsTime())
}

// expiryText is r's expiry for text output: "not after T", or
// "EXPIRED T".
func expiryText(r expiring) string {
	if expired(r) {
		return notAfterCell(r)
	}
	return "not after " + notAfterCell(r)
}

// notAfterCell is r's expiry in a table: the time, marked when it has
// passed.
func notAfterCell(r expiring) string {
	switch {
	case r.GetNotAfter() == nil:
		return "EXPIRED"
	case expired(r):
		return "EXPIRED " + formatTime(r.GetNotAfter().AsTime())
	}
	return formatTime(r.GetNotAfter().AsTime())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
