// Package etcdtest runs embedded etcd servers on loopback for tests.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// readyTimeout bounds the wait for a cluster to elect a leader and serve.
// A cold start under -race on two shared cores takes a few seconds.
const readyTimeout = 60 * time.Second

// startAttempts bounds retries of a failed start, typically a port picked
// as free but taken before etcd binds it.
const startAttempts = 3

// Member is one running etcd server.
type Member struct {
	// Name is the member name (m0, m1, …).
	Name string
	// Endpoint is the client URL, e.g. http://127.0.0.1:40123.
	Endpoint string

	etcd *embed.Etcd
	once sync.Once
}

// Stop stops the member; the data directory stays until the test ends.
// Stop is idempotent and safe to call from any goroutine.
func (m *Member) Stop() {
	m.once.Do(m.etcd.Close)
}

// Cluster is a running embedded etcd cluster.
type Cluster struct {
	Members []*Member
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Endpoint
	}
	return out
}

// Start starts a single-member etcd on loopback ports with its data in a
// t.TempDir, waits until it serves, and returns its client endpoints. It is
// stopped when the test ends.
func Start(t testing.TB) []string {
	t.Helper()
	return StartCluster(t, 1).Endpoints()
}

// StartCluster starts an n-member etcd cluster on loopback ports, waits
// until it has a leader and every member serves, and stops it when the
// test ends. Servers log nothing. Data is not fsynced: tests only.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest.StartCluster(%d): want at least one member", n)
	}
	var lastErr error
	for attempt := range startAttempts {
		c, err := startCluster(t, n, attempt)
		if err == nil {
			return c
		}
		lastErr = err
	}
	t.Fatalf("start embedded etcd: %v", lastErr)
	return nil
}

func startCluster(t testing.TB, n, attempt int) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	token := fmt.Sprintf("etcdtest-%s-%d", filepath.Base(dir), attempt)
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])}
		peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialClusterToken = token
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.UnsafeNoFsync = true
		initial = append(initial, cfg.Name+"="+peer.String())
		cfgs[i] = cfg
	}
	c := &Cluster{}
	stopAll := func() {
		for _, m := range c.Members {
			m.Stop()
		}
	}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("start member %s: %w", cfg.Name, err)
		}
		c.Members = append(c.Members, &Member{Name: cfg.Name, Endpoint: cfg.AdvertiseClientUrls[0].String(), etcd: e})
	}
	t.Cleanup(stopAll)

	deadline := time.After(readyTimeout)
	for _, m := range c.Members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			stopAll()
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		case <-deadline:
			stopAll()
			return nil, fmt.Errorf("cluster not ready within %v", readyTimeout)
		}
	}
	return c, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
