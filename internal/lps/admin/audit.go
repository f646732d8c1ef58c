package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/store"
)

// ListAudit returns audit entries after a sequence number that match the
// request's filters (target, actor, since), oldest first; a limit of 0
// means 100, and at most 1000 are returned. One call examines at most
// maxAuditScan entries: next_after_seq and more say where to go on.
func (s *Server) ListAudit(ctx context.Context, req *adminv1.ListAuditRequest) (*adminv1.ListAuditResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	after, limit := req.GetAfterSeq(), int(req.GetLimit())
	switch {
	case after < 0:
		return nil, status.Errorf(codes.InvalidArgument, "after_seq %d is negative", after)
	case limit < 0:
		return nil, status.Errorf(codes.InvalidArgument, "limit %d is negative", limit)
	case limit == 0:
		limit = defaultAuditLimit
	case limit > maxAuditLimit:
		limit = maxAuditLimit
	}
	var since time.Time
	if ts := req.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "since: %v", err)
		}
		since = ts.AsTime()
	}
	if a := req.GetAction(); a != "" && !slices.Contains(Actions(), a) {
		return nil, status.Errorf(codes.InvalidArgument, "action %q: want one of %s", a, strings.Join(Actions(), ", "))
	}
	match := func(e store.AuditEntry) bool {
		return (req.GetTarget() == "" || e.Target == req.GetTarget()) &&
			(req.GetActor() == "" || e.Actor == req.GetActor()) &&
			(req.GetAction() == "" || e.Action == req.GetAction()) &&
			(since.IsZero() || !e.Time.Before(since))
	}
	filtered := req.GetTarget() != "" || req.GetActor() != "" || req.GetAction() != "" || !since.IsZero()
	resp := &adminv1.ListAuditResponse{NextAfterSeq: after}
	scanned := 0
	for {
		// Unfiltered, every entry read is returned: read no more than the
		// page needs.
		chunk := min(auditChunk, maxAuditScan-scanned)
		if !filtered {
			chunk = limit - len(resp.Entries)
		}
		entries, err := s.store.Audit(ctx, resp.NextAfterSeq, chunk)
		if err != nil {
			return nil, s.storeError("read audit log", err)
		}
		for _, e := range entries {
			resp.NextAfterSeq = e.Seq
			scanned++
			if match(e) {
				resp.Entries = append(resp.Entries, auditProto(e))
				if len(resp.Entries) == limit {
					// Stopped at the limit: later entries, read or not,
					// are for the next call.
					resp.More = true
					return resp, nil
				}
			}
		}
		if len(entries) < chunk {
			return resp, nil // the end of the log
		}
		if scanned >= maxAuditScan {
			resp.More = true
			return resp, nil
		}
	}
}

func auditProto(e store.AuditEntry) *adminv1.AuditEntry {
	return &adminv1.AuditEntry{
		Seq:          e.Seq,
		Time:         timestamppb.New(e.Time),
		Actor:        e.Actor,
		Action:       e.Action,
		Target:       e.Target,
		BeforeJson:   rawText(e.Before),
		AfterJson:    rawText(e.After),
		EvidenceJson: rawText(e.Evidence),
		Reason:       e.Reason,
	}
}

// rawText returns JSON as text, with null as "".
func rawText(m json.RawMessage) string {
	if t := bytes.TrimSpace(m); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		return string(t)
	}
	return ""
}
