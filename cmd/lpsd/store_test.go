package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
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

// TestIntegrationRunOnSecuredEtcd: lpsd serves from an etcd that requires
// TLS with client certificates and a password, and a wrong password is a
// clear startup error.
func TestIntegrationRunOnSecuredEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts an embedded etcd with TLS and authentication")
	}
	t.Parallel()
	dir := t.TempDir()
	pki := mintEtcdPKI(t, dir)
	cluster, err := etcdembed.Start(filepath.Join(dir, "etcd"), 1, etcdembed.Options{
		NoFsync:   true,
		ClientTLS: &etcdembed.ClientTLS{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.ca},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
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
			"--etcd-ca", pki.ca, "--etcd-cert", pki.clientCert, "--etcd-key", pki.clientKey,
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

type etcdPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

// mintEtcdPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM.
func mintEtcdPKI(t *testing.T, dir string) etcdPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write := func(name string, block *pem.Block) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
		return write(name+".crt", &pem.Block{Type: "CERTIFICATE", Bytes: der}), write(name+".key", &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	}
	p := etcdPKI{ca: write("etcd-ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	p.serverCert, p.serverKey = leaf("etcd-server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("lpsd", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// enableAuth adds user with the root role and turns etcd's authentication
// on.
func enableAuth(t *testing.T, endpoint string, p etcdPKI, user, password string) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := loadPool(p.ca)
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
