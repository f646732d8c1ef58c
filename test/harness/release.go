package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"
)

// ArtifactServer serves files over HTTPS on loopback.
type ArtifactServer struct {
	URL  string
	srv  *http.Server
	hits atomic.Int64
	// Tamper, when set, replaces every body served.
	Tamper atomic.Pointer[[]byte]
}

// StartArtifactServer serves dir over HTTPS with the certificate in f on
// a loopback port.
func StartArtifactServer(dir string, f TLSFiles) (*ArtifactServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return ServeArtifacts(ln, dir, f)
}

// ServeArtifacts serves dir over HTTPS on ln with the certificate in f.
func ServeArtifacts(tcp net.Listener, dir string, f TLSFiles) (*ArtifactServer, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		tcp.Close()
		return nil, err
	}
	ln := tls.NewListener(tcp, &tls.Config{Certificates: []tls.Certificate{cert}})
	a := &ArtifactServer{URL: "https://" + ln.Addr().String()}
	files := http.FileServer(http.Dir(dir))
	a.srv = &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.hits.Add(1)
			if b := a.Tamper.Load(); b != nil {
				w.Write(*b)
				return
			}
			files.ServeHTTP(w, r)
		}),
	}
	go a.srv.Serve(ln)
	return a, nil
}

// Hits returns the number of requests served.
func (a *ArtifactServer) Hits() int64 { return a.hits.Load() }

// Close stops the server.
func (a *ArtifactServer) Close() { a.srv.Close() }

// Release describes a hotfix release to sign and publish.
type Release struct {
	Version  string // YYYYMM.DD.PATCH
	Binary   string // path of the hotfix agent
	URL      string // where nodes download it
	KeyFile  string // release private key
	ValidFor time.Duration
	// SkipVersionCheck signs a Binary that is not an agent reporting
	// Version (a stand-in artifact).
	SkipVersionCheck bool
}

// SignRelease signs r offline with lpsctl into dir and returns the envelope
// path.
func (l *LPSD) SignRelease(ctx context.Context, dir string, r Release) (string, error) {
	if r.ValidFor == 0 {
		r.ValidFor = 24 * time.Hour
	}
	out := filepath.Join(dir, "release-"+r.Version+".json")
	args := []string{"release", "sign",
		"--key", r.KeyFile, "--base", r.Version[:9], "--version", r.Version,
		"--artifact", fmt.Sprintf("%s/%s=%s,%s", runtime.GOOS, runtime.GOARCH, r.Binary, r.URL),
		"--valid-for", r.ValidFor.String(), "--out", out}
	if r.SkipVersionCheck {
		args = append(args, "--skip-version-check")
	}
	_, err := l.Ctl(ctx, args...)
	return out, err
}

// GenerateKeys creates a release key pair in dir with lpsctl.
func (l *LPSD) GenerateKeys(ctx context.Context, dir string) (priv, pub string, err error) {
	priv, pub = filepath.Join(dir, "release.key"), filepath.Join(dir, "release.pub")
	os.Remove(priv)
	os.Remove(pub)
	_, err = l.Ctl(ctx, "keys", "generate", "--out-private", priv, "--out-public", pub)
	return priv, pub, err
}

// FreePort returns a loopback address nothing listens on.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}
