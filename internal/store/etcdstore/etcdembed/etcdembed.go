// Package etcdembed runs an etcd cluster of embedded servers on loopback, in
// this process: the test helper etcdtest and the fleet simulator use it.
package etcdembed

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// readyTimeout bounds the wait for a cluster to elect a leader and serve.
// A cold start under -race on two shared cores takes a few seconds.
const readyTimeout = 60 * time.Second

// startAttempts bounds retries of a failed start, typically a port picked
// as free but taken before etcd binds it.
const startAttempts = 3

// Options configure Start.
type Options struct {
	// NoFsync skips fsync: faster, and data does not survive a crash.
	// Tests only; a production member fsyncs.
	NoFsync bool
	// ClientTLS, when set, serves clients over TLS (https URLs).
	ClientTLS *ClientTLS
}

// ClientTLS is the members' client-facing TLS.
type ClientTLS struct {
	// CertFile and KeyFile are the members' certificate (valid for
	// 127.0.0.1) and key.
	CertFile, KeyFile string
	// ClientCAFile, when set, requires client certificates signed by it.
	ClientCAFile string
}

// Member is one running etcd server.
type Member struct {
	// Name is the member name (m0, m1, …).
	Name string
	// Endpoint is the client URL, e.g. http://127.0.0.1:40123.
	Endpoint string

	etcd *embed.Etcd
	once sync.Once
}

// Stop stops the member; its data directory stays. It is idempotent and
// safe to call from any goroutine.
func (m *Member) Stop() { m.once.Do(m.etcd.Close) }

// IsLeader reports whether the member leads the cluster now.
func (m *Member) IsLeader() bool { return m.etcd.Server.Leader() == m.etcd.Server.MemberID() }

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

// Stop stops every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Stop()
	}
}

// Leader returns the member that leads now, or nil.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Members {
		if m.IsLeader() {
			return m
		}
	}
	return nil
}

// Start starts an n-member cluster on loopback ports with its data under
// dir, and waits until it has a leader and every member serves. Servers log
// nothing. The caller stops it.
func Start(dir string, n int, o Options) (*Cluster, error) {
	return startRetrying(dir, n, o, nil)
}

// Bootstrap is what a member's data directory must be made with for the
// member to start on it: the flags etcdutl snapshot restore takes (--name,
// --data-dir, --initial-advertise-peer-urls, --initial-cluster,
// --initial-cluster-token).
type Bootstrap struct {
	Name, DataDir, PeerURL, InitialCluster, InitialClusterToken string
}

// StartRestored starts an n-member cluster as Start does, each member on a
// data directory that restore makes (from a snapshot, as etcdutl snapshot
// restore does) before the member starts. The ports are only known then, and
// a retried start picks others, so restore is given them and may be called
// again for the same member, each time with a new, absent DataDir.
func StartRestored(dir string, n int, o Options, restore func(Bootstrap) error) (*Cluster, error) {
	return startRetrying(dir, n, o, restore)
}

func startRetrying(dir string, n int, o Options, restore func(Bootstrap) error) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("start embedded etcd: %d members, want at least one", n)
	}
	var err error
	for attempt := range startAttempts {
		var c *Cluster
		if c, err = start(filepath.Join(dir, fmt.Sprintf("attempt-%d", attempt)), n, o, restore); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("start embedded etcd: %w", err)
}

func start(dir string, n int, o Options, restore func(Bootstrap) error) (*Cluster, error) {
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
		if t := o.ClientTLS; t != nil {
			client.Scheme = "https"
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.ClientCAFile, ClientCertAuth: t.ClientCAFile != ""}
		}
		peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialClusterToken = "etcdembed-" + filepath.Base(filepath.Dir(dir)) + "-" + filepath.Base(dir)
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.UnsafeNoFsync = o.NoFsync
		initial = append(initial, cfg.Name+"="+peer.String())
		cfgs[i] = cfg
	}
	c := &Cluster{}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		if restore != nil {
			// A member restarting on existing data takes its cluster from
			// there, so the data must be made with this config's values.
			b := Bootstrap{Name: cfg.Name, DataDir: cfg.Dir, PeerURL: cfg.AdvertisePeerUrls[0].String(), InitialCluster: cfg.InitialCluster, InitialClusterToken: cfg.InitialClusterToken}
			if err := restore(b); err != nil {
				c.Stop()
				return nil, fmt.Errorf("restore member %s: %w", cfg.Name, err)
			}
		}
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("start member %s: %w", cfg.Name, err)
		}
		c.Members = append(c.Members, &Member{Name: cfg.Name, Endpoint: cfg.AdvertiseClientUrls[0].String(), etcd: e})
	}
	deadline := time.After(readyTimeout)
	for _, m := range c.Members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			c.Stop()
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		case <-deadline:
			c.Stop()
			return nil, fmt.Errorf("cluster not ready within %v", readyTimeout)
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
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
