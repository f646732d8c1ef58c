package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/rollout"
)

// actionTimeout bounds one action's admin API call.
const actionTimeout = 30 * time.Second

// actionMethods maps each action of the release page's forms to the admin
// API method it calls, by which the role is checked. preview-plan is the
// plan's dry run, which the page shows before the plan can be applied.
var actionMethods = map[string]string{
	"percent":      adminv1.AdminService_SetRollout_FullMethodName,
	"preview-plan": adminv1.AdminService_SetPlan_FullMethodName,
	"plan":         adminv1.AdminService_SetPlan_FullMethodName,
	"skip":         adminv1.AdminService_SkipStep_FullMethodName,
	"complete":     adminv1.AdminService_Transition_FullMethodName,
	"pause":        adminv1.AdminService_Transition_FullMethodName,
	"resume":       adminv1.AdminService_Transition_FullMethodName,
	"halt":         adminv1.AdminService_Transition_FullMethodName,
	"revoke":       adminv1.AdminService_Revoke_FullMethodName,
}

// transitions maps the dashboard's transitions to the admin API's.
var transitions = map[string]adminv1.Action{
	"complete": adminv1.Action_ACTION_COMPLETE,
	"pause":    adminv1.Action_ACTION_PAUSE,
	"resume":   adminv1.Action_ACTION_RESUME,
	"halt":     adminv1.Action_ACTION_HALT,
}

// act runs one of the release page's actions through the admin API, as
// the signed-in actor, at the revision the page was rendered at: a form
// from a page the release has moved on from is refused (stale).
func (d *Dashboard) act(w http.ResponseWriter, r *http.Request, se *session) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := checkForm(r, se); err != nil {
		d.cfg.Log.Warn("dashboard form refused", "actor", se.Actor, "path", r.URL.Path, "err", err)
		d.fail(w, r, se, http.StatusForbidden, err.Error())
		return
	}
	version, action := r.PathValue("version"), r.PathValue("action")
	method, ok := actionMethods[action]
	if !ok {
		d.fail(w, r, se, http.StatusNotFound, "no action "+action)
		return
	}
	if !admin.Allowed(se.Role, method) {
		d.cfg.Log.Warn("dashboard action refused: reader role", "actor", se.Actor, "action", action, "version", version)
		d.fail(w, r, se, http.StatusForbidden, se.Actor+" has the reader role: it may look, not "+action+"; changes need an operator token or certificate")
		return
	}
	refuse := func(msg string) { d.renderRelease(w, r, se, http.StatusBadRequest, version, "", msg) }
	rev, reason, problem := changeForm(r, action, version, 1, action != "preview-plan")
	if problem != "" {
		refuse(problem)
		return
	}
	var err error
	ctx, cancel := context.WithTimeout(admin.WithActor(r.Context(), se.Actor), actionTimeout)
	defer cancel()
	switch action {
	case "percent":
		pct, perr := strconv.Atoi(strings.TrimSpace(r.PostFormValue("percent")))
		if perr != nil || pct < 0 || pct > 100 {
			refuse(fmt.Sprintf("percent %q: want a whole number from 0 to 100", r.PostFormValue("percent")))
			return
		}
		_, err = d.cfg.Admin.SetRollout(ctx, &adminv1.SetRolloutRequest{Version: version, Percent: int32(pct), IfRevision: rev, Reason: reason})
	case "preview-plan", "plan":
		plan, from, perr := planForm(r.PostForm)
		if perr != nil {
			refuse("plan: " + perr.Error())
			return
		}
		var resp *adminv1.SetPlanResponse
		resp, err = d.cfg.Admin.SetPlan(ctx, &adminv1.SetPlanRequest{Version: version, Plan: plan, FromStep: from, IfRevision: rev, Reason: reason, DryRun: action == "preview-plan"})
		if err == nil && action == "preview-plan" {
			d.render(w, r, http.StatusOK, "plan-preview", page{Title: "Plan " + version, Active: "releases", S: se,
				Data: previewData{R: resp.GetRelease(), Preview: resp.GetPreview(), Form: planFields(r.PostForm), Reason: reason, Revision: rev}})
			return
		}
	case "skip":
		_, err = d.cfg.Admin.SkipStep(ctx, &adminv1.SkipStepRequest{Version: version, IfRevision: rev, Reason: reason})
	case "revoke":
		_, err = d.cfg.Admin.Revoke(ctx, &adminv1.RevokeRequest{Version: version, IfRevision: rev, Reason: reason})
	default:
		_, err = d.cfg.Admin.Transition(ctx, &adminv1.TransitionRequest{Version: version, Action: transitions[action], IfRevision: rev, Reason: reason})
	}
	// The answer shows the release as it is now (rebuilt after a change or
	// a refusal as stale): a client gone away must not cancel the rebuild
	// every page reads.
	refreshCtx := context.WithoutCancel(r.Context())
	if err != nil {
		st := status.Convert(err)
		if st.Code() == codes.Aborted {
			d.stale(refreshCtx, w, r, se, action, version, rev)
			return
		}
		d.renderRelease(w, r, se, httpStatus(st.Code()), version, "", fmt.Sprintf("%s %s: %s", action, version, st.Message()))
		return
	}
	d.cfg.Log.Info("dashboard action", "actor", se.Actor, "action", action, "version", version)
	d.refresh(refreshCtx)
	http.Redirect(w, r, "/releases/"+url.PathEscape(version)+"?done="+url.QueryEscape(action), http.StatusSeeOther)
}

// stale answers an action refused because the release moved on from
// revision rev, the one its form was filled in on: it says what changed
// and shows the release as it is now, with forms at its new revision.
func (d *Dashboard) stale(ctx context.Context, w http.ResponseWriter, r *http.Request, se *session, action, version string, rev int64) {
	was, known := d.records.at(version, rev)
	d.refresh(ctx)
	var now *adminv1.Release
	if v := d.view.Load(); v != nil {
		if rv, ok := v.release(version); ok && rv.R.GetRevision() != rev {
			now = rv.R
		}
	}
	var what string
	switch {
	case now == nil:
		what = fmt.Sprintf("%s is no longer at revision %d, and could not be read again", version, rev)
	case !known:
		what = fmt.Sprintf("%s is now %s (revision %d, was %d)", version, stateText(now), now.GetRevision(), rev)
	default:
		what = fmt.Sprintf("%s (revision %d→%d); it is now %s", describeChange(was, domainRelease(now)), rev, now.GetRevision(), stateText(now))
	}
	if a := now.GetRollout().GetApproval(); a != nil {
		// A request for a second operator is a write of its own: say so,
		// rather than "its record changed".
		what += fmt.Sprintf("; %s asked for %s (%s), which waits for a second operator: submitting the same change approves it", a.GetRequestedBy(), a.GetAction(), a.GetChange())
	}
	d.cfg.Log.Info("dashboard action refused: stale page", "actor", se.Actor, "action", action, "version", version, "revision", rev)
	d.renderRelease(w, r, se, http.StatusConflict, version, "",
		"changed since you loaded this page: "+what+". Nothing was done ("+action+" not applied): this page now shows the release as it is; check it, then submit again if you still mean it.")
}

// describeChange says what differs between two records of a release, as
// the audit log does.
func describeChange(was, now rollout.Release) string {
	type rec struct {
		Rollout rollout.Rollout `json:"rollout"`
		Revoked bool            `json:"revoked"`
	}
	b, errB := json.Marshal(rec{was.Rollout, was.Revoked})
	a, errA := json.Marshal(rec{now.Rollout, now.Revoked})
	if errB != nil || errA != nil {
		return "its record changed"
	}
	if d := rollout.DescribeChange(string(b), string(a)); d != "no rollout change" {
		return d
	}
	return "its record changed, not its rollout"
}

// stateText is r's rollout in a few words: "halted at 10%, plan step 2/3".
func stateText(r *adminv1.Release) string {
	ro := r.GetRollout()
	s := fmt.Sprintf("%s at %d%%", ro.GetState(), ro.GetPercent())
	if p := ro.GetPlan(); p != nil {
		s += fmt.Sprintf(", plan step %d/%d", p.GetStep()+1, len(p.GetSteps()))
	}
	if r.GetRevoked() {
		s += ", revoked"
	}
	return s
}

// domainRelease reads back what the rollout rules decide on from the
// admin API's record (not its envelope).
func domainRelease(r *adminv1.Release) rollout.Release {
	ro := r.GetRollout()
	out := rollout.Release{Version: r.GetVersion(), Base: r.GetBase(), Revoked: r.GetRevoked(), Rollout: rollout.Rollout{
		State: rollout.State(ro.GetState()), Percent: int(ro.GetPercent()), Subscriptions: ro.GetSubscriptions(), Regions: ro.GetRegions(),
		DeployEnvs: ro.GetDeployEnvs(), HaltedFrom: rollout.State(ro.GetHaltedFrom()), Reason: ro.GetReason(),
	}}
	if es := ro.GetEvidenceSince(); es != nil {
		out.Rollout.EvidenceSince = es.AsTime()
	}
	if p := ro.GetPlan(); p != nil {
		pl := &rollout.Plan{Step: int(p.GetStep()), Margin: p.GetMargin(), MaxFailureRate: p.GetMaxFailureRate(), Timed: p.GetTimed()}
		if ss := p.GetStepSince(); ss != nil {
			pl.StepSince = ss.AsTime()
		}
		for _, st := range p.GetSteps() {
			pl.Steps = append(pl.Steps, rollout.PlanStep{Percent: int(st.GetPercent()), Nodes: int(st.GetNodes()), Bake: time.Duration(st.GetBakeSeconds()) * time.Second, MinReports: int(st.GetMinReports())})
		}
		out.Rollout.Plan = pl
	}
	return out
}

// maxRecordRevisions is how many revisions of each release records keeps:
// enough for a form left open while the autopilot steps its plan.
const maxRecordRevisions = 16

// records holds the revisions of each release that recent views showed
// (what the rollout rules decide on, without the envelope), for saying
// what changed since a page was rendered. It holds the releases of the
// last view only.
type records struct {
	mu sync.Mutex
	m  map[string][]revision
}

type revision struct {
	rev int64
	r   rollout.Release
}

func (c *records) add(st *adminv1.StatusResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string][]revision, len(st.GetReleases()))
	for _, r := range st.GetReleases() {
		revs := c.m[r.GetVersion()]
		if n := len(revs); n == 0 || revs[n-1].rev != r.GetRevision() {
			revs = append(revs, revision{r.GetRevision(), domainRelease(r)})
		}
		next[r.GetVersion()] = revs[max(0, len(revs)-maxRecordRevisions):]
	}
	c.m = next
}

// at returns version's record at rev, if a recent view showed it.
func (c *records) at(version string, rev int64) (rollout.Release, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.m[version] {
		if x.rev == rev {
			return x.r, true
		}
	}
	return rollout.Release{}, false
}

// offer is one action the release page offers, with what its form says.
type offer struct {
	// Name is the action (actionMethods), its form's path and class.
	Name string
	// Title heads its form; What says what it does from here.
	Title, What string
	// Confirm is what the operator ticks to confirm, "" for a form that
	// changes nothing (the plan's preview).
	Confirm string
	// Button is the submit button's text.
	Button string
	// MinPercent is the lowest percentage the percent form takes.
	MinPercent int
}

// actionsFor lists the actions the release page offers for r at now: the
// ones the rollout rules allow from its state, asked of those rules (a
// draft starts with a percentage or a plan, not a resume), revoke last.
func actionsFor(r *adminv1.Release, now time.Time) []offer {
	if r.GetRevoked() {
		return nil
	}
	d := domainRelease(r)
	v, from := d.Version, d.Rollout.State
	var out []offer
	if _, err := d.SetScope(d.Rollout.Percent+1, nil, nil); err == nil {
		what := fmt.Sprintf("Serve more of the nodes in scope than its %d%% (a percentage never shrinks: halt or revoke instead); its scope stays.", d.Rollout.Percent)
		if from == rollout.Draft {
			what = "Start rolling it out to this percentage of the nodes in scope."
		}
		out = append(out, offer{Name: "percent", Title: "Set percent", What: what, Confirm: "set the percentage of " + v, Button: "Set percent of " + v, MinPercent: d.Rollout.Percent + 1})
	}
	// rollout.Release.SetPlan takes a draft or a rolling release.
	if from == rollout.Draft || from == rollout.Rolling {
		what := "Put it on steps that lpsd advances while it is healthy and halts on a regression. You see lpsd's dry run first, then apply it."
		if d.Rollout.Plan != nil {
			what = "Replace its plan with new steps. You see lpsd's dry run first, then apply it."
		}
		out = append(out, offer{Name: "preview-plan", Title: "Plan", What: what, Button: "Preview the plan"})
	}
	if next, left, err := d.Skip(now); err == nil {
		p, np := d.Rollout.Plan, next.Rollout.Plan
		out = append(out, offer{Name: "skip", Title: "Skip step",
			What:    fmt.Sprintf("End step %d/%d (%s) now, whatever its bake, reports and health say, and start step %d/%d (%s). It gives up the step's evidence.", left+1, len(p.Steps), p.Steps[left], np.Step+1, len(np.Steps), np.Current()),
			Confirm: fmt.Sprintf("skip step %d/%d of %s", left+1, len(p.Steps), v), Button: "Skip step of " + v})
	}
	next := from.Next()
	if slices.Contains(next, rollout.Complete) {
		out = append(out, offer{Name: "complete", Title: "Complete", What: "Serve it to every node in scope (100%), ending any plan.", Confirm: "complete " + v, Button: "complete " + v})
	}
	if slices.Contains(next, rollout.Rolling) && from != rollout.Draft {
		what := "Go on rolling; the current plan step bakes afresh."
		if from == rollout.Halted {
			what = "Serve it again, on fresh evidence: the reports before now no longer count."
			if d.Rollout.HaltedFrom == rollout.Complete {
				what = "Serve it again to every node in scope, as before the halt, on fresh evidence: the reports before now no longer count."
			}
		}
		out = append(out, offer{Name: "resume", Title: "Resume", What: what, Confirm: "resume " + v, Button: "resume " + v})
	}
	if slices.Contains(next, rollout.Paused) {
		out = append(out, offer{Name: "pause", Title: "Pause", What: "Stop growing; keep serving the nodes it has.", Confirm: "pause " + v, Button: "pause " + v})
	}
	if slices.Contains(next, rollout.Halted) {
		out = append(out, offer{Name: "halt", Title: "Halt", What: "Stop serving it: nodes fall back to an older release (staged copies stay until it is revoked).", Confirm: "halt " + v, Button: "halt " + v})
	}
	return append(out, offer{Name: "revoke", Title: "Revoke", What: "Never serve it again: nodes remove staged copies. Nothing undoes this; a fix is a new patch version.", Confirm: "revoke " + v, Button: "revoke " + v})
}

// stepSize is a plan step's size for people.
func stepSize(s *adminv1.PlanStep) string {
	if s.GetNodes() > 0 {
		return fmt.Sprintf("a canary of %d nodes", s.GetNodes())
	}
	return fmt.Sprintf("%d%%", s.GetPercent())
}

// planInputs are the plan form's fields beside its steps, each with
// lpsctl rollout plan's default.
var planInputs = []struct{ Name, Label, Default string }{
	{"margin", "Margin over the incumbent's failure rate (a fraction)", strconv.FormatFloat(rollout.DefaultMargin, 'g', -1, 64)},
	{"max_failure", "Failure-rate ceiling (a fraction)", strconv.FormatFloat(rollout.DefaultMaxFailureRate, 'g', -1, 64)},
	{"max_silent", "Silent-rate ceiling (a fraction)", strconv.FormatFloat(rollout.DefaultMaxRate, 'g', -1, 64)},
	{"max_delivery", "Refused-for-delivery-rate ceiling (a fraction)", strconv.FormatFloat(rollout.DefaultMaxRate, 'g', -1, 64)},
	{"silent_after", "Silent after (a node served it that has not reported)", duration.Format(rollout.DefaultSilentAfter)},
	{"deadline", "Deadline past a step's bake to wait for evidence", duration.Format(rollout.DefaultDeadline)},
}

// planField is one plan input as the operator filled it in.
type planField struct{ Name, Value string }

// planFields are the plan form's inputs as filled in, for the preview's
// apply form to send again unchanged.
func planFields(f url.Values) []planField {
	out := []planField{{"steps", f.Get("steps")}, {"from_step", f.Get("from_step")}}
	for _, in := range planInputs {
		out = append(out, planField{in.Name, f.Get(in.Name)})
	}
	return out
}

// planForm reads the plan form as lpsctl rollout plan reads its flags:
// the steps as --steps, a blank field as its flag's default.
func planForm(f url.Values) (*adminv1.Plan, int32, error) {
	steps, err := rollout.ParseSteps(f.Get("steps"))
	if err != nil {
		return nil, 0, fmt.Errorf("steps: %w", err)
	}
	plan := &adminv1.Plan{}
	for _, st := range steps {
		plan.Steps = append(plan.Steps, &adminv1.PlanStep{Percent: int32(st.Percent), Nodes: int32(st.Nodes), BakeSeconds: int64(st.Bake / time.Second), MinReports: int32(st.MinReports)})
	}
	val := func(name string) string {
		if s := strings.TrimSpace(f.Get(name)); s != "" {
			return s
		}
		for _, in := range planInputs {
			if in.Name == name {
				return in.Default
			}
		}
		return ""
	}
	for _, fr := range []struct {
		name string
		to   *float64
	}{{"margin", &plan.Margin}, {"max_failure", &plan.MaxFailureRate}, {"max_silent", &plan.MaxSilentRate}, {"max_delivery", &plan.MaxDeliveryRate}} {
		if *fr.to, err = strconv.ParseFloat(val(fr.name), 64); err != nil {
			return nil, 0, fmt.Errorf("%s %q: want a fraction such as 0.05", fr.name, val(fr.name))
		}
	}
	for _, fd := range []struct {
		name string
		to   *int64
	}{{"silent_after", &plan.SilentAfterSeconds}, {"deadline", &plan.DeadlineSeconds}} {
		d, err := duration.Parse(val(fd.name))
		if err != nil {
			return nil, 0, fmt.Errorf("%s %q: %v", fd.name, val(fd.name), err)
		}
		*fd.to = int64(d / time.Second)
	}
	var from int64
	if s := strings.TrimSpace(f.Get("from_step")); s != "" {
		if from, err = strconv.ParseInt(s, 10, 32); err != nil || from < 1 || int(from) > len(steps) {
			return nil, 0, fmt.Errorf("start at step %q: want a step from 1 to %d", s, len(steps))
		}
	}
	return plan, int32(from), nil
}

// previewData is the plan preview page's: lpsd's dry run of the plan.
type previewData struct {
	// R is the release as the plan would leave it.
	R       *adminv1.Release
	Preview *adminv1.PlanPreview
	// Form, Reason and Revision are sent again to apply it.
	Form     []planField
	Reason   string
	Revision int64
}

// ExpiresFirst reports whether the envelope expires before the plan can
// complete.
func (p previewData) ExpiresFirst() bool {
	na, done := p.R.GetNotAfter(), p.Preview.GetEarliestComplete()
	return na != nil && done != nil && na.AsTime().Before(done.AsTime())
}

// setFreeze freezes or thaws every rollout through the admin API, as the
// signed-in actor, at the freeze revision the page was rendered at: a form
// from a page the freeze has changed since is refused, with the freeze as
// it is now.
func (d *Dashboard) setFreeze(w http.ResponseWriter, r *http.Request, se *session) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := checkForm(r, se); err != nil {
		d.cfg.Log.Warn("dashboard form refused", "actor", se.Actor, "path", r.URL.Path, "err", err)
		d.fail(w, r, se, http.StatusForbidden, err.Error())
		return
	}
	if !admin.Allowed(se.Role, adminv1.AdminService_SetFreeze_FullMethodName) {
		d.fail(w, r, se, http.StatusForbidden, se.Actor+" has the reader role: it may look, not freeze or thaw rollouts; that needs an operator token or certificate")
		return
	}
	refuse := func(msg string) { d.renderReleases(w, r, se, http.StatusBadRequest, "", msg) }
	frozen := r.PostFormValue("frozen") == "true"
	action := admin.ActionUnfreeze
	if frozen {
		action = admin.ActionFreeze
	}
	// A freeze never written is at revision 0.
	rev, reason, problem := changeForm(r, action, "every rollout", 0, true)
	if problem != "" {
		refuse(problem)
		return
	}
	ctx, cancel := context.WithTimeout(admin.WithActor(r.Context(), se.Actor), actionTimeout)
	defer cancel()
	_, err := d.cfg.Admin.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: frozen, Reason: reason, IfRevision: rev, CheckRevision: true})
	refreshCtx := context.WithoutCancel(r.Context())
	if err != nil {
		st := status.Convert(err)
		d.refresh(refreshCtx)
		msg := fmt.Sprintf("%s: %s", action, st.Message())
		if st.Code() == codes.Aborted {
			msg = action + ": refused, the freeze changed since you loaded this page; it is shown as it is now: " + freezeText(d.view.Load()) + ". Nothing was done"
		}
		d.renderReleases(w, r, se, httpStatus(st.Code()), "", msg)
		return
	}
	d.cfg.Log.Info("dashboard action", "actor", se.Actor, "action", action)
	d.refresh(refreshCtx)
	http.Redirect(w, r, "/?done="+url.QueryEscape(action), http.StatusSeeOther)
}

// freezeText says what v shows of the freeze.
func freezeText(v *view) string {
	if v == nil || v.Freeze == nil {
		return "unknown"
	}
	f := v.Freeze
	if !f.GetFrozen() {
		return "not frozen (last changed by " + f.GetActor() + ")"
	}
	return fmt.Sprintf("frozen since %s by %s: %q", f.GetSince().AsTime().UTC().Format(time.RFC3339), f.GetActor(), f.GetReason())
}

// changeForm reads what every change form carries: the revision of what it
// changes (subject: a version, "every rollout") it was rendered at, at
// least minRev; the ticked confirmation, when confirm; and a reason.
// problem says, for the operator, what is missing ("" when nothing is).
func changeForm(r *http.Request, action, subject string, minRev int64, confirm bool) (rev int64, reason, problem string) {
	rev, err := strconv.ParseInt(r.PostFormValue("revision"), 10, 64)
	switch {
	case err != nil || rev < minRev:
		return 0, "", "this form does not say which revision of " + subject + " it was filled in on: reload the page and try again"
	case confirm && r.PostFormValue("confirm") != "yes":
		return 0, "", "tick the confirmation to " + action + " " + subject
	}
	if reason = strings.TrimSpace(r.PostFormValue("reason")); reason == "" {
		return 0, "", "say why: the reason goes to the audit log"
	}
	return rev, reason, ""
}
