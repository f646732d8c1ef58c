package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
)

// TestIntegrationReplicasElectOneLeader: of two replicas joined to one
// store, one leads; the other waits until it resigns or its membership
// ends; each sees the other's heartbeat, and a closed replica's is gone.
func TestIntegrationReplicasElectOneLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	a, b := mustOpen(t, endpoints, "/elect/"), mustOpen(t, endpoints, "/elect/")
	east, west := rollout.Place{Region: "eastus", DeployEnv: "prod"}, rollout.Place{Region: "westeurope"}
	ra, err := a.Join(t.Context(), "a", east)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Join(t.Context(), "b", west)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	if _, err := a.Join(t.Context(), "a/b", east); err == nil {
		t.Error("Join with an id holding \"/\" = nil error")
	}
	// Joined, not yet beaten: listed with its labels, not a peer yet.
	if hs, err := a.Replicas(t.Context()); err != nil || !cmp.Equal(hs, []store.Heartbeat{{ID: "a", Place: east}, {ID: "b", Place: west}}) {
		t.Errorf("Replicas before any heartbeat = %+v, %v", hs, err)
	}
	if peers, err := ra.Peers(t.Context()); err != nil || len(peers) != 0 {
		t.Errorf("a's Peers before b's first heartbeat = %+v, %v; want none", peers, err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	if err := ra.Beat(t.Context(), at); err != nil {
		t.Fatal(err)
	}
	if err := rb.Beat(t.Context(), at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if peers, err := ra.Peers(t.Context()); err != nil || !cmp.Equal(peers, []store.Heartbeat{{ID: "b", Time: at.Add(time.Second), Place: west}}) {
		t.Errorf("a's Peers = %+v, %v; want b's heartbeat and labels", peers, err)
	}
	if hs, err := b.Replicas(t.Context()); err != nil || len(hs) != 2 || !hs[0].Time.Equal(at) || hs[0].Place != east {
		t.Errorf("Replicas = %+v, %v; want both, with heartbeats and labels", hs, err)
	}

	if err := ra.Campaign(t.Context()); err != nil {
		t.Fatalf("a's Campaign = %v", err)
	}
	won := make(chan error, 1)
	go func() { won <- rb.Campaign(t.Context()) }()
	select {
	case err := <-won:
		t.Fatalf("b's Campaign returned (%v) while a leads", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := ra.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatalf("b's Campaign after a resigned = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b did not lead after a resigned")
	}

	// a campaigns again and waits; closing b (its lease revoked) hands
	// over at once, and b's heartbeat is gone.
	again := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { again <- ra.Campaign(ctx) }()
	if err := rb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-again:
		if err != nil {
			t.Fatalf("a's Campaign after b closed = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a did not lead after b closed")
	}
	if peers, err := ra.Peers(t.Context()); err != nil || len(peers) != 0 {
		t.Errorf("a's Peers after b closed = %+v, %v; want none", peers, err)
	}
	if hs, err := a.Replicas(t.Context()); err != nil || len(hs) != 1 || hs[0].ID != "a" {
		t.Errorf("Replicas after b closed = %+v, %v; want a alone (b's labels go with its lease)", hs, err)
	}
	if err := ra.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ra.Done():
	case <-time.After(5 * time.Second):
		t.Error("Done not closed after Close")
	}
}
