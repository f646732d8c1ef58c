package admin

import (
	"context"
	"fmt"
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

// ReplicaClock says how far replica r's clock is off the answering
// replica's, by its heartbeat's age (which includes up to a beat of its
// own): "beat 2s ago", "ahead 1m0s", marked " *" when the assessment reads
// the times it stamps corrected (ReplicaClockNote says what that means);
// "-" without a heartbeat. lpsctl status and the dashboard print it.
func ReplicaClock(r *adminv1.Replica) string {
	if r.HeartbeatAgeMs == nil {
		return "-"
	}
	age := time.Duration(r.GetHeartbeatAgeMs()) * time.Millisecond
	s := fmt.Sprintf("beat %v ago", age.Round(time.Second))
	if age < 0 {
		s = fmt.Sprintf("ahead %v", (-age).Round(time.Second))
	}
	if r.GetClockCorrected() {
		s += " *"
	}
	return s
}

// ReplicaClockNote explains ReplicaClock's mark, in tally.Clocks' bounds.
var ReplicaClockNote = fmt.Sprintf("its clock is behind this replica's by more than a heartbeat's age allows: the times it stamps are read later, by up to %d minutes; fix its time sync",
	int(tally.MaxClockCorrection/time.Minute))
