package fleet

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdReadyTimeout bounds the wait for the cluster to elect a leader.
const etcdReadyTimeout = 60 * time.Second

// member is one embedded etcd server.
type member struct {
	name     string
	endpoint string
	etcd     *embed.Etcd
	once     sync.Once
}

// stop closes the member; its data directory stays.
func (m *member) stop() { m.once.Do(m.etcd.Close) }

// isLeader reports whether the member currently leads the cluster.
func (m *member) isLeader() bool { return m.etcd.Server.Leader() == m.etcd.Server.MemberID() }

// cluster is an embedded etcd cluster on loopback: what lpsd replicas share
// in production, here in the simulator's process.
type cluster struct {
	members []*member
}

func (c *cluster) endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.endpoint
	}
	return out
}

func (c *cluster) stop() {
	for _, m := range c.members {
		m.stop()
	}
}

// leader returns the member that leads now, or nil.
func (c *cluster) leader() *member {
	for _, m := range c.members {
		if m.isLeader() {
			return m
		}
	}
	return nil
}

// startAttempts bounds retries of a failed start, typically a port picked
// as free but taken before etcd binds it.
const startAttempts = 3

// startCluster starts n members with data under dir and waits until every
// member serves. Unlike the test helper etcdtest, it fsyncs (the default),
// as a production member does.
func startCluster(dir string, n int) (*cluster, error) {
	var err error
	for attempt := range startAttempts {
		var c *cluster
		if c, err = startClusterOnce(filepath.Join(dir, fmt.Sprintf("etcd-%d", attempt)), n); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func startClusterOnce(dir string, n int) (*cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
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
		cfg.InitialClusterToken = "fleetsim-" + filepath.Base(dir)
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		initial = append(initial, cfg.Name+"="+peer.String())
		cfgs[i] = cfg
	}
	c := &cluster{}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, err)
		}
		c.members = append(c.members, &member{name: cfg.Name, endpoint: cfg.AdvertiseClientUrls[0].String(), etcd: e})
	}
	deadline := time.After(etcdReadyTimeout)
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			c.stop()
			return nil, fmt.Errorf("etcd member %s: %w", m.name, err)
		case <-deadline:
			c.stop()
			return nil, fmt.Errorf("etcd cluster not ready within %v", etcdReadyTimeout)
		}
	}
	return c, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (all probed before any is released, so they differ).
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
