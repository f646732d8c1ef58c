package etcdstore_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/etcdstore/etcdtest"
)

// TestIntegrationAttackPointsForeignKeys: keys under a release's points
// prefix that are not points' (another writer of the prefix, damage)
// must neither be read as points nor crowd the real points out of a
// limited read. Before the fix "zzzz" (which sorts after every minute)
// took the one slot of Points(v, 1), which the Recorder reads the last
// point with, and a 13-digit "minute" was read as a point 17 000 years
// ahead, the release's newest.
func TestIntegrationAttackPointsForeignKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	endpoints := etcdtest.Start(t)
	const prefix = "/historyattack/"
	s := mustOpen(t, endpoints, prefix)
	ctx := t.Context()
	v := "202604.01.1"
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := s.PutPoints(ctx, []store.Point{{Version: v, Time: t0, Data: []byte(`{"n":1}`)}}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	base := prefix + "points/" + v + "/"
	for _, k := range []string{"zzzz", "9999999999999", "000029000000/extra", "+00029000001", "-1"} {
		if _, err := cli.Put(ctx, base+k, `{"hostile":true}`); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Points(ctx, v, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Time.Equal(t0) {
		t.Errorf("Points(%s, 1) = %v, want the one real point at %v", v, got, t0)
	}
	all, err := s.Points(ctx, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || !all[0].Time.Equal(t0) {
		t.Errorf("Points(%s, 0) = %v, want the one real point at %v", v, all, t0)
	}
}

// TestIntegrationAttackPutPointsManyReleases: one look's points for more
// releases than etcd's default --max-txn-ops (128), each of
// MaxPointSize, and two of one key, are all stored.
func TestIntegrationAttackPutPointsManyReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	endpoints := etcdtest.Start(t)
	s := mustOpen(t, endpoints, "/historymany/")
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	data := make([]byte, store.MaxPointSize)
	for i := range data {
		data[i] = 'x'
	}
	var ps []store.Point
	for i := range 300 {
		ps = append(ps, store.Point{Version: fmt.Sprintf("202604.01.%d", i), Time: t0, Data: data})
	}
	ps = append(ps, store.Point{Version: "202604.01.0", Time: t0.Add(time.Second), Data: []byte("last")})
	if err := s.PutPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		got, err := s.Points(ctx, fmt.Sprintf("202604.01.%d", i), 0)
		if err != nil || len(got) != 1 {
			t.Fatalf("release %d: %v, %v", i, got, err)
		}
		if i == 0 && string(got[0].Data) != "last" {
			t.Errorf("the minute's last point was not kept: %.20q", got[0].Data)
		}
	}
}
