package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/store"
	"nodehotfix/internal/typo"
)

// ReasonUnseenScope is the ErrorInfo reason of a scope refused for a value
// no node was seen with. Metadata: "kind" (subscription or region),
// "value", and "suggestion" (the nearest seen value, when one is near).
const ReasonUnseenScope = "UNSEEN_SCOPE"

// SeenWindow is how far back a node counts as seen for a scope: a day of
// stored reports and served records.
const SeenWindow = 24 * time.Hour

// maxUnseenNamed bounds the unseen values one refusal names.
const maxUnseenNamed = 5

// checkSeen refuses a scope value that can match no node: a subscription
// that no report or served record of the last SeenWindow has, a region no
// live replica serves from (its --region), unless allow. It reads what a
// look of the autopilot reads at most (the reports and served records,
// only when there are subscriptions to check; the replicas' labels, only
// for regions), and answers FailedPrecondition naming each unseen value
// and the nearest seen spelling, with an ErrorInfo of ReasonUnseenScope
// for the first.
func (s *Server) checkSeen(ctx context.Context, subscriptions, regions []string, allow bool) error {
	subscriptions, regions = scopeValues(subscriptions), scopeValues(regions)
	if allow || len(subscriptions)+len(regions) == 0 {
		return nil
	}
	type unseen struct{ kind, value, suggestion string }
	var found []unseen
	var parts []string
	// named lists the unseen values, each with its nearest seen spelling,
	// at most maxUnseenNamed.
	named := func(kind string, values, seen []string) string {
		var out []string
		for i, v := range values {
			if i == maxUnseenNamed {
				out = append(out, fmt.Sprintf("%d more", len(values)-i))
				break
			}
			u := unseen{kind, v, typo.Closest(v, seen)}
			found = append(found, u)
			if u.suggestion != "" {
				out = append(out, fmt.Sprintf("%q (did you mean %q?)", v, u.suggestion))
			} else {
				out = append(out, fmt.Sprintf("%q", v))
			}
		}
		return strings.Join(out, ", ")
	}
	if len(subscriptions) > 0 {
		seen, err := s.seenSubscriptions(ctx, "")
		if err != nil {
			return err
		}
		if missing := notIn(subscriptions, seen); len(missing) > 0 {
			parts = append(parts, fmt.Sprintf("no node of subscription %s was seen in the last %g h (no stored report or served record; %d subscriptions were)",
				named("subscription", missing, seen), SeenWindow.Hours(), len(seen)))
		}
	}
	if len(regions) > 0 {
		hs, err := s.replicas(ctx)
		if err != nil {
			return err
		}
		var served []string
		for _, p := range places(hs) {
			if r := strings.ToLower(p.Region); r != "" && !slices.Contains(served, r) {
				served = append(served, r)
			}
		}
		known := "no replica has a --region"
		if len(served) > 0 {
			known = "the replicas serve " + strings.Join(served, ", ")
		}
		if missing := notIn(regions, served); len(missing) > 0 {
			parts = append(parts, fmt.Sprintf("no live replica serves region %s (%s)", named("region", missing, served), known))
		}
	}
	if len(found) == 0 {
		return nil
	}
	st := status.Newf(codes.FailedPrecondition, "the scope matches no node seen: %s; to scope it anyway (nodes not provisioned yet, a replica not started yet), pass --allow-unseen (allow_unseen in the API)", strings.Join(parts, "; "))
	md := map[string]string{"kind": found[0].kind, "value": found[0].value}
	if found[0].suggestion != "" {
		md["suggestion"] = found[0].suggestion
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonUnseenScope, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// notIn returns the values not in seen, in order.
func notIn(values, seen []string) []string {
	var out []string
	for _, v := range values {
		if !slices.Contains(seen, v) {
			out = append(out, v)
		}
	}
	return out
}

// scopeValues are a scope's values as rollouts keep them: trimmed, lower
// case, without blanks.
func scopeValues(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v = strings.ToLower(strings.TrimSpace(v)); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// seenSubscriptions returns the subscriptions (lower case) of the reports
// and served records lpsd accepted in the last SeenWindow, of image base
// base ("": of every base), sorted.
func (s *Server) seenSubscriptions(ctx context.Context, base string) ([]string, error) {
	set := map[string]bool{}
	if err := s.seen(ctx, base, func(sub, _ string) { set[sub] = true }); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// seenNodes returns, by subscription (lower case), how many distinct
// vmIds of image base base ("": of every base) the reports and served
// records lpsd accepted in the last SeenWindow name.
func (s *Server) seenNodes(ctx context.Context, base string) (map[string]int, error) {
	vms := map[string]map[string]bool{}
	err := s.seen(ctx, base, func(sub, vm string) {
		if vms[sub] == nil {
			vms[sub] = map[string]bool{}
		}
		vms[sub][vm] = true
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(vms))
	for sub, set := range vms {
		out[sub] = len(set)
	}
	return out, nil
}

// seen calls see with the subscription (lower case) and vmId of every
// report and served record of image base base ("": of every base) lpsd
// accepted in the last SeenWindow. Records nobody can read are left out,
// as a look leaves them out.
func (s *Server) seen(ctx context.Context, base string, see func(sub, vm string)) error {
	from := s.now().Add(-SeenWindow)
	add := func(sub, vm, b string, t time.Time) {
		if !t.Before(from) && sub != "" && (base == "" || b == base) {
			see(strings.ToLower(sub), vm)
		}
	}
	reports, err := s.store.Reports(ctx)
	if err != nil && !unreadable(err) {
		return s.storeError("list reports", err)
	}
	for _, r := range reports {
		add(r.SubscriptionID, r.VMID, r.Base, r.Time)
	}
	served, err := s.store.Served(ctx)
	if err != nil && !unreadable(err) {
		return s.storeError("list served records", err)
	}
	for _, sv := range served {
		add(sv.SubscriptionID, sv.VMID, sv.Base, sv.Time)
	}
	return nil
}

// seenNodesOf is seenNodes of release version's image base: the nodes a
// canary of it scoped to every subscription is spread over
// (rollout.Plan.SpreadCount).
func (s *Server) seenNodesOf(ctx context.Context, version string) (map[string]int, error) {
	v, err := hotfix.ParseVersion(version)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "version: %v", err)
	}
	return s.seenNodes(ctx, v.Base())
}

// unreadable reports whether err is only a list's note of records it
// could not decode (the others are usable).
func unreadable(err error) bool {
	var ue *store.UnreadableError
	return errors.As(err, &ue)
}
