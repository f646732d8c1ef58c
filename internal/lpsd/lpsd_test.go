package lpsd

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

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

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"

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
		{"flag typo", []string{"--store", "mem:", "--tls-crt", "cert.pem"}, 2, "lpsd: unknown flag --tls-crt; did you mean --tls-cert?\nRun 'lpsd -h' for usage.\n"},
		{"flag typo after a bool", []string{"-dashboard", "-lsiten", ":1"}, 2, "unknown flag --lsiten; did you mean --listen?"},
		{"unknown flag", []string{"--no-such-thing"}, 2, "unknown flag --no-such-thing\n"},
		{"bad value before an unknown flag", []string{"--max-connections", "many", "--bogus"}, 2, `invalid value "many" for flag -max-connections`},
		{"no certificate", []string{"--admin-token-file", tokens}, 2, "--tls-cert and --tls-key are required"},
		{"unauthenticated admin API", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile}, 2, "never unauthenticated"},
		{"bad store", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--store", "redis:x"}, 2, "want bolt:PATH"},
		{"bad region", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--region", "east-us"}, 2, "--region \"east-us\""},
		{"etcd off host in plain text", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--store", "etcd:10.1.2.3:2379"}, 2, "--etcd-allow-plaintext"},
		{"bad roots", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--imds-roots", tokens}, 1, "--imds-roots"},
		{"retention age within the protected window", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--retention-age", "1d"}, 2, "--retention-age 1d"},
		{"retention records negative", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--retention-records", "-1"}, 2, "want 0 (no bound) to 10000000"},
		{"retention interval zero", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--retention-interval", "0s"}, 2, "--retention-interval 0s: want a positive duration"},
		{"retention age not a duration", []string{"--retention-age", "a month"}, 2, `invalid value "a month" for flag -retention-age`},
		{"retention flag typo", []string{"--retention-recrods", "5"}, 2, "did you mean --retention-records?"},
		{"debug listener off loopback", []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens, "--debug-listen", "0.0.0.0:6060"}, 2, "--debug-listen \"0.0.0.0:6060\""},
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
	r := start(t, append(nodeFlags(t, dir, 0o600), "--store", "bolt:"+filepath.Join(dir, "state", "lpsd.db"), "--drain-delay", "0s", "--debug-listen", "127.0.0.1:0")...)
	r.waitReady(t)
	// The debug listener serves pprof, and only there.
	if resp, err := http.Get("http://" + r.addrs.Debug + "/debug/pprof/heap?debug=1"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("pprof on --debug-listen: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get("http://" + r.addrs.HTTP + "/debug/pprof/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("pprof is served on the metrics listener")
		}
	}
	resp, err := http.Get("http://" + r.addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"lpsd_requests_total", "lpsd_build_info", "lpsd_admin_grpc_server_handled_total", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code := r.stop(); code != 0 {
		t.Errorf("run after shutdown = %d\n%s", code, r.log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "lpsd.db")); err != nil {
		t.Errorf("bbolt file not created: %v", err)
	}
}

// TestRunDrainsBeforeStopping: on the signal, /readyz answers 503 while
// the listeners still serve, for --drain-delay, and then lpsd exits 0.
// Started with a group-readable token file and no release keys, it warns
// about both.
func TestRunDrainsBeforeStopping(t *testing.T) {
	t.Parallel()
	r := start(t, append(nodeFlags(t, t.TempDir(), 0o640), "--store", "mem:", "--drain-delay", "2s")...)
	r.waitReady(t)
	stopped := make(chan int, 1)
	go func() { stopped <- r.stop() }()
	saw503 := false
	for !saw503 {
		select {
		case code := <-stopped:
			t.Fatalf("lpsd exited %d without /readyz ever answering 503\n%s", code, r.log.String())
		default:
		}
		saw503 = r.readyz() == http.StatusServiceUnavailable
	}
	if code := <-stopped; code != 0 {
		t.Errorf("exit %d after the drain\n%s", code, r.log.String())
	}
	for _, want := range []string{"lpsd draining", "no --release-keys", "secret file readable by its group or others"} {
		if !strings.Contains(r.log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, r.log.String())
		}
	}
}

func TestRunVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := run(t.Context(), []string{"--version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "lpsd dev (go") {
		t.Errorf("--version = %d %q", code, out.String())
	}
}

// TestAdvanceWindowFlag: --advance-window is checked as lpsd starts: a
// window it cannot read is a usage error (exit 2) saying what is wrong,
// before anything opens.
func TestAdvanceWindowFlag(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct{ value, want string }{
		{"Mon-Fri 09:00-17:00", "want DAYS HH:MM-HH:MM ZONE"},
		{"Mon-Fri 09:00-17:00 Europe/Dubln", `time zone "Europe/Dubln"`},
	} {
		var stderr bytes.Buffer
		if code := run(t.Context(), []string{"--advance-window", bad.value, "--tls-cert", "x", "--tls-key", "y"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), bad.want) {
			t.Errorf("--advance-window %q: exit %d, %q; want 2 and %q", bad.value, code, stderr.String(), bad.want)
		}
	}
}

// TestPolicyFlags: a rollout policy lpsd could not enforce is a usage
// error at start, naming the flag's bound.
func TestPolicyFlags(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy-min-canary", "-1"}, "minimum canary -1 nodes"},
		{[]string{"--policy-min-canary", "10001"}, "minimum canary 10001 nodes"},
		{[]string{"--policy-max-step", "101"}, "largest step 101 points"},
		{[]string{"--policy-min-bake", "-1m"}, "flag -policy-min-bake"},
		{[]string{"--policy-min-bake", "31d"}, "shortest bake 31d"},
		{[]string{"--policy-min-bake", "soon"}, "flag -policy-min-bake"},
	} {
		var stderr bytes.Buffer
		if code := run(t.Context(), append(bad.args, "--tls-cert", "x", "--tls-key", "y", "--admin-token-file", "z"), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), bad.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", bad.args, code, stderr.String(), bad.want)
		}
	}
}

// TestRunReloadsOnSIGHUP: SIGHUP swaps in new certificates and admin
// tokens while lpsd keeps running: the next handshake presents the new
// certificate, the new token is accepted and the old one refused. A file
// that fails to load keeps the current value.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "first"), 0o700)
	os.MkdirAll(filepath.Join(dir, "second"), 0o700)
	first, err := harness.MintTLS(filepath.Join(dir, "first"))
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "lps.crt"), filepath.Join(dir, "lps.key")
	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(first.CertFile, cert)
	copyFile(first.KeyFile, key)
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("old:0123456789abcdef0123\n"), 0o600)
	r := start(t, "--tls-cert", cert, "--tls-key", key, "--admin-token-file", tokens, "--store", "mem:", "--drain-delay", "0s")
	errOut, addrs := r.log, r.addrs
	leaf := func(addr string) []byte {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	status := func(token string) error { return r.status(t, token) }
	if err := status("0123456789abcdef0123"); err != nil {
		t.Fatalf("the first token: %v", err)
	}
	before := leaf(addrs.GRPC)

	second, err := harness.MintTLS(filepath.Join(dir, "second"))
	if err != nil {
		t.Fatal(err)
	}
	copyFile(second.CertFile, cert)
	copyFile(second.KeyFile, key)
	os.WriteFile(tokens, []byte("new:fedcba9876543210fedc\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(t, errOut, "SIGHUP reload")
	if after := leaf(addrs.GRPC); bytes.Equal(before, after) {
		t.Error("the node listener presents the old certificate after the reload")
	}
	if err := status("fedcba9876543210fedc"); err != nil {
		t.Errorf("the new token after the reload: %v", err)
	}
	if err := status("0123456789abcdef0123"); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("the old token after the reload: %v, want Unauthenticated", err)
	}

	// A broken token file keeps the tokens in force.
	os.WriteFile(tokens, []byte("x\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(t, errOut, "kept the current values")
	if err := status("fedcba9876543210fedc"); err != nil {
		t.Errorf("after a failed reload the token in force was dropped: %v", err)
	}
}

// waitLog waits for want to appear in the log, at most 15 s.
func waitLog(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(log.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, log.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the writer and a polling reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// running is lpsd started in-process by start.
type running struct {
	addrs struct{ GRPC, Admin, HTTP, Debug string }
	log   *syncBuffer
	// stop signals it (as SIGTERM does) and returns its exit code.
	stop func() int
	done chan int
}

// start runs lpsd with the listeners on loopback, an addr file and args,
// and returns once it wrote its addresses. The test's end stops it.
func start(t *testing.T, args ...string) *running {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	ctx, signal := context.WithCancel(t.Context())
	r := &running{log: &syncBuffer{}, done: make(chan int, 1)}
	go func() {
		r.done <- run(ctx, append([]string{
			"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--addr-file", addrFile,
		}, args...), &bytes.Buffer{}, r.log)
	}()
	var code int
	var once sync.Once
	r.stop = func() int { once.Do(func() { signal(); code = <-r.done }); return code }
	t.Cleanup(func() { r.stop() })
	line, err := harness.WaitFile(ctx, nil, addrFile)
	if err != nil {
		t.Fatalf("lpsd did not start: %v\n%s", err, r.log.String())
	}
	if err := json.Unmarshal([]byte(line), &r.addrs); err != nil {
		t.Fatal(err)
	}
	return r
}

// status calls the admin API's Status with token.
func (r *running) status(t *testing.T, token string) error {
	t.Helper()
	// The tests check the tokens here, not the certificate.
	creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})
	conn, err := grpc.NewClient("passthrough:///"+r.addrs.Admin, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c = metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+token)
	_, err = adminv1.NewAdminServiceClient(conn).Status(c, &adminv1.StatusRequest{})
	return err
}

// readyz returns /readyz's status code, 0 when it does not answer.
func (r *running) readyz() int {
	resp, err := http.Get("http://" + r.addrs.HTTP + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitReady waits for /readyz to answer 200, at most 15 s.
func (r *running) waitReady(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); r.readyz() != http.StatusOK; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lpsd never ready:\n%s", r.log.String())
		}
	}
}

// nodeFlags writes a node certificate and an admin token file into dir and
// returns the flags that name them.
func nodeFlags(t *testing.T, dir string, tokenMode os.FileMode) []string {
	t.Helper()
	tlsFiles, err := harness.MintTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops:0123456789abcdef0123\n"), tokenMode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tokens, tokenMode)
	return []string{"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--admin-token-file", tokens}
}

// run is the command as main runs it, unstamped.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Main(ctx, "dev", args, stdout, stderr)
}

// TestServeClosesListenersOnError: when Serve stops on an error after
// opening its listeners (here the --addr-file it cannot write), every
// listener is closed, a caller's too: in process, as the fleet simulator
// runs lpsd, nothing exits to close them.
func TestServeClosesListenersOnError(t *testing.T) {
	dir := t.TempDir()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	adminAddr, httpAddr := free(), free()
	args := append(nodeFlags(t, dir, 0o600), "--store", "mem:", "--drain-delay", "0s",
		"--admin-listen", adminAddr, "--http-listen", httpAddr, "--addr-file", filepath.Join(dir, "no-such-dir", "addr"))
	s, err := New(t.Context(), "dev", args, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(t.Context(), Listeners{Node: node}); err == nil || !strings.Contains(err.Error(), "--addr-file") {
		t.Fatalf("Serve = %v, want the --addr-file error", err)
	}
	for name, addr := range map[string]string{"node": node.Addr().String(), "admin": adminAddr, "http": httpAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s listener %s still open after Serve returned: %v", name, addr, err)
			continue
		}
		ln.Close()
	}
}
