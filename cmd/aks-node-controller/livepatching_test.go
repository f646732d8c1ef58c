package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
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
)

// TestLivePatching: the reference's output and exit contract over a real TLS
// gRPC server: the raw config with no trailing newline, nothing for an empty
// one, --json for the whole response, and exit 1 for every failure, the
// codes check-hotfix treats as benign included.
func TestLivePatching(t *testing.T) {
	t.Parallel()
	ca := lpstest.NewCA(t)
	cert := ca.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), lpsclient.ServerName)
	corefile := ".:53 {\n    forward . /etc/resolv.conf\n}\n"
	served := lpstest.Start(t, cert, lpstest.Config(corefile), lpstest.Options{})
	empty := lpstest.Start(t, cert, lpstest.Config(""), lpstest.Options{})
	huge := lpstest.Start(t, cert, lpstest.Config(strings.Repeat("x", lpsclient.MaxResponseSize+1)), lpstest.Options{})
	notFound := lpstest.Start(t, cert, lpstest.Error(status.Error(codes.NotFound, "no config")), lpstest.Options{})
	hung := lpstest.Start(t, cert, lpstest.Hang(), lpstest.Options{})
	imdsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"encoding":"pkcs7","signature":"tok"}`))
	}))
	t.Cleanup(imdsSrv.Close)
	root := t.TempDir()
	dir := filepath.Join(root, "opt/azure/containers")
	os.MkdirAll(dir, 0o755)
	cfg := `{"version":"v1","api_server_config":{"api_server_name":"myapi.test.local"},"kubernetes_ca_cert":"` + base64.StdEncoding.EncodeToString(ca.PEM) + `"}`
	if err := os.WriteFile(filepath.Join(dir, "aks-node-controller-config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	probe := func(addr string, extra ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"live-patching", "--root", root, "--imds-url", imdsSrv.URL, "--lps-addr", addr}, extra...)
		code := run(t.Context(), args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	if code, out, errOut := probe(served.Addr, "localDNS"); code != 0 || out != corefile {
		t.Errorf("served: exit %d, stdout %q (%s), want 0 and the raw config", code, out, errOut)
	}
	if got := served.Requests(); len(got) != 1 || got[0].Component != "localDNS" {
		t.Errorf("requests = %+v, want one for localDNS", got)
	}
	if code, out, _ := probe(empty.Addr, "localDNS"); code != 0 || out != "" {
		t.Errorf("empty config: exit %d, stdout %q, want 0 and nothing", code, out)
	}
	code, out, _ := probe(served.Addr, "aksNodeController", "--json")
	var resp struct{ ComponentName, Config string }
	if err := json.Unmarshal([]byte(out), &resp); code != 0 || err != nil || resp.ComponentName != "aksNodeController" || resp.Config != corefile || !strings.HasSuffix(out, "}\n") {
		t.Errorf("--json: exit %d, %q (%v)", code, out, err)
	}
	if code, out, errOut := probe(notFound.Addr, "localDNS"); code != 1 || out != "" || !strings.Contains(errOut, "NotFound") {
		t.Errorf("NotFound: exit %d, stdout %q, stderr %q; want 1 with the code named", code, out, errOut)
	}
	if code, out, errOut := probe(huge.Addr, "localDNS"); code != 1 || out != "" || !strings.Contains(errOut, "response larger than the 1048576 bytes this node accepts") {
		t.Errorf("a response over the cap: exit %d, %d bytes out, stderr %q", code, len(out), errOut)
	}
	if code, _, errOut := probe(hung.Addr, "--timeout", "300ms", "localDNS"); code != 1 || !strings.Contains(errOut, "DeadlineExceeded") {
		t.Errorf("hung: exit %d, stderr %q; want 1 at the timeout", code, errOut)
	}
	if code, _, errOut := probe(served.Addr); code != 2 || !strings.Contains(errOut, "usage: aks-node-controller live-patching") {
		t.Errorf("no component: exit %d, stderr %q; want usage", code, errOut)
	}
	if code, _, _ := probe(served.Addr, "localDNS", "extra"); code != 2 {
		t.Errorf("two components: exit %d, want 2", code)
	}
	var failing failWriter
	if code := run(t.Context(), []string{"live-patching", "--root", root, "--imds-url", imdsSrv.URL, "--lps-addr", served.Addr, "localDNS"}, &failing, &bytes.Buffer{}); code != 1 {
		t.Errorf("a failed stdout write: exit %d, want 1", code)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"live-patching", "--root", t.TempDir(), "localDNS"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "resolve live-patching target") {
		t.Errorf("no node config: exit %d, stderr %q", code, stderr.String())
	}
}

// failWriter fails every write, as a closed pipe does.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }
