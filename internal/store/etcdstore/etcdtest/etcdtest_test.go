package etcdtest_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"nodehotfix/internal/store/etcdstore/etcdtest"
)

func TestIntegrationStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Parallel()
	endpoints := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put = %v", err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v; want v", resp, err)
	}
}
