// Package rig stands up, on loopback, what the node's hotfix commands talk
// to in the node-side benchmarks.
//
// It provides a metadata-service stand-in, live-patching services (lpsd as
// it ships, started as a process and published to through lpsctl), node
// roots, release signing, and a timed runner for the real binaries.
package rig

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"nodehotfix/bench/internal/mint"
	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/release"
	"nodehotfix/test/harness"
)

// Versions of the baked agent and of the hotfix the rig publishes.
const (
	BakedVersion  = "202604.01.0"
	HotfixVersion = "202604.01.1"
)

// Rig is the shared material of one benchmark run. Everything it starts
// stops when the ctx given to New is done.
type Rig struct {
	// Dir is the work directory.
	Dir string
	// TLS is the cluster CA and the service certificate (for the
	// live-patching servers and the artifact server alike).
	TLS harness.TLSFiles
	// Agent is the baked aks-node-controller binary.
	Agent string
	// IMDS is the metadata-service stand-in.
	IMDS *IMDS
	// ReleaseKeys is the trusted release key file content nodes carry.
	ReleaseKeys []byte

	ctx    context.Context
	cert   tls.Certificate
	minter *mint.Minter
	priv   ed25519.PrivateKey
	// bins are lpsd and lpsctl, built once; roots is the attested
	// documents' root bundle lpsd trusts.
	bins  harness.Binaries
	roots string
}

// New builds the baked agent into dir, mints TLS and release keys, and
// starts the metadata stand-in with docs pre-signed documents (one vmId
// each; more are signed on demand and counted).
func New(ctx context.Context, dir string, docs int) (*Rig, error) {
	r := &Rig{Dir: dir, ctx: ctx, Agent: filepath.Join(dir, "aks-node-controller")}
	if err := harness.BuildAgent(ctx, r.Agent, BakedVersion); err != nil {
		return nil, err
	}
	var err error
	if r.TLS, err = harness.MintTLS(dir); err != nil {
		return nil, err
	}
	if r.cert, err = tls.LoadX509KeyPair(r.TLS.CertFile, r.TLS.KeyFile); err != nil {
		return nil, err
	}
	pub, priv, err := release.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	r.priv, r.ReleaseKeys = priv, release.MarshalPublicKey(pub, "bench")
	if r.minter, err = mint.New(mint.RSA, 6*time.Hour); err != nil {
		return nil, err
	}
	r.roots = filepath.Join(dir, "imds-roots.pem")
	if err := os.WriteFile(r.roots, r.minter.RootPEM(), 0o644); err != nil {
		return nil, err
	}
	if r.bins, err = harness.Build(ctx, filepath.Join(dir, "bin")); err != nil {
		return nil, err
	}
	if r.IMDS, err = startIMDS(ctx, r.minter, docs); err != nil {
		return nil, err
	}
	return r, nil
}

// Build compiles pkg (a bench floor, say) into the work directory and
// returns the binary's path.
func (r *Rig) Build(pkg string) (string, error) {
	out := filepath.Join(r.Dir, filepath.Base(pkg))
	return out, harness.GoBuild(r.ctx, pkg, out, "")
}

// SignRelease signs version's artifact for this platform (at url, with
// content's digest and size) with the rig's release key.
func (r *Rig) SignRelease(version, url string, sha256hex string, size int64) ([]byte, error) {
	v := release.Release{
		Base:    version[:9],
		Version: version,
		Artifacts: map[string]release.Artifact{
			release.Platform(runtime.GOOS, runtime.GOARCH): {URL: url, SHA256: sha256hex, Size: size},
		},
		NotAfter: time.Now().Add(24 * time.Hour),
	}
	return release.Sign(v, r.priv)
}

// LPSDFlags are the flags of an lpsd the node-side and load benchmarks
// measure: no AIA fetches, and no per-peer caps, since the benchmark's one
// address stands for many nodes (bench/abuse measures the caps).
func LPSDFlags() []string {
	return []string{"--imds-no-aia", "--max-handshakes-per-peer=-1", "--max-connections-per-peer=-1"}
}

// StartLPS starts lpsd as it ships (its own process, an in-memory store,
// attestation on with the rig's roots), publishes each signed envelope
// through lpsctl and rolls it out to 100%, waits until lpsd serves them,
// and returns its node-facing address. It stops with the rig's ctx.
func (r *Rig) StartLPS(envelopes ...[]byte) (string, error) {
	return r.StartLPSAt("", envelopes...)
}

// StartLPSAt is StartLPS with lpsd's node-facing listener on listen
// ("host:port"; empty: a loopback port).
func (r *Rig) StartLPSAt(listen string, envelopes ...[]byte) (string, error) {
	dir, err := os.MkdirTemp(r.Dir, "lpsd-")
	if err != nil {
		return "", err
	}
	l, err := harness.StartLPSD(r.ctx, r.bins, dir, harness.LPSDOptions{Store: "mem:", IMDSRoots: r.roots, TLS: r.TLS, Listen: listen, Extra: LPSDFlags()})
	if err != nil {
		return "", err
	}
	stop := context.AfterFunc(r.ctx, func() { l.Stop(5 * time.Second) })
	addr, err := r.publish(l, dir, envelopes)
	if err != nil && stop() {
		l.Stop(5 * time.Second) // not left running until the rig's end
	}
	return addr, err
}

// publish publishes envelopes to l at 100% and waits until l serves them.
func (r *Rig) publish(l *harness.LPSD, dir string, envelopes [][]byte) (string, error) {
	for i, env := range envelopes {
		rel, err := release.Inspect(env)
		if err != nil {
			return "", err
		}
		f := filepath.Join(dir, fmt.Sprintf("release-%d.json", i))
		if err := os.WriteFile(f, env, 0o644); err != nil {
			return "", err
		}
		for _, args := range [][]string{{"release", "publish", "--envelope", f, "--reason", "bench"}, {"rollout", "set", rel.Version, "--percent", "100", "--reason", "bench"}} {
			if _, err := l.Ctl(r.ctx, args...); err != nil {
				return "", err
			}
		}
	}
	return l.GRPCAddr, waitServing(r.ctx, l)
}

// waitServing waits until l serves a snapshot holding every release record
// it has (admin writes reach the snapshot by watch).
func waitServing(ctx context.Context, l *harness.LPSD) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		out, err := l.Ctl(ctx, "status", "-o", "json")
		if err == nil {
			var st struct {
				SnapshotRevision int64      `json:"snapshot_revision"`
				SnapshotTime     *time.Time `json:"snapshot_time"`
				Releases         []struct {
					Revision int64 `json:"revision"`
				} `json:"releases"`
			}
			if json.Unmarshal([]byte(out), &st) == nil && st.SnapshotTime != nil {
				synced := true
				for _, rel := range st.Releases {
					synced = synced && rel.Revision <= st.SnapshotRevision
				}
				if synced {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lpsd at %s never served its releases: %v", l.GRPCAddr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartHungLPS starts a TLS gRPC server with the service certificate whose
// GetComponentConfig never answers, and returns its address.
func (r *Rig) StartHungLPS() (string, error) {
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{r.cert}, NextProtos: []string{"h2"}})))
	lpsv1.RegisterLivePatchingServiceServer(gs, hung{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go gs.Serve(ln)
	context.AfterFunc(r.ctx, gs.Stop)
	return ln.Addr().String(), nil
}

type hung struct {
	lpsv1.UnimplementedLivePatchingServiceServer
}

func (hung) GetComponentConfig(ctx context.Context, _ *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// StartBlackhole accepts TCP connections and never sends a byte (a TLS
// handshake that never completes), and returns its address.
func (r *Rig) StartBlackhole() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	var mu sync.Mutex
	var conns []net.Conn
	context.AfterFunc(r.ctx, func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String(), nil
}

// NewNode lays out a node root under the work directory, trusting the
// rig's cluster CA and release keys.
func (r *Rig) NewNode(name string, features map[string]string) (*harness.Node, error) {
	return harness.NewNode(filepath.Join(r.Dir, name), harness.NodeOptions{
		BakedAgent: r.Agent, ClusterCA: r.TLS.CAPEM, ReleaseKeys: r.ReleaseKeys, Features: features,
	})
}

// IMDS is the metadata-service stand-in: the emulator's request rules and
// response shape, but serving documents signed before the measurement (the
// real service caches its documents too), one vmId per request.
type IMDS struct {
	URL      string
	pool     []string
	next     atomic.Int64
	minter   *mint.Minter
	onDemand atomic.Int64
}

func startIMDS(ctx context.Context, m *mint.Minter, docs int) (*IMDS, error) {
	pool, err := m.Tokens(mint.VMIDs("imds", docs))
	if err != nil {
		return nil, err
	}
	s := &IMDS{pool: pool, minter: m}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
	go srv.Serve(ln)
	context.AfterFunc(ctx, func() { srv.Close() })
	return s, nil
}

func (s *IMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metadata/attested/document" || r.Header.Get("Metadata") != "true" || r.URL.Query().Get("api-version") == "" {
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	}
	i := s.next.Add(1) - 1
	var tok string
	if i < int64(len(s.pool)) {
		tok = s.pool[i]
	} else {
		s.onDemand.Add(1)
		var err error
		if tok, err = s.minter.Token(mint.VMID("imds-extra", int(i))); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	json.NewEncoder(w).Encode(map[string]string{"encoding": "pkcs7", "signature": tok})
}

// OnDemand is how many documents were signed while serving, because the
// pre-signed pool ran out.
func (s *IMDS) OnDemand() int64 { return s.onDemand.Load() }

// Result is one timed process run.
type Result struct {
	Wall   time.Duration
	Exit   int
	Output []byte
}

// Run executes argv with extra environment and returns its wall time from
// start to exit. A non-zero exit is a Result, not an error.
func Run(ctx context.Context, argv []string, env ...string) (Result, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	res := Result{Wall: time.Since(start), Output: out.Bytes()}
	if cmd.ProcessState != nil {
		res.Exit = cmd.ProcessState.ExitCode()
	}
	if _, ok := err.(*exec.ExitError); ok {
		err = nil
	}
	if err != nil {
		return res, fmt.Errorf("run %s: %w", argv[0], err)
	}
	return res, nil
}

// PeakRSS runs argv under GNU time and returns the peak resident set size
// of the process (or of a child it waited for, if larger), with the run.
// The rusage of a child Go starts directly is useless here: Go spawns with
// CLONE_VM, so the kernel charges the parent's resident set to the child's
// maxrss at exec; time(1) is a small parent.
func PeakRSS(ctx context.Context, dir string, argv []string, env ...string) (int64, Result, error) {
	f, err := os.CreateTemp(dir, "maxrss-")
	if err != nil {
		return 0, Result{}, err
	}
	f.Close()
	defer os.Remove(f.Name())
	res, err := Run(ctx, append([]string{"/usr/bin/time", "-f", "%M", "-o", f.Name()}, argv...), env...)
	if err != nil {
		return 0, res, err
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, res, err
	}
	var kb int64
	if _, err := fmt.Sscan(string(bytes.TrimSpace(data)), &kb); err != nil {
		return 0, res, fmt.Errorf("parse /usr/bin/time output %q: %w", data, err)
	}
	return kb << 10, res, nil
}

// FileSHA256 returns the hex sha256 and size of a file.
func FileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := f.WriteTo(h)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
