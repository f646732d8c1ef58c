package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/internal/release"
)

// TestFetchLocalDNSConfig: the reference's contract over a real TLS gRPC
// server: the outcome is the last stdout line and the exit is 0 whatever
// happened, the service's "nothing for you" included; a signed config is
// verified on a node with release keys, an unsigned one then refused.
func TestFetchLocalDNSConfig(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	cert := ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName)
	const corefile = ".:53 {\n    forward . 168.63.129.16\n}\n"
	pub, priv, err := release.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := release.SignComponent(release.ComponentConfig{Component: "localDNS", Version: 2, Config: `{"corefile":".:53 {\n    forward . 168.63.129.16\n}\n"}`, NotAfter: time.Now().Add(time.Hour)}, priv)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := release.ServedComponent(env)
	if err != nil {
		t.Fatal(err)
	}
	signedSrv := lpstest.Start(t, cert, lpstest.Config(string(signed)), lpstest.Options{})
	unsigned := lpstest.Start(t, cert, lpstest.Config(`{"corefileBase64":"`+base64.StdEncoding.EncodeToString([]byte(corefile))+`"}`), lpstest.Options{})
	notFound := lpstest.Start(t, cert, lpstest.Error(status.Error(codes.NotFound, "no config")), lpstest.Options{})
	internal := lpstest.Start(t, cert, lpstest.Error(status.Error(codes.Internal, "boom")), lpstest.Options{})
	hung := lpstest.Start(t, cert, lpstest.Hang(), lpstest.Options{})
	huge := lpstest.Start(t, cert, lpstest.Config(strings.Repeat("x", lpsclient.MaxResponseSize+1)), lpstest.Options{})
	imdsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"encoding":"pkcs7","signature":"tok"}`))
	}))
	t.Cleanup(imdsSrv.Close)
	newRoot := func(keys bool) string {
		root := t.TempDir()
		dir := filepath.Join(root, "opt/azure/containers")
		os.MkdirAll(dir, 0o755)
		cfg := `{"version":"v1","api_server_config":{"api_server_name":"myapi.test.local"},"kubernetes_ca_cert":"` + base64.StdEncoding.EncodeToString(ca.PEM) + `"}`
		if err := os.WriteFile(filepath.Join(dir, "aks-node-controller-config.json"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if keys {
			if err := os.WriteFile(filepath.Join(dir, "aks-node-controller-release-keys.pub"), release.MarshalPublicKey(ed25519.PublicKey(pub), "test"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	for _, tc := range []struct {
		name     string
		addr     string
		keys     bool
		extra    []string
		want     string
		corefile bool
	}{
		{"signed", signedSrv.Addr, true, nil, "applied", true},
		{"signed-no-keys", signedSrv.Addr, false, nil, "applied", true},
		{"unsigned-no-keys", unsigned.Addr, false, nil, "applied", true},
		{"unsigned-with-keys", unsigned.Addr, true, nil, "failed", false},
		{"not-found", notFound.Addr, true, nil, "notFound", false},
		{"internal", internal.Addr, false, nil, "failed", false},
		{"hung", hung.Addr, false, []string{"--timeout", "300ms"}, "failed", false},
		{"over-the-cap", huge.Addr, false, nil, "failed", false},
		{"bad-flag", signedSrv.Addr, false, []string{"--no-such-flag"}, "failed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := newRoot(tc.keys)
			out := filepath.Join(root, "out", "localdns.corefile")
			var stdout, stderr bytes.Buffer
			args := append([]string{"fetch-localdns-config", "--root", root, "--imds-url", imdsSrv.URL, "--lps-addr", tc.addr, "--output", out}, tc.extra...)
			start := time.Now()
			code := run(t.Context(), args, &stdout, &stderr)
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if code != 0 || lines[len(lines)-1] != tc.want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and last line %s", code, stdout.String(), stderr.String(), tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			got, err := os.ReadFile(out)
			if tc.corefile && (err != nil || string(got) != corefile) {
				t.Errorf("corefile %q (%v), want %q", got, err, corefile)
			}
			if !tc.corefile && err == nil {
				t.Errorf("a %s outcome wrote a corefile", tc.want)
			}
		})
	}
}

func TestApplyLocalDNSConfig(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cfgFile := filepath.Join(root, "cfg.json")
	if err := os.WriteFile(cfgFile, []byte(`{"coreFile":"x {\n}\n"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"apply-localdns-config", "--root", root, "--config", cfgFile}, &stdout, &stderr); code != 0 || stdout.String() != "applied\n" {
		t.Errorf("apply --config: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	got, err := os.ReadFile(filepath.Join(root, "opt/azure/containers/localdns/livepatched.localdns.corefile"))
	if err != nil || string(got) != "x {\n}\n" {
		t.Errorf("corefile %q (%v)", got, err)
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"apply-localdns-config", "--root", root, "--config", filepath.Join(root, "missing")}, &stdout, &stderr); code != 1 || stdout.String() != "failed\n" {
		t.Errorf("apply a missing file: exit %d, stdout %q; want 1 and failed", code, stdout.String())
	}
}

// TestReadConfigStdinBounded: a config on stdin is size-capped, and a
// writer that never closes is given up on.
func TestReadConfigStdinBounded(t *testing.T) {
	t.Parallel()
	if got, err := readConfig(t.Context(), "-", strings.NewReader(`{"corefile":"x"}`)); err != nil || got != `{"corefile":"x"}` {
		t.Errorf("readConfig(stdin) = %q, %v", got, err)
	}
	if _, err := readConfig(t.Context(), "-", strings.NewReader(strings.Repeat("x", maxConfigInput+1))); err == nil {
		t.Error("readConfig(oversized stdin) = nil error")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := readConfig(ctx, "-", r); err == nil {
		t.Error("readConfig(a stdin that never closes) = nil error")
	}
}

// TestLivePatchingVerifiesSignature: the probe prints a signed config as
// served when it verifies, and nothing (exit 1) when it does not.
func TestLivePatchingVerifiesSignature(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	cert := ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName)
	pub, priv, _ := release.GenerateKey(nil)
	_, other, _ := release.GenerateKey(nil)
	serve := func(k ed25519.PrivateKey) (*lpstest.Server, string) {
		env, err := release.SignComponent(release.ComponentConfig{Component: "localDNS", Version: 1, Config: `{"corefile":"x"}`, NotAfter: time.Now().Add(time.Hour)}, k)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := release.ServedComponent(env)
		return lpstest.Start(t, cert, lpstest.Config(string(body)), lpstest.Options{}), string(body)
	}
	good, goodBody := serve(priv)
	bad, _ := serve(other)
	imdsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"encoding":"pkcs7","signature":"tok"}`))
	}))
	t.Cleanup(imdsSrv.Close)
	root := t.TempDir()
	dir := filepath.Join(root, "opt/azure/containers")
	os.MkdirAll(dir, 0o755)
	cfg := `{"version":"v1","api_server_config":{"api_server_name":"myapi.test.local"},"kubernetes_ca_cert":"` + base64.StdEncoding.EncodeToString(ca.PEM) + `"}`
	os.WriteFile(filepath.Join(dir, "aks-node-controller-config.json"), []byte(cfg), 0o600)
	os.WriteFile(filepath.Join(dir, "aks-node-controller-release-keys.pub"), release.MarshalPublicKey(pub, "test"), 0o644)
	probe := func(addr string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), []string{"live-patching", "--root", root, "--imds-url", imdsSrv.URL, "--lps-addr", addr, "localDNS"}, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := probe(good.Addr); code != 0 || out != goodBody {
		t.Errorf("verified: exit %d, stdout %q, stderr %q; want 0 and the config as served", code, out, errOut)
	}
	if code, out, errOut := probe(bad.Addr); code != 1 || out != "" || !strings.Contains(errOut, "untrusted") {
		t.Errorf("untrusted signature: exit %d, stdout %q, stderr %q; want 1 and nothing printed", code, out, errOut)
	}
}
