package admin

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/tally"
)

// replicas returns the live replicas serving from the store, by ID, this
// one (Config.ReplicaID) included whether or not it has joined yet; on a
// store no other replica shares, this one alone.
func (s *Server) replicas(ctx context.Context) ([]store.Heartbeat, error) {
	self := store.Heartbeat{ID: s.replicaID, Place: rollout.Place{Region: s.region, DeployEnv: s.env}}
	rl, ok := s.store.(store.ReplicaLister)
	if !ok {
		return []store.Heartbeat{self}, nil
	}
	hs, err := rl.Replicas(ctx)
	if err != nil {
		return nil, s.storeError("list replicas", err)
	}
	if !slices.ContainsFunc(hs, func(h store.Heartbeat) bool { return h.ID == self.ID }) {
		hs = append([]store.Heartbeat{self}, hs...)
	}
	return hs, nil
}

// places returns where hs serve nodes from, each once, in order.
func places(hs []store.Heartbeat) []rollout.Place {
	var out []rollout.Place
	for _, h := range hs {
		if !slices.Contains(out, h.Place) {
			out = append(out, h.Place)
		}
	}
	return out
}

// replicasProto returns the replicas hs, read at now by replica self,
// each with its heartbeat's age and whether clocks, the assessment's,
// read the times it stamped corrected.
func replicasProto(hs []store.Heartbeat, self string, now time.Time, clocks tally.Clocks) []*adminv1.Replica {
	out := make([]*adminv1.Replica, 0, len(hs))
	for _, h := range hs {
		r := &adminv1.Replica{Id: h.ID, Region: h.Place.Region, DeployEnv: h.Place.DeployEnv, Self: h.ID == self}
		if !h.Time.IsZero() {
			r.LastHeartbeat = timestamppb.New(h.Time)
			r.HeartbeatAgeMs = proto.Int64(now.Sub(h.Time).Milliseconds())
			_, r.ClockCorrected = clocks[h.ID]
		}
		out = append(out, r)
	}
	return out
}
