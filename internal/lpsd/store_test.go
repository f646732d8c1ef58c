package lpsd

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"nodehotfix/internal/store/etcdstore/etcdembed"
	"nodehotfix/test/harness"
)

// TestEtcdFlagsRefuseUnsafeConnections: plain text off this host, a
// password in plain text, and half-given TLS or credentials are refused
// before any connection, each saying what to set.
func TestEtcdFlagsRefuseUnsafeConnections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		f         etcdFlags
		endpoints []string
		want      string
	}{
		{"plain text off host", etcdFlags{}, []string{"10.0.0.7:2379"}, "set --etcd-ca (and --etcd-cert/--etcd-key), or --etcd-allow-plaintext"},
		{"one of several off host", etcdFlags{}, []string{"127.0.0.1:2379", "etcd-2.internal:2379"}, "etcd-2.internal:2379 is not on this host"},
		{"password in plain text", etcdFlags{user: "lpsd", passwordFile: pw, allowPlaintext: true}, []string{"10.0.0.7:2379"}, "refusing to send --etcd-user's password in plain text"},
		{"https without TLS", etcdFlags{}, []string{"https://127.0.0.1:2379"}, "set --etcd-ca"},
		{"http with TLS", etcdFlags{ca: tlsFiles.CAFile}, []string{"http://10.0.0.7:2379"}, "but TLS is set"},
		{"cert without key", etcdFlags{cert: tlsFiles.CertFile}, []string{"127.0.0.1:2379"}, "--etcd-cert and --etcd-key go together"},
		{"user without password", etcdFlags{user: "lpsd"}, []string{"127.0.0.1:2379"}, "--etcd-user and --etcd-password-file go together"},
		{"bad CA", etcdFlags{ca: pw}, []string{"127.0.0.1:2379"}, "--etcd-ca: " + pw + ": no PEM certificates"},
		{"no port", etcdFlags{}, []string{"127.0.0.1"}, "missing port"},
	}
	for _, tt := range tests {
		if _, _, err := tt.f.config(tt.endpoints, testLogger(t)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: config = %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
	// Loopback in plain text, or anything with TLS, is fine.
	eps, c, err := etcdFlags{}.config([]string{"127.0.0.1:2379", "localhost:2379", "[::1]:2379"}, testLogger(t))
	if err != nil || c.TLS != nil || eps[0] != "http://127.0.0.1:2379" {
		t.Errorf("loopback plain text: %v %v %v", eps, c.TLS, err)
	}
	eps, c, err = etcdFlags{ca: tlsFiles.CAFile, user: "lpsd", passwordFile: pw}.config([]string{"etcd-0.internal:2379"}, testLogger(t))
	if err != nil || c.TLS == nil || c.Password != "s3cret" || eps[0] != "https://etcd-0.internal:2379" {
		t.Errorf("TLS with a password: %v %+v %v", eps, c, err)
	}
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// startTLSEtcd starts a one-member embedded etcd serving TLS with client
// certificates from a fresh PKI, stopped when the test ends.
func startTLSEtcd(t *testing.T) (harness.EtcdPKI, *etcdembed.Cluster) {
	t.Helper()
	dir := t.TempDir()
	pki, err := harness.MintEtcdPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := etcdembed.Start(filepath.Join(dir, "etcd"), 1, etcdembed.Options{
		NoFsync:   true,
		ClientTLS: &etcdembed.ClientTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	return pki, cluster
}

// TestIntegrationRunOnSecuredEtcd: lpsd serves from an etcd that requires
// TLS with client certificates and a password, and a wrong password is a
// clear startup error.
func TestIntegrationRunOnSecuredEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts an embedded etcd with TLS and authentication")
	}
	t.Parallel()
	pki, cluster := startTLSEtcd(t)
	endpoint := cluster.Endpoints()[0]
	enableAuth(t, endpoint, pki, "root", "r00t-pw")

	pw := func(password string) string {
		p := filepath.Join(t.TempDir(), "pw")
		os.WriteFile(p, []byte(password+"\n"), 0o600)
		return p
	}
	args := func(password string) []string {
		return append(nodeFlags(t, t.TempDir(), 0o600),
			"--store", "etcd:"+strings.TrimPrefix(endpoint, "https://"),
			"--etcd-ca", pki.CA, "--etcd-cert", pki.ClientCert, "--etcd-key", pki.ClientKey,
			"--etcd-user", "root", "--etcd-password-file", pw(password), "--drain-delay", "0s")
	}

	var errOut bytes.Buffer
	wrong := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, args("wrong")...)
	if code := run(t.Context(), wrong, &bytes.Buffer{}, &errOut); code != 1 || !strings.Contains(errOut.String(), "authentication failed") {
		t.Errorf("wrong password: exit %d, stderr:\n%s\nwant 1 and the authentication failure", code, errOut.String())
	}
	t.Logf("with a wrong password, lpsd says:\n%s", errOut.String())

	r := start(t, args("r00t-pw")...)
	r.waitReady(t)
	if code := r.stop(); code != 0 {
		t.Errorf("on the secured etcd: exit %d\n%s", code, r.log.String())
	}
}

// TestIntegrationPlaintextAgainstTLSEtcd: lpsd without --etcd-ca pointed
// at an etcd that serves TLS fails to start saying so, and which flags to
// set.
func TestIntegrationPlaintextAgainstTLSEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts an embedded etcd with TLS")
	}
	t.Parallel()
	_, cluster := startTLSEtcd(t)
	hostport := strings.TrimPrefix(cluster.Endpoints()[0], "https://")
	args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--drain-delay", "0s", "--store", "etcd:" + hostport},
		nodeFlags(t, t.TempDir(), 0o600)...)
	var errOut bytes.Buffer
	want := "etcd at " + hostport + " seems to speak TLS: set --etcd-ca (and --etcd-cert/--etcd-key)"
	if code := run(t.Context(), args, &bytes.Buffer{}, &errOut); code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("plain text against TLS etcd: exit %d, stderr:\n%s\nwant 1 and %q", code, errOut.String(), want)
	}
	t.Logf("without --etcd-ca against a TLS etcd, lpsd says:\n%s", errOut.String())
}

// TestSpeaksTLS: the probe tells a TLS server (whatever its certificate)
// from one that answers a ClientHello in plain text or not at all.
func TestSpeaksTLS(t *testing.T) {
	t.Parallel()
	tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the probe's failed handshakes
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(http.NotFoundHandler()) // answers 400 in HTTP
	t.Cleanup(plain.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := closed.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { closed.Close() })
	for name, tt := range map[string]struct {
		addr string
		want bool
	}{
		"tls":            {tlsSrv.Listener.Addr().String(), true},
		"plain-http":     {plain.Listener.Addr().String(), false},
		"closes-at-once": {closed.Addr().String(), false},
	} {
		if got := speaksTLS(t.Context(), tt.addr); got != tt.want {
			t.Errorf("%s: speaksTLS(%s) = %v, want %v", name, tt.addr, got, tt.want)
		}
	}
}

// enableAuth adds user with the root role and turns etcd's authentication
// on.
func enableAuth(t *testing.T, endpoint string, p harness.EtcdPKI, user, password string) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := loadPool(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second,
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := cli.UserAdd(ctx, user, password); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, user, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
}
