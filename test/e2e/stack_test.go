package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"nodehotfix/test/harness"
)

const (
	vmID         = "6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
	subscription = "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a"
)

// stack is one service side: a metadata emulator, lpsd, an artifact server
// and a release key pair.
type stack struct {
	t       *testing.T
	dir     string
	imds    *harness.IMDS
	lpsd    *harness.LPSD
	art     *harness.ArtifactServer
	priv    string
	pubKeys []byte
}

type stackOpts struct {
	store string
	vmID  string
	// lpsdFlags are extra lpsd flags.
	lpsdFlags []string
}

func newStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	ctx := t.Context()
	s := &stack{t: t, dir: t.TempDir()}
	if o.vmID == "" {
		o.vmID = vmID
	}
	var err error
	if s.imds, err = harness.StartIMDS(ctx, env.bins, s.dir, o.vmID, subscription); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.imds.Stop(5 * time.Second) })
	if s.lpsd, err = harness.StartLPSD(ctx, env.bins, s.dir, harness.LPSDOptions{IMDSRoots: s.imds.RootsFile, Store: o.store, Region: "eastus", Extra: o.lpsdFlags}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.lpsd.Stop(10 * time.Second) })
	if s.art, err = harness.StartArtifactServer(env.artifact, s.lpsd.TLS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.art.Close)
	s.generateKeys(ctx)
	return s
}

// publish signs version with key (the stack's when empty), publishes it
// and rolls it out to percent.
// generateKeys makes the release key pair the stack signs with and nodes
// trust.
func (s *stack) generateKeys(ctx context.Context) {
	s.t.Helper()
	priv, pub, err := s.lpsd.GenerateKeys(ctx, s.dir)
	if err != nil {
		s.t.Fatal(err)
	}
	s.priv = priv
	if s.pubKeys, err = os.ReadFile(pub); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) publish(version, key string, percent int) {
	s.t.Helper()
	s.publishDraft(version, key)
	s.ctl("rollout", "set", version, "--percent", strconv.Itoa(percent), "--reason", "e2e")
	s.waitSynced(s.lpsd)
}

// publishDraft signs and publishes version as a draft.
func (s *stack) publishDraft(version, key string) {
	s.t.Helper()
	if key == "" {
		key = s.priv
	}
	ctx := s.t.Context()
	bin := filepath.Join(env.artifact, "aks-node-controller-"+version)
	envelope, err := s.lpsd.SignRelease(ctx, s.dir, harness.Release{Version: version, Binary: bin, URL: s.art.URL + "/" + filepath.Base(bin), KeyFile: key})
	if err != nil {
		s.t.Fatal(err)
	}
	s.ctl("release", "publish", "--envelope", envelope, "--reason", "e2e")
}

func (s *stack) ctl(args ...string) string {
	s.t.Helper()
	out, err := s.lpsd.Ctl(s.t.Context(), args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// waitSynced waits until l serves from a snapshot at least as new as every
// release record in the store (admin writes reach snapshots by watch).
func (s *stack) waitSynced(l *harness.LPSD) time.Duration {
	s.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(s.t.Context(), 10*time.Second)
	defer cancel()
	for {
		st, err := lpsdStatus(ctx, l)
		if err == nil && st.synced() {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("lpsd snapshot never caught up with the store: %v %+v", err, st)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

type statusJSON struct {
	SnapshotRevision int64 `json:"snapshot_revision"`
	Releases         []struct {
		Version  string `json:"version"`
		Revision int64  `json:"revision"`
		State    string `json:"state"`
		Revoked  bool   `json:"revoked"`
		Counts   counts `json:"counts"`
	} `json:"releases"`
	Control []struct {
		Base   string `json:"base"`
		Counts counts `json:"counts"`
	} `json:"control"`
	Requests []struct {
		Outcome string `json:"outcome"`
		Count   int    `json:"count"`
	} `json:"requests"`
}

// counts are a cohort's outcome reports, as lpsctl status --json prints them.
type counts struct {
	Reported, OK, Failed, Fallback int
}

// releaseCounts returns the reports counted for version.
func (s *stack) releaseCounts(version string) counts {
	s.t.Helper()
	st, err := lpsdStatus(s.t.Context(), s.lpsd)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, r := range st.Releases {
		if r.Version == version {
			return r.Counts
		}
	}
	s.t.Fatalf("no release %s in status", version)
	return counts{}
}

func (st statusJSON) synced() bool {
	for _, r := range st.Releases {
		if r.Revision > st.SnapshotRevision {
			return false
		}
	}
	return true
}

func lpsdStatus(ctx context.Context, l *harness.LPSD) (statusJSON, error) {
	var st statusJSON
	out, err := l.Ctl(ctx, "status", "--json")
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(out), &st)
}

// requests returns how many node requests l has answered.
func (s *stack) requests(l *harness.LPSD) int {
	s.t.Helper()
	st, err := lpsdStatus(s.t.Context(), l)
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, r := range st.Requests {
		n += r.Count
	}
	return n
}

type nodeOpts struct {
	flagOff bool
	noKeys  bool
}

func (s *stack) node(o nodeOpts) *harness.Node {
	s.t.Helper()
	no := harness.NodeOptions{BakedAgent: env.baked, ClusterCA: s.lpsd.TLS.CAPEM}
	if !o.flagOff {
		no.Features = map[string]string{"ENABLE_PROVISIONING_HOTFIX": "true"}
	}
	if !o.noKeys {
		no.ReleaseKeys = s.pubKeys
	}
	n, err := harness.NewNode(filepath.Join(s.t.TempDir(), "node"), no)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// launch runs the launcher on n against the stack (or the given overrides).
func (s *stack) launch(n *harness.Node, imdsURL, lpsAddr string) harness.LaunchResult {
	s.t.Helper()
	if imdsURL == "" {
		imdsURL = s.imds.URL
	}
	if lpsAddr == "" {
		lpsAddr = s.lpsd.GRPCAddr
	}
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	res, err := n.RunLauncher(ctx, env.bins.Launcher, imdsURL, lpsAddr, "SSL_CERT_FILE="+s.lpsd.TLS.CAFile)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}
