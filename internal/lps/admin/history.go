package admin

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/history"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/store"
)

// GetHistory reads a release's recorded assessment (internal/history)
// from the store: what every replica reads alike.
func (s *Server) GetHistory(ctx context.Context, req *adminv1.GetHistoryRequest) (*adminv1.GetHistoryResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	v, err := hotfix.ParseVersion(req.GetVersion())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "version: %v", err)
	}
	if req.GetLimit() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "limit %d is negative", req.GetLimit())
	}
	version := v.String()
	if _, _, err := s.store.Release(ctx, version); err != nil {
		return nil, s.storeError("read release "+version, err)
	}
	h, ok := s.store.(store.History)
	if !ok {
		return &adminv1.GetHistoryResponse{}, nil
	}
	ps, err := history.Read(ctx, h, version, int(req.GetLimit()))
	resp := &adminv1.GetHistoryResponse{Kept: true}
	var ue *store.UnreadableError
	switch {
	case errors.As(err, &ue):
		resp.Unreadable = int32(ue.Count)
		s.log.Warn("history points this lpsd cannot read were left out", "version", version, "err", err)
	case err != nil:
		return nil, s.storeError("read the history of "+version, err)
	}
	for _, p := range ps {
		resp.Points = append(resp.Points, historyProto(p))
	}
	return resp, nil
}

func historyProto(p history.Point) *adminv1.HistoryPoint {
	return &adminv1.HistoryPoint{
		Time: timestamppb.New(p.Time), Counts: countsProto(p.Counts), Seated: p.Counts.Seated,
		State: string(p.State), Percent: int32(p.Percent), Reason: p.Reason,
		Step: int32(p.Step), Steps: int32(p.Steps), Revoked: p.Revoked, Expired: p.Expired,
		Health: p.Health, Baseline: p.Baseline, BaselineCounts: countsProto(p.BaselineCounts),
	}
}
