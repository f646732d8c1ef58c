package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"nodehotfix/internal/store"
)

// replicaTTL is how long a replica's session (its heartbeat and its
// candidacy) outlives the replica: a dead leader is replaced within it.
const replicaTTL = 15 // seconds

// Replica is one lpsd's membership of the replicas that share the store:
// an etcd session whose lease carries the replica's heartbeat
// (<prefix>replicas/<id>: its wall clock, RFC 3339) and its candidacy in
// the autopilot's election (<prefix>leader/). When the session's lease is
// lost (a partition longer than its TTL), Done is closed and the replica
// leads no more.
type Replica struct {
	s    *Store
	id   string
	sess *concurrency.Session
	el   *concurrency.Election
}

var _ store.Replica = (*Replica)(nil)

// Join starts this process's membership as id (unique among the replicas:
// lpsd uses its host name and pid).
func (s *Store) Join(ctx context.Context, id string) (store.Replica, error) {
	if id == "" || strings.Contains(id, "/") {
		return nil, fmt.Errorf("join replicas: id %q is empty or contains \"/\"", id)
	}
	if s.isClosed() {
		return nil, fmt.Errorf("join replicas: %w", store.ErrClosed)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(replicaTTL), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("join replicas: %w", s.mapErr(err))
	}
	return &Replica{s: s, id: id, sess: sess, el: concurrency.NewElection(sess, s.prefix+"leader/")}, nil
}

func (r *Replica) heartbeatKey(id string) string { return r.s.prefix + "replicas/" + id }

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

// Peers returns the other live replicas' last heartbeats. One that cannot
// be read is left out.
func (r *Replica) Peers(ctx context.Context) ([]store.Heartbeat, error) {
	ctx, cancel := context.WithTimeout(ctx, r.s.reqTimeout)
	defer cancel()
	prefix := r.heartbeatKey("")
	resp, err := r.s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read heartbeats: %w", r.s.mapErr(err))
	}
	var out []store.Heartbeat
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), prefix)
		if id == r.id {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, string(kv.Value))
		if err != nil {
			continue
		}
		out = append(out, store.Heartbeat{ID: id, Time: t})
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
