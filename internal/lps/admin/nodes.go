package admin

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"nodehotfix/internal/assess"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/tally"
)

// Page sizes of ListNodes.
const (
	defaultNodesPage = 100
	maxNodesPage     = 1000
)

// outcomeFilters maps ListNodesRequest.outcome to the outcomes it keeps.
var outcomeFilters = func() map[string][]tally.Outcome {
	m := map[string][]tally.Outcome{"refused": {tally.RefusedIntegrity, tally.RefusedDelivery}}
	for o := tally.Pending; o <= tally.Failed; o++ {
		m[o.String()] = []tally.Outcome{o}
	}
	return m
}()

// keptOutcomes reads ListNodesRequest.outcome: one name of
// outcomeFilters, or several joined by commas (an incident's list:
// failed,fellBack,refusedIntegrity); nil, every outcome, for "".
func keptOutcomes(spec string) ([]tally.Outcome, error) {
	if spec == "" {
		return nil, nil
	}
	var keep []tally.Outcome
	for name := range strings.SplitSeq(spec, ",") {
		os, ok := outcomeFilters[strings.TrimSpace(name)]
		if !ok {
			names := slices.Sorted(maps.Keys(outcomeFilters))
			return nil, status.Errorf(codes.InvalidArgument, "outcome %.64q: want one of %s, or several joined by commas", name, strings.Join(names, ", "))
		}
		keep = append(keep, os...)
	}
	return keep, nil
}

// maxTopReasons is how many reasons ListNodes sums up.
const maxTopReasons = 10

// ListNodes lists the nodes counted for the releases that match, from the
// same assessment Status shows, most severe outcome first, with the
// commonest reasons of the failing ones. The page token is where the page
// ended in that order (pageKey), so the next page starts after that node
// whatever reported meanwhile: a node whose outcome changed between pages
// may be listed under both or neither, and every other node exactly once.
func (s *Server) ListNodes(ctx context.Context, req *adminv1.ListNodesRequest) (*adminv1.ListNodesResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, status.Errorf(codes.InvalidArgument, "page_size %d is negative", size)
	case size == 0:
		size = defaultNodesPage
	case size > maxNodesPage:
		size = maxNodesPage
	}
	after, offset, err := parsePageToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	all, err := s.matchingNodes(ctx, req)
	if err != nil {
		return nil, err
	}
	if after != nil {
		i, found := slices.BinarySearchFunc(all, *after, func(c counted, k pageKey) int { return c.key().compare(k) })
		if found {
			i++
		}
		offset = i
	}
	resp := &adminv1.ListNodesResponse{Total: int64(len(all)), TopReasons: topReasons(all)}
	if offset < len(all) {
		end := min(offset+size, len(all))
		for _, c := range all[offset:end] {
			resp.Nodes = append(resp.Nodes, c.out)
		}
		if end < len(all) {
			resp.NextPageToken = all[end-1].key().token()
		}
	}
	return resp, nil
}

// pageKey is a node's place in ListNodes' order: its outcome, most severe
// first, then its release and vmId.
type pageKey struct {
	Outcome tally.Outcome `json:"o"`
	Release string        `json:"r"`
	VMID    string        `json:"v"`
}

func (c counted) key() pageKey { return pageKey{c.n.Outcome, c.out.Release, c.n.VMID} }

func (a pageKey) compare(b pageKey) int {
	return cmp.Or(cmp.Compare(b.Outcome, a.Outcome), strings.Compare(a.Release, b.Release), strings.Compare(a.VMID, b.VMID))
}

// pageTokenPrefix marks a token that is a pageKey; a token of digits
// alone is an offset, as lpsd gave before, so a listing begun on an older
// replica goes on here. An older replica refuses this one's tokens
// (InvalidArgument), so mid-upgrade behind a load balancer a listing may
// have to start again.
const pageTokenPrefix = "k1."

func (a pageKey) token() string {
	b, _ := json.Marshal(a) // strings and an int: cannot fail
	return pageTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// maxPageToken bounds a token lpsd reads: a release version and a vmId
// are far shorter.
const maxPageToken = 1024

// parsePageToken reads a page token: none (the first page), a pageKey to
// start after, or an offset.
func parsePageToken(tok string) (*pageKey, int, error) {
	bad := func() error {
		return status.Errorf(codes.InvalidArgument, "page_token %.64q is not one this service gave: start again without it", tok)
	}
	switch {
	case tok == "":
		return nil, 0, nil
	case len(tok) > maxPageToken:
		return nil, 0, bad()
	case strings.HasPrefix(tok, pageTokenPrefix):
		b, err := base64.RawURLEncoding.DecodeString(tok[len(pageTokenPrefix):])
		var k pageKey
		if err != nil || json.Unmarshal(b, &k) != nil {
			return nil, 0, bad()
		}
		return &k, 0, nil
	}
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 {
		return nil, 0, bad()
	}
	return nil, n, nil
}

// Nodes returns every node that ListNodes would page through for req, in
// its order, from one assessment (req's page_size and page_token are
// ignored): for an export that must not repeat or skip a node, or assess
// the fleet once per page. Its errors are ListNodes'. The caller checks
// the role: a reader may call it, as ListNodes.
func (s *Server) Nodes(ctx context.Context, req *adminv1.ListNodesRequest) ([]*adminv1.NodeOutcome, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	all, err := s.matchingNodes(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]*adminv1.NodeOutcome, len(all))
	for i, c := range all {
		out[i] = c.out
	}
	return out, nil
}

// counted is one node's vote for a release, with its outcome to order by.
type counted struct {
	n   tally.Node
	out *adminv1.NodeOutcome
}

// matchingNodes checks req's filters and returns the nodes they match,
// most severe first.
func (s *Server) matchingNodes(ctx context.Context, req *adminv1.ListNodesRequest) ([]counted, error) {
	keep, err := keptOutcomes(req.GetOutcome())
	if err != nil {
		return nil, err
	}
	if b := req.GetBase(); b != "" {
		if _, err := hotfix.ParseBase(b); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "base: %v", err)
		}
	}
	var since time.Time
	if ts := req.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "since: %v", err)
		}
		since = ts.AsTime()
	}
	rels, _, err := s.store.Releases(ctx)
	if err != nil {
		return nil, s.storeError("list releases", err)
	}
	if v := req.GetRelease(); v != "" && !slices.ContainsFunc(rels, func(r rollout.Release) bool { return r.Version == v }) {
		return nil, status.Errorf(codes.NotFound, "release %.64q not found: `lpsctl status` lists the releases", v)
	}
	fleet, err := assess.Assess(ctx, s.evidence, rels, s.now())
	if err != nil {
		return nil, s.storeError("assess releases", err)
	}
	var all []counted
	for _, r := range rels {
		if (req.GetRelease() != "" && r.Version != req.GetRelease()) || (req.GetBase() != "" && r.Base != req.GetBase()) {
			continue
		}
		for _, n := range fleet.Tally.Nodes(r.Version) {
			if keep != nil && !slices.Contains(keep, n.Outcome) {
				continue
			}
			out := nodeProto(r, n)
			if (req.GetSubscriptionId() != "" && !strings.EqualFold(out.SubscriptionId, req.GetSubscriptionId())) ||
				(!since.IsZero() && out.Time != nil && out.Time.AsTime().Before(since)) { // no time: a seat whose time could not be read
				continue
			}
			all = append(all, counted{n, out})
		}
	}
	// Most severe first across releases too (the tally's order), then by
	// release and vmId.
	slices.SortStableFunc(all, func(a, b counted) int { return a.key().compare(b.key()) })
	return all, nil
}

// topReasons sums up the failing nodes of all (every outcome worse than
// ok) by outcome and reason: the commonest first, then the most severe.
func topReasons(all []counted) []*adminv1.ReasonCount {
	type key struct {
		o      tally.Outcome
		reason string
	}
	n := map[key]int64{}
	for _, c := range all {
		if c.n.Outcome > tally.OK {
			n[key{c.n.Outcome, c.out.Reason}]++
		}
	}
	keys := slices.Collect(maps.Keys(n))
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(n[b], n[a]), cmp.Compare(b.o, a.o), strings.Compare(a.reason, b.reason))
	})
	var out []*adminv1.ReasonCount
	for _, k := range keys[:min(len(keys), maxTopReasons)] {
		out = append(out, &adminv1.ReasonCount{Outcome: k.o.String(), Reason: k.reason, Nodes: n[k]})
	}
	return out
}

// nodeProto is n's vote for r on the wire.
func nodeProto(r rollout.Release, n tally.Node) *adminv1.NodeOutcome {
	out := &adminv1.NodeOutcome{VmId: n.VMID, Base: r.Base, Release: r.Version, Outcome: n.Outcome.String()}
	if sv := n.Served; sv != nil {
		out.SubscriptionId, out.Boot, out.Time, out.ServedAt, out.Replica = sv.SubscriptionID, sv.Boot, timestamppb.New(sv.Time), timestamppb.New(sv.Time), sv.Replica
	}
	if st := n.Seat; st != nil {
		// Counted by its canary seat alone.
		out.Reason = "holds a canary seat; no served record or report of this base counts it"
		// The store names the subscription of a seat taken under a
		// per-subscription bound; of one taken without, none.
		out.SubscriptionId = st.SubscriptionID
		if !st.Since.IsZero() {
			out.Time = timestamppb.New(st.Since)
		}
		return out
	}
	if rp := n.Report; rp != nil && rp.Started() {
		// It said it was about to run the release, and nothing since.
		out.SubscriptionId, out.Boot, out.Time = rp.SubscriptionID, rp.Boot, timestamppb.New(rp.Time)
		out.Reason = "started " + rp.HotfixVersion + "; no outcome reported"
		return out
	}
	if rp := n.Report; rp != nil {
		out.SubscriptionId, out.Boot, out.Time, out.ExitCode = rp.SubscriptionID, rp.Boot, timestamppb.New(rp.Time), int32(rp.ExitCode)
		out.Ran = fmt.Sprintf("%s %s", rp.Agent, rp.AgentVersion)
		switch {
		case rp.Fallback:
			out.Reason = rp.FallbackReason
		case n.Outcome == tally.RefusedIntegrity || n.Outcome == tally.RefusedDelivery || n.Outcome == tally.NotApplicable:
			out.Reason = strings.TrimSpace("decision " + rp.Decision + " download-hotfix " + rp.DownloadHotfix)
		case n.Outcome == tally.Failed:
			out.Reason = fmt.Sprintf("provision exited %d", rp.ExitCode)
		}
	}
	return out
}
