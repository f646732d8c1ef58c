package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/test/harness"
)

func TestRunRefusesUnsafeConfigurations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("ops:0123456789abcdef0123\n"), 0o600)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"stray argument", []string{"extra"}, 2, "unexpected arguments"},
		{"no certificate", []string{"--admin-token-file", tokens}, 2, "--tls-cert and --tls-key are required"},
		{"unauthenticated admin API", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile}, 2, "never unauthenticated"},
		{"bad store", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--store", "redis:x"}, 2, "want bolt:PATH"},
		{"etcd off host in plain text", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--store", "etcd:10.1.2.3:2379"}, 2, "--etcd-allow-plaintext"},
		{"bad roots", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--imds-roots", tokens}, 1, "--imds-roots"},
		{"certificate without the service name", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--store", "mem:", "--server-name", "other.example.com"}, 1, "other.example.com"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), tt.args, &out, &errOut); code != tt.code || strings.Count(errOut.String(), tt.want) != 1 {
			t.Errorf("%s: run = %d, stderr %q; want %d mentioning %q once", tt.name, code, errOut.String(), tt.code, tt.want)
		}
	}
}

// TestRunServesAndShutsDown starts lpsd in-process on a bbolt store, checks
// the health endpoints, and stops it through its context.
func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("ops:0123456789abcdef0123\n"), 0o600)
	addrFile := filepath.Join(dir, "addr")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- run(ctx, []string{
			"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
			"--addr-file", addrFile, "--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile,
			"--admin-token-file", tokens, "--store", "bolt:" + filepath.Join(dir, "state", "lpsd.db"),
		}, &bytes.Buffer{}, &errOut)
	}()
	line, err := harness.WaitFile(ctx, nil, addrFile)
	if err != nil {
		cancel()
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var addrs struct{ HTTP string }
	json.Unmarshal([]byte(line), &addrs)
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	for {
		resp, err := http.Get("http://" + addrs.HTTP + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-waitCtx.Done():
			t.Fatalf("never ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	resp, err := http.Get("http://" + addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"lpsd_requests_total", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("run after shutdown = %d\n%s", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "lpsd.db")); err != nil {
		t.Errorf("bbolt file not created: %v", err)
	}
}
