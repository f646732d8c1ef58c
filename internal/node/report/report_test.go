package report

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
)

const testBoot = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

// nodeRoot is a node root with a node config trusting a fresh CA, which
// it returns, and, unless bootID is "", a boot ID.
func nodeRoot(t *testing.T, bootID string) (layout.Root, *lpstest.CA) {
	t.Helper()
	root := layout.Root(t.TempDir())
	ca := lpstest.NewCA(t)
	cfg := `{"version":"v1","api_server_config":{"api_server_name":"myapi.test.local"},"kubernetes_ca_cert":"` + base64.StdEncoding.EncodeToString(ca.PEM) + `"}`
	for path, body := range map[string]string{root.NodeConfig(): cfg, root.BootID(): bootID + "\n"} {
		if body == "\n" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, ca
}

func imdsServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte(`{"encoding":"pkcs7","signature":"doc"}`))
		}
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// silentListener accepts connections and never answers: a service that
// hangs in the TLS handshake.
func silentListener(t *testing.T, _ *lpstest.CA) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

var outcome = Outcome{Baked: "202604.01.0", Agent: hotfix.AgentBaked, AgentVersion: "202604.01.0", Decision: hotfix.ReasonNoPointer}

// TestSendFaults: a report is telemetry sent after provisioning, so every
// fault ends it with an error, within the caller's deadline, and nothing
// else. (The go test timeout catches a Send that would hang.)
func TestSendFaults(t *testing.T) {
	t.Parallel()
	hung := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	tests := []struct {
		name    string
		boot    string
		imds    http.HandlerFunc
		lps     func(t *testing.T, ca *lpstest.CA) string
		wantErr string
	}{
		{name: "service-hangs-in-handshake", boot: testBoot, lps: silentListener},
		// A service that predates the report: a trusted certificate, the
		// reference's service only, so the report is Unimplemented.
		{name: "service-without-reports", boot: testBoot, wantErr: "Unimplemented", lps: func(t *testing.T, ca *lpstest.CA) string {
			return lpstest.Start(t, ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName), lpstest.Hang(), lpstest.Options{}).Addr
		}},
		{name: "untrusted-certificate", boot: testBoot, lps: func(t *testing.T, _ *lpstest.CA) string {
			other := lpstest.NewCA(t)
			return lpstest.Start(t, other.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName), lpstest.Hang(), lpstest.Options{}).Addr
		}},
		{name: "metadata-service-hangs", boot: testBoot, imds: hung, lps: silentListener},
		{name: "service-refuses-connections", boot: testBoot, lps: func(t *testing.T, _ *lpstest.CA) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			return addr
		}},
		{name: "no-boot-id", boot: "", lps: silentListener, wantErr: "boot id"},
		{name: "boot-id-not-a-uuid", boot: "../../etc/passwd", lps: silentListener, wantErr: "not a UUID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root, ca := nodeRoot(t, tt.boot)
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			first, err := Send(ctx, Config{Root: root, IMDSURL: imdsServer(t, tt.imds), LPSAddr: tt.lps(t, ca)}, outcome)
			if err == nil || first {
				t.Fatalf("Send = %v, %v; want an error", first, err)
			}
			if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Send error %q, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}
