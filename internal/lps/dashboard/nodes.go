package dashboard

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/tally"
)

// nodesPerPage is how many nodes the nodes page lists at a time.
const nodesPerPage = 100

// nodesTimeout bounds the admin API's ListNodes (or Nodes) behind one
// page or download: each assesses the fleet, as a view's rebuild does.
const nodesTimeout = time.Minute

// maxExportPages bounds a download paged through ListNodes, for an admin
// API without Nodes: each page assesses the fleet afresh.
const maxExportPages = 100

// outcomeFilters are the outcomes the nodes page and its download filter
// by (ListNodesRequest.outcome), most severe first, then both refusals.
var outcomeFilters = func() []string {
	var out []string
	for o := tally.Failed; o >= tally.Pending; o-- {
		out = append(out, o.String())
	}
	return append(out, "refused")
}()

// nodesData is the nodes page's.
type nodesData struct {
	Version string
	// R is the release as of the view, nil when the view lacks it.
	R        *adminv1.Release
	Outcome  string
	Outcomes []string
	Resp     *adminv1.ListNodesResponse
	// From is how many nodes came before this page (the first is From+1).
	From int
	// Asked is when the nodes were listed.
	Asked time.Time
}

// Next is the link to the page after this one, "" on the last.
func (n nodesData) Next() string {
	t := n.Resp.GetNextPageToken()
	if t == "" {
		return ""
	}
	q := url.Values{"page": {t}, "from": {strconv.Itoa(n.From + len(n.Resp.GetNodes()))}}
	if n.Outcome != "" {
		q.Set("outcome", n.Outcome)
	}
	return "/releases/" + url.PathEscape(n.Version) + "/nodes?" + q.Encode()
}

// CSV is the link to this list's download.
func (n nodesData) CSV() string {
	u := "/releases/" + url.PathEscape(n.Version) + "/nodes.csv"
	if n.Outcome != "" {
		u += "?outcome=" + url.QueryEscape(n.Outcome)
	}
	return u
}

// Count is how many nodes of the release had outcome o as of the view
// (-1 without it).
func (n nodesData) Count(o string) int64 {
	if n.R == nil {
		return -1
	}
	c := n.R.GetCounts()
	switch o {
	case "failed":
		return int64(c.GetFailed())
	case "fellBack":
		return int64(c.GetFallback())
	case "refusedIntegrity":
		return int64(c.GetRefusedIntegrity())
	case "silent":
		return int64(c.GetSilent())
	case "refusedDelivery":
		return int64(c.GetRefusedDelivery())
	case "ok":
		return int64(c.GetOk())
	case "notApplicable":
		return int64(c.GetNotApplicable())
	case "pending":
		return int64(c.GetPending())
	case "refused":
		return int64(c.GetRefusedIntegrity() + c.GetRefusedDelivery())
	}
	return -1
}

// checkOutcome refuses an outcome filter the admin API does not take,
// before it costs an assessment: one of outcomeFilters, or several joined
// by commas (IncidentOutcomes).
func checkOutcome(o string) error {
	if o == "" {
		return nil
	}
	for one := range strings.SplitSeq(o, ",") {
		if !slices.Contains(outcomeFilters, one) {
			return fmt.Errorf("outcome %q: want one of %s, or several joined by commas", one, strings.Join(outcomeFilters, ", "))
		}
	}
	return nil
}

// IncidentOutcomes is the filter of the list an incident needs: every VM
// a bad release reached and hurt.
const IncidentOutcomes = "failed,fellBack,refusedIntegrity"

// IncidentCSV is the link to the download of the incident list.
func (n nodesData) IncidentCSV() string {
	return "/releases/" + url.PathEscape(n.Version) + "/nodes.csv?outcome=" + url.QueryEscape(IncidentOutcomes)
}

// nodesPage lists the nodes counted for a release, most severe first, a
// page of the admin API's ListNodes at a time, under the commonest reasons
// of the failing ones.
func (d *Dashboard) nodesPage(w http.ResponseWriter, r *http.Request, se *session) {
	q := r.URL.Query()
	data := &nodesData{Version: r.PathValue("version"), Outcome: q.Get("outcome"), Outcomes: outcomeFilters, Resp: &adminv1.ListNodesResponse{}, Asked: time.Now()}
	if v := d.view.Load(); v != nil {
		if rv, ok := v.release(data.Version); ok {
			data.R = rv.R
		}
	}
	p := page{Title: "Nodes of " + data.Version, Active: "releases", S: se, Data: data}
	if err := checkOutcome(data.Outcome); err != nil {
		p.Error = err.Error()
		d.render(w, r, http.StatusBadRequest, "nodes", p)
		return
	}
	if from, err := strconv.Atoi(q.Get("from")); err == nil && from > 0 && q.Get("page") != "" {
		data.From = from
	}
	ctx, cancel := context.WithTimeout(admin.WithActor(r.Context(), se.Actor), nodesTimeout)
	defer cancel()
	resp, err := d.cfg.Admin.ListNodes(ctx, &adminv1.ListNodesRequest{Release: data.Version, Outcome: data.Outcome, PageSize: nodesPerPage, PageToken: q.Get("page")})
	if err != nil {
		st := status.Convert(err)
		p.Error = st.Message()
		d.render(w, r, httpStatus(st.Code()), "nodes", p)
		return
	}
	data.Resp = resp
	d.render(w, r, http.StatusOK, "nodes", p)
}

// nodeExporter is the admin API's optional listing of every node at once
// (admin.Server.Nodes): one assessment instead of one per page.
type nodeExporter interface {
	Nodes(ctx context.Context, req *adminv1.ListNodesRequest) ([]*adminv1.NodeOutcome, error)
}

// allNodes returns every node req matches, in ListNodes' order.
func (d *Dashboard) allNodes(ctx context.Context, req *adminv1.ListNodesRequest) ([]*adminv1.NodeOutcome, error) {
	if ex, ok := d.cfg.Admin.(nodeExporter); ok {
		return ex.Nodes(ctx, req)
	}
	req.PageSize = 1000 // ListNodes' largest
	var out []*adminv1.NodeOutcome
	for range maxExportPages {
		resp, err := d.cfg.Admin.ListNodes(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetNodes()...)
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
	return nil, status.Errorf(codes.ResourceExhausted, "more than %d nodes match: filter by outcome, or page with lpsctl nodes", maxExportPages*1000)
}

// csvHeader names the download's columns: lpsctl nodes -o json's fields.
var csvHeader = []string{"vm_id", "subscription_id", "base", "release", "outcome", "reason", "ran", "exit_code", "boot", "time", "served_at", "replica"}

// nodesCSV sends every node counted for a release (the incident list: each
// VM it reached, with what happened), filtered by outcome, as CSV.
func (d *Dashboard) nodesCSV(w http.ResponseWriter, r *http.Request, se *session) {
	version, outcome := r.PathValue("version"), r.URL.Query().Get("outcome")
	if err := checkOutcome(outcome); err != nil {
		d.fail(w, r, se, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(admin.WithActor(r.Context(), se.Actor), nodesTimeout)
	defer cancel()
	nodes, err := d.allNodes(ctx, &adminv1.ListNodesRequest{Release: version, Outcome: outcome})
	if err != nil {
		st := status.Convert(err)
		d.fail(w, r, se, httpStatus(st.Code()), "nodes of "+version+": "+st.Message())
		return
	}
	name := "nodes-" + version
	if outcome != "" {
		name += "-" + outcome
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", fileName(name)+".csv"))
	h.Set("Cache-Control", "no-store")
	cw := csv.NewWriter(w)
	cw.Write(csvHeader) //nolint:errcheck // Flush reports the first error
	for _, n := range nodes {
		exit := ""
		if n.GetRan() != "" {
			exit = strconv.Itoa(int(n.GetExitCode()))
		}
		cw.Write([]string{cell(n.GetVmId()), cell(n.GetSubscriptionId()), cell(n.GetBase()), cell(n.GetRelease()), n.GetOutcome(), cell(n.GetReason()), cell(n.GetRan()), //nolint:errcheck // Flush reports it
			exit, cell(n.GetBoot()), csvTime(n.GetTime()), csvTime(n.GetServedAt()), cell(n.GetReplica())})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		d.cfg.Log.Warn("dashboard csv", "version", version, "err", err) // the client went away
	}
}

// cell keeps a node's words from being read as a formula by a spreadsheet
// that opens the download: a leading =, +, -, @, tab or CR gets a quote
// before it (the nodes, not operators, wrote reasons and IDs).
func cell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

func csvTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

// fileName keeps a download's name to letters, digits, dots and dashes.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}
