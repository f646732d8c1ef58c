package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
)

// replicaTTL is how long a replica's session (its heartbeat and its
// candidacy) outlives the replica: a dead leader is replaced within it.
const replicaTTL = 15 // seconds

// Replica is one lpsd's membership of the replicas that share the store:
// an etcd session whose lease carries the replica's heartbeat
// (<prefix>replicas/<id>: its wall clock, RFC 3339), its labels
// (<prefix>replica-labels/<id>: JSON, written as it joins) and its
// candidacy in the autopilot's election (<prefix>leader/). When the
// session's lease is lost (a partition longer than its TTL), Done is
// closed and the replica leads no more. The labels have a key of their
// own so that a heartbeat stays what replicas before them read.
type Replica struct {
	s    *Store
	id   string
	sess *concurrency.Session
	el   *concurrency.Election
}

var _ store.Replica = (*Replica)(nil)

// labelsRecord is a replica's labels as stored.
type labelsRecord struct {
	V         int    `json:"v"`
	Region    string `json:"region,omitempty"`
	DeployEnv string `json:"deploy_env,omitempty"`
}

// labelsVersion is the encoding version of labelsRecord.
const labelsVersion = 1

// Join starts this process's membership as id (unique among the replicas:
// lpsd uses its host name and pid), serving from place.
func (s *Store) Join(ctx context.Context, id string, place rollout.Place) (store.Replica, error) {
	if id == "" || strings.Contains(id, "/") {
		return nil, fmt.Errorf("join replicas: id %q is empty or contains \"/\"", id)
	}
	if s.isClosed() {
		return nil, fmt.Errorf("join replicas: %w", store.ErrClosed)
	}
	labels, err := json.Marshal(labelsRecord{V: labelsVersion, Region: place.Region, DeployEnv: place.DeployEnv})
	if err != nil {
		return nil, fmt.Errorf("join replicas: %w", err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(replicaTTL), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("join replicas: %w", s.mapErr(err))
	}
	pctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	if _, err := s.cli.Put(pctx, s.labelsKey(id), string(labels), clientv3.WithLease(sess.Lease())); err != nil {
		sess.Close()
		return nil, fmt.Errorf("join replicas: write labels: %w", s.mapErr(err))
	}
	return &Replica{s: s, id: id, sess: sess, el: concurrency.NewElection(sess, s.prefix+"leader/")}, nil
}

func (s *Store) heartbeatKey(id string) string { return s.prefix + "replicas/" + id }
func (s *Store) labelsKey(id string) string    { return s.prefix + "replica-labels/" + id }

func (r *Replica) heartbeatKey(id string) string { return r.s.heartbeatKey(id) }

// maxReplicas bounds a read of the replicas: lpsd runs a handful.
const maxReplicas = 1000

// Replicas returns every live replica's last heartbeat and labels (this
// process's too, if it joined), by ID; one that has joined but not yet
// beaten has a zero Time. One whose records cannot be read is left out.
func (s *Store) Replicas(ctx context.Context) ([]store.Heartbeat, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("list replicas: %w", store.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.reqTimeout)
	defer cancel()
	beats, labels := s.heartbeatKey(""), s.labelsKey("")
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(beats, clientv3.WithPrefix(), clientv3.WithLimit(maxReplicas)),
		clientv3.OpGet(labels, clientv3.WithPrefix(), clientv3.WithLimit(maxReplicas)),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", s.mapErr(err))
	}
	byID := map[string]*store.Heartbeat{}
	var ids []string
	at := func(id string) *store.Heartbeat {
		if h, ok := byID[id]; ok {
			return h
		}
		byID[id] = &store.Heartbeat{ID: id}
		ids = append(ids, id)
		return byID[id]
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if t, err := time.Parse(time.RFC3339Nano, string(kv.Value)); err == nil {
			at(strings.TrimPrefix(string(kv.Key), beats)).Time = t
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var rec labelsRecord
		if json.Unmarshal(kv.Value, &rec) == nil && rec.V == labelsVersion {
			at(strings.TrimPrefix(string(kv.Key), labels)).Place = rollout.Place{Region: rec.Region, DeployEnv: rec.DeployEnv}
		}
	}
	slices.Sort(ids)
	out := make([]store.Heartbeat, 0, len(ids))
	for _, id := range ids {
		out = append(out, *byID[id])
	}
	return out, nil
}

// Beat writes the heartbeat: now, as this replica's clock has it.
func (r *Replica) Beat(ctx context.Context, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.reqTimeout)
	defer cancel()
	_, err := r.s.cli.Put(ctx, r.heartbeatKey(r.id), now.UTC().Format(time.RFC3339Nano), clientv3.WithLease(r.sess.Lease()))
	if err != nil {
		return fmt.Errorf("heartbeat: %w", r.s.mapErr(err))
	}
	return nil
}

// Peers returns the other live replicas' last heartbeats, with their
// labels. One whose heartbeat cannot be read is left out.
func (r *Replica) Peers(ctx context.Context) ([]store.Heartbeat, error) {
	all, err := r.s.Replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("read heartbeats: %w", err)
	}
	var out []store.Heartbeat
	for _, h := range all {
		if h.ID != r.id && !h.Time.IsZero() {
			out = append(out, h)
		}
	}
	return out, nil
}

// Campaign blocks until this replica leads, ctx ends, or the session is
// lost.
func (r *Replica) Campaign(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.sess.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := r.el.Campaign(ctx, r.id); err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("campaign: %w", r.s.mapErr(err))
	}
	return nil
}

// Resign gives the leadership up, if held.
func (r *Replica) Resign(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.reqTimeout)
	defer cancel()
	if err := r.el.Resign(ctx); err != nil {
		return fmt.Errorf("resign: %w", r.s.mapErr(err))
	}
	return nil
}

// Done is closed when the session's lease is lost: the replica no longer
// leads, and its heartbeat is gone.
func (r *Replica) Done() <-chan struct{} { return r.sess.Done() }

// Close ends the membership: the heartbeat and any leadership go at once.
func (r *Replica) Close() error { return r.sess.Close() }
