package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store/memstore"
	"nodehotfix/test/harness"
)

const adminToken = "0123456789abcdef0123456789abcdef"

// lpsctl runs the CLI in-process.
func lpsctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// interruptAfter returns a context that is interrupted (Ctrl-C) after d.
func interruptAfter(t *testing.T, d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(t.Context())
	timer := time.AfterFunc(d, func() { cancel(interrupted{os.Interrupt}) })
	return ctx, func() { timer.Stop(); cancel(nil) }
}

// interruptAfterOutput returns a context interrupted as a terminal's
// Ctrl-C would once what was written to the returned writer holds n of
// what count counts (or after a minute, which then fails the caller's
// count), so a watch is stopped by what it drew, never by a wall-clock
// guess of how long a refresh takes on a loaded machine.
func interruptAfterOutput(t *testing.T, n int, count func(string) int) (context.Context, *watchOutput, func()) {
	ctx, stop := interruptAfter(t, time.Minute)
	cctx, cancel := context.WithCancelCause(ctx)
	w := &watchOutput{count: count, n: n, stop: func() { cancel(interrupted{os.Interrupt}) }}
	return cctx, w, func() { cancel(nil); stop() }
}

// watchOutput records a watch's output and stops it once it holds n
// refreshes.
type watchOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	count func(string) int
	n     int
	stop  func()
}

func (w *watchOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.count(w.buf.String()) >= w.n {
		w.stop()
	}
	return n, err
}

func (w *watchOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// mustRun runs the CLI and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := lpsctl(t, args...)
	if code != exitOK {
		t.Fatalf("lpsctl %s: exit %d\nstderr: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// testServer is an in-process admin API on a real TLS socket over a
// memstore, and the files a client needs to reach it.
type testServer struct {
	addr  string
	store *memstore.Store
	snap  *lps.Snapshotter
	// Client files.
	ca, token, cert, key string
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	return startServerWith(t)
}

// startServerWith starts a test server whose calls also pass through
// extra, after authentication.
func startServerWith(t *testing.T, extra ...grpc.UnaryServerInterceptor) *testServer {
	t.Helper()
	return startServerKeys(t, nil, extra...)
}

// startServerKeys starts a test server that publishes only envelopes keys
// verify (nil: any well-formed one).
func startServerKeys(t *testing.T, keys *release.KeySet, extra ...grpc.UnaryServerInterceptor) *testServer {
	t.Helper()
	return startServerPolicy(t, keys, rollout.Policy{}, extra...)
}

// startServerPolicy starts a test server that enforces policy.
func startServerPolicy(t *testing.T, keys *release.KeySet, policy rollout.Policy, extra ...grpc.UnaryServerInterceptor) *testServer {
	t.Helper()
	dir := t.TempDir()
	serverCA, serverCAKey := newCA(t, "server CA")
	clientCA, clientCAKey := newCA(t, "admin client CA")
	serverCert, _ := issue(t, serverCA, serverCAKey, "localhost", x509.ExtKeyUsageServerAuth)
	_, clientFiles := issue(t, clientCA, clientCAKey, "alice", x509.ExtKeyUsageClientAuth)

	s := &testServer{store: memstore.New()}
	t.Cleanup(func() { s.store.Close() })
	s.snap = lps.NewSnapshotter(s.store, nil, nil)
	s.ca = writeFile(t, dir, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: serverCA.Raw})))
	s.token = writeFile(t, dir, "token", "ops:"+adminToken+"\n")
	s.cert = writeFile(t, dir, "client.pem", clientFiles[0])
	s.key = writeFile(t, dir, "client-key.pem", clientFiles[1])

	tokens, err := admin.ParseTokens([]byte("ops:" + adminToken))
	if err != nil {
		t.Fatal(err)
	}
	auth := admin.NewAuth(tokens, nil)
	pool := x509.NewCertPool()
	pool.AddCert(clientCA)
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(admin.TLSConfig(lps.NewCertSource(serverCert), pool, true))),
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{auth.Unary}, extra...)...),
	)
	adminv1.RegisterAdminServiceServer(g, admin.New(admin.Config{
		Store:       s.store,
		Snapshots:   s.snap,
		Counts:      func() map[string]uint64 { return map[string]uint64{"served": 3} },
		Region:      "eastus",
		ReplicaID:   "lpsd-1",
		ReleaseKeys: keys,
		Policy:      policy,
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	s.addr = lis.Addr().String()
	return s
}

// conn returns the connection flags for the bearer token.
func (s *testServer) conn() []string {
	return []string{"--server", s.addr, "--ca", s.ca, "--server-name", "localhost", "--token-file", s.token}
}

func (s *testServer) reload(t *testing.T) {
	t.Helper()
	if err := s.snap.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func newCA(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	c, key, err := harness.NewCA(cn, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// issue returns a leaf certificate, and its certificate and key as PEM.
func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) (tls.Certificate, [2]string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := [2]string{
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})),
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, files
}

// fakeAgent writes into dir a Go binary stamped with version as make
// build stamps the agent (-X main.version), for GOARCH amd64 unless note
// names arm64; note is stamped too, so that two differ.
func fakeAgent(t *testing.T, dir, name, version, note string) string {
	t.Helper()
	arch := "amd64"
	if strings.Contains(note, "arm64") {
		arch = "arm64"
	}
	data := stampedAgent(t, arch, "-X main.version="+version+" -X 'main.note="+note+"'")
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

var stamped struct {
	sync.Mutex
	bins map[string][]byte
}

// stampedAgent builds (once per arch and ldflags) a main with the agent's
// version variable and returns its bytes.
func stampedAgent(t *testing.T, arch, ldflags string) []byte {
	t.Helper()
	stamped.Lock()
	defer stamped.Unlock()
	key := arch + " " + ldflags
	if b, ok := stamped.bins[key]; ok {
		return b
	}
	dir := t.TempDir()
	src := "package main\n\nimport \"fmt\"\n\nvar version, note = \"dev\", \"\"\n\nfunc main() { fmt.Println(version, note) }\n"
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module agent\n\ngo 1.26\n"), 0o644)
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags", ldflags, "-o", "agent", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build a stamped agent: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "agent"))
	if err != nil {
		t.Fatal(err)
	}
	if stamped.bins == nil {
		stamped.bins = map[string][]byte{}
	}
	stamped.bins[key] = b
	return b
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// vmIn returns a VM ID inside (want true) or outside a pct% rollout of
// version.
func vmIn(version string, pct int, want bool) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		if (rollout.Bucket(id, version) < pct*rollout.Buckets/100) == want {
			return id
		}
	}
}

// TestOperatorFlow walks a release from key generation to revocation, with
// human and JSON output at each step.
func TestOperatorFlow(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	dir := t.TempDir()
	const v = "202604.01.3"
	conn := srv.conn()
	with := func(args ...string) []string { return append(args, conn...) }

	priv, pub := filepath.Join(dir, "release.key"), filepath.Join(dir, "release.pub")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", pub)
	amd64 := fakeAgent(t, dir, "anc-amd64", v, "amd64")
	arm64 := fakeAgent(t, dir, "anc-arm64", v, "arm64, longer")
	envFile := filepath.Join(dir, "release.json")
	out := mustRun(t, "release", "sign", "--key", priv, "--base", "202604.01", "--version", v,
		"--artifact", "linux/amd64="+amd64+",https://blob.example.com/anc/amd64",
		"--artifact", "linux/arm64="+arm64+",https://blob.example.com/anc/arm64",
		"--valid-for", "720h", "--out", envFile)
	if !strings.Contains(out, "signed "+v) || !strings.Contains(out, "wrote "+envFile) {
		t.Errorf("release sign output:\n%s", out)
	}

	out = mustRun(t, with("release", "publish", "--reason", "test", "--envelope", envFile)...)
	if !strings.Contains(out, v+" (base 202604.01): draft at 0%") {
		t.Errorf("publish output: %q", out)
	}
	// A retry (a CI job run twice) succeeds; another envelope signed as
	// the same version has its own exit code.
	if out, errOut, code := lpsctl(t, with("release", "publish", "--reason", "test", "--envelope", envFile)...); code != exitOK || !strings.Contains(out, "is already published with this envelope; nothing changed") {
		t.Errorf("publish again: exit %d, stdout %q, stderr %q; want 0 and nothing changed", code, out, errOut)
	}
	otherEnv := filepath.Join(dir, "other.json")
	mustRun(t, "release", "sign", "--key", priv, "--base", "202604.01", "--version", v,
		"--artifact", "linux/amd64="+amd64+",https://blob.example.com/anc/amd64-rebuilt", "--valid-for", "720h", "--out", otherEnv)
	if _, errOut, code := lpsctl(t, with("release", "publish", "--reason", "test", "--envelope", otherEnv)...); code != exitConflict || !strings.Contains(errOut, "a different envelope is already published") {
		t.Errorf("publish a different envelope as %s: exit %d, stderr %q; want %d", v, code, errOut, exitConflict)
	}

	var rel releaseJSON
	out = mustRun(t, with("rollout", "set", "--reason", "test", v, "--percent", "10", "--subscriptions", subA+","+strings.ToUpper(subB), "--json", "--allow-unseen")...)
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatalf("rollout set --json: %v\n%s", err, out)
	}
	if rel.State != "rolling" || rel.Percent != 10 || !cmp.Equal(rel.Subscriptions, []string{subA, subB}) || len(rel.Regions) != 0 {
		t.Errorf("rollout set --json = %+v, want rolling at 10%% for both subscriptions", rel)
	}
	if _, errOut, code := lpsctl(t, with("rollout", "set", "--reason", "test", v, "--percent", "5")...); code != exitRefused || !strings.Contains(errOut, "can only grow") {
		t.Errorf("percent decrease: exit %d, stderr %q; want %d and a reason", code, errOut, exitRefused)
	}

	srv.reload(t)
	out = mustRun(t, with("status")...)
	for _, want := range []string{"region: eastus", "VERSION", "PERCENT", v + "  202604.01  rolling  10%", subA + "," + subB, "served   3"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	// --watch refreshes until interrupted: here once it drew two.
	refreshes := func(s string) int { return strings.Count(s, "lpsctl status, every 100ms") }
	watchCtx, watched, stopWatch := interruptAfterOutput(t, 2, refreshes)
	if code := run(watchCtx, with("status", "--watch", "--interval", "100ms"), watched, io.Discard); code != exitInterrupted {
		t.Errorf("status --watch exit %d, want %d", code, exitInterrupted)
	}
	stopWatch()
	if out := watched.String(); refreshes(out) < 2 || strings.Count(out, "VERSION") != refreshes(out) {
		t.Errorf("status --watch drew %d refreshes:\n%s", refreshes(out), out)
	}
	// --watch --json is a stream of documents and nothing else.
	documents := func(s string) int {
		n := 0
		for dec := json.NewDecoder(strings.NewReader(s)); dec.Decode(new(json.RawMessage)) == nil; n++ {
		}
		return n
	}
	watchCtx, watched, stopWatch = interruptAfterOutput(t, 2, documents)
	var watchErr bytes.Buffer
	if code := run(watchCtx, with("status", "--watch", "--interval", "100ms", "--json"), watched, &watchErr); code != exitInterrupted {
		t.Errorf("status --watch --json exit %d: %s", code, watchErr.String())
	}
	stopWatch()
	docs := 0
	for dec := json.NewDecoder(strings.NewReader(watched.String())); ; docs++ {
		var doc statusJSON
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil || doc.Region != "eastus" {
			t.Fatalf("status --watch --json document %d: %+v, %v", docs, doc, err)
		}
	}
	if docs < 2 {
		t.Errorf("status --watch --json wrote %d documents, want a refresh stream", docs)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("status", "--json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Region != "eastus" || len(st.Releases) != 1 || st.Releases[0].Revision != rel.Revision || st.SnapshotTime == nil ||
		!cmp.Equal(st.Requests, []countJSON{{"served", 3}}) {
		t.Errorf("status --json = %+v", st)
	}

	in, outside := vmIn(v, 10, true), vmIn(v, 10, false)
	out = mustRun(t, with("explain", "--vm-id", in, "--subscription", subA)...)
	for _, want := range []string{"node " + in + ", subscription " + subA, v + " (base 202604.01): SERVED", "pass  not-revoked", "pass  percentage", "pointer served (", "base 202604.01: " + v + " (signed release, linux/amd64, linux/arm64, not after "} {
		if !strings.Contains(out, want) {
			t.Errorf("explain (included) output lacks %q:\n%s", want, out)
		}
	}
	var ex explainJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("explain", "--vm-id", outside, "--subscription", subA, "--region", "westus", "--json")...)), &ex); err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, r := range ex.Decisions[0].Rules {
		rules = append(rules, fmt.Sprintf("%s=%v", r.Rule, r.Passed))
	}
	want := []string{"not-revoked=true", "not-expired=true", "state-serving=true", "subscription-in-scope=true", "region-in-scope=true", "percentage=false"}
	if !cmp.Equal(rules, want) || ex.Decisions[0].Included || string(ex.Pointer) != "null" || ex.Region != "westus" {
		t.Errorf("explain --json (excluded) = rules %v included %v pointer %s; want %v, false, null", rules, ex.Decisions[0].Included, ex.Pointer, want)
	}

	for _, step := range []struct{ cmd, want string }{
		{"pause", "paused at 10%"},
		{"pause", "is already paused; nothing changed"},
		{"resume", "rolling at 10%"},
		{"halt", "halted at 10%"},
		{"halt", "is already halted; nothing changed"},
	} {
		if out := mustRun(t, with("rollout", step.cmd, "--reason", "test", v)...); !strings.Contains(out, step.want) {
			t.Errorf("rollout %s output %q lacks %q", step.cmd, out, step.want)
		}
	}
	if _, _, code := lpsctl(t, with("rollout", "pause", "--reason", "test", v)...); code != exitRefused {
		t.Errorf("pause a halted rollout: exit %d, want %d", code, exitRefused)
	}
	if out := mustRun(t, with("revoke", "--reason", "test", v)...); !strings.Contains(out, "REVOKED") {
		t.Errorf("revoke output %q lacks REVOKED", out)
	}

	out = mustRun(t, with("audit")...)
	for _, want := range []string{"SEQ", "token:ops", "published as draft", "state draft→rolling, percent 0→10, subscriptions all→" + subA + "," + subB, "state rolling→paused", "revoked no→yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit output lacks %q:\n%s", want, out)
		}
	}
	var au auditJSON
	if err := json.Unmarshal([]byte(mustRun(t, with("audit", "--json")...)), &au); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range au.Entries {
		actions = append(actions, e.Actor+" "+e.Action+" "+e.Target)
	}
	wantActions := []string{"publish", "rollout-set", "pause", "resume", "halt", "revoke"}
	for i := range wantActions {
		wantActions[i] = "token:ops " + wantActions[i] + " " + v
	}
	if !cmp.Equal(actions, wantActions) || string(au.Entries[0].Before) != "null" || len(au.Entries[1].After) == 0 {
		t.Errorf("audit --json actions = %v, want %v (first before null)", actions, wantActions)
	}
	out, errOut, code := lpsctl(t, with("audit", "--after", "2", "--limit", "2", "--json")...)
	if err := json.Unmarshal([]byte(out), &au); err != nil || code != exitOK || len(au.Entries) != 2 || au.Entries[0].Seq != 3 ||
		!strings.Contains(errOut, "audit --after 4") {
		t.Errorf("audit page: exit %d, %d entries, stderr %q", code, len(au.Entries), errOut)
	}
}

func TestMutualTLSActor(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "k"), filepath.Join(dir, "k.pub")
	mustRun(t, "keys", "generate", "--out-private", priv, "--out-public", pub)
	art := fakeAgent(t, dir, "anc", "202604.01.1", "")
	env := filepath.Join(dir, "env.json")
	mustRun(t, "release", "sign", "--key", priv, "--base", "202604.01", "--version", "202604.01.1",
		"--artifact", "linux/amd64="+art+",https://b.example.com/a", "--valid-for", "1h", "--out", env)
	mtls := []string{"--server", srv.addr, "--ca", srv.ca, "--server-name", "localhost", "--cert", srv.cert, "--key", srv.key}
	mustRun(t, append([]string{"release", "publish", "--reason", "test", "--envelope", env}, mtls...)...)
	entries, err := srv.store.Audit(t.Context(), 0, 10)
	if err != nil || len(entries) != 1 || entries[0].Actor != "cert:alice" {
		t.Errorf("audit after an mTLS publish = %+v, %v; want one entry by cert:alice", entries, err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	dir := t.TempDir()
	wrongToken := writeFile(t, dir, "wrong", strings.Repeat("z", 32))
	notPEM := writeFile(t, dir, "ca.txt", "not a certificate")
	garbage := writeFile(t, dir, "env.json", "{}")
	missing := filepath.Join(dir, "missing")
	tls := []string{"--server", srv.addr, "--ca", srv.ca, "--server-name", "localhost"}

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no-args", nil, exitUsage, "lpsctl: missing command\n\nUsage:\n  lpsctl <command>"},
		{"unknown", []string{"frobnicate", "--x"}, exitUsage, "lpsctl: unknown command \"frobnicate\"\nRun 'lpsctl -h' for usage.\n"},
		{"typo", []string{"stauts"}, exitUsage, `unknown command "stauts"; did you mean "status"?`},
		{"typo-sub", []string{"rollout", "pasue", "x"}, exitUsage, `lpsctl rollout: unknown command "pasue"; did you mean "pause"?`},
		{"typo-flag", []string{"rollout", "set", "x", "--percnt", "5"}, exitUsage, "lpsctl rollout set: unknown flag --percnt; did you mean --percent?"},
		{"bad-percent", []string{"rollout", "set", "x", "--percent", "101"}, exitUsage, `lpsctl rollout set: --percent "101": want a whole number from 0 to 100`},
		{"bad-duration", []string{"release", "sign", "--valid-for", "30days"}, exitUsage, `lpsctl release sign: --valid-for "30days": want a duration such as`},
		{"single-dash", []string{"status", "-json"}, exitUsage, "lpsctl status: unknown flag -json; did you mean --json?"},
		{"blank-scope", []string{"rollout", "set", "x", "--subscriptions", " "}, exitUsage, `lpsctl rollout set: --subscriptions " ": no values: give a comma-separated list, or "" for all`},
		{"unknown-shell", []string{"completion", "bahs"}, exitUsage, `lpsctl completion: unknown command "bahs"; did you mean "bash"?`},
		{"help-unknown", []string{"help", "rollout", "pasue"}, exitUsage, `lpsctl help: unknown command "pasue"; did you mean "pause"?`},
		{"bad-output", []string{"status", "-o", "xml"}, exitUsage, `lpsctl status: -o "xml": want text, json or yaml`},
		{"json-and-yaml", []string{"status", "--json", "-o", "yaml"}, exitUsage, "--json and -o yaml disagree"},
		{"unknown-sub", []string{"rollout", "explode", "x"}, exitUsage, `lpsctl rollout: unknown command "explode"`},
		{"bad-flag", []string{"status", "--bogus"}, exitUsage, "lpsctl status: unknown flag --bogus\nRun 'lpsctl status -h' for usage.\n"},
		{"missing-version", append([]string{"rollout", "set", "--percent", "5"}, srv.conn()...), exitUsage, "lpsctl rollout set: missing argument VERSION"},
		{"nothing-to-set", append([]string{"rollout", "set", "--reason", "test", "202604.01.1"}, srv.conn()...), exitUsage, "nothing to change: give --percent, --subscriptions, --regions or --deploy-envs"},
		{"extra-arg", append([]string{"status", "extra"}, srv.conn()...), exitUsage, "unexpected arguments: extra"},
		{"no-server", []string{"status", "--server", "", "--token-file", srv.token}, exitUsage, "--server (or $LPSCTL_SERVER) is required"},
		{"no-credentials", []string{"status", "--server", srv.addr, "--token-file", ""}, exitUsage, "no credentials"},
		{"cert-without-key", append([]string{"status", "--cert", srv.cert}, tls...), exitUsage, "--cert and --key go together"},
		{"missing-token-file", append([]string{"status", "--token-file", missing}, tls...), exitError, "--token-file: open " + missing},
		{"ca-not-pem", []string{"status", "--server", srv.addr, "--ca", notPEM, "--token-file", srv.token}, exitError, "--ca " + notPEM + ": no PEM certificates"},
		{"wrong-token", append([]string{"status", "--token-file", wrongToken}, tls...), exitAuth, "invalid bearer token (Unauthenticated)"},
		{"untrusted-server", []string{"status", "--server", srv.addr, "--server-name", "localhost", "--token-file", srv.token}, exitError, "certificate signed by unknown authority"},
		{"unreachable", append([]string{"status", "--server", "127.0.0.1:1", "--timeout", "5s"}, srv.conn()[2:]...), exitError, "lpsd at 127.0.0.1:1: connection error"},
		{"not-found", append([]string{"rollout", "pause", "--reason", "test", "202604.01.9"}, srv.conn()...), exitNotFound, "not found (NotFound)"},
		{"bad-version", append([]string{"revoke", "--reason", "test", "nope"}, srv.conn()...), exitError, "InvalidArgument"},
		{"bad-envelope", append([]string{"release", "publish", "--reason", "test", "--envelope", garbage}, srv.conn()...), exitError, "--envelope " + garbage + ": verify release: malformed"},
		{"missing-envelope", append([]string{"release", "publish", "--reason", "test", "--envelope", missing}, srv.conn()...), exitError, "--envelope: open " + missing},
		{"explain-no-vm", append([]string{"explain", "--subscription", "s"}, srv.conn()...), exitUsage, "--vm-id is required"},
		{"explain-vm-not-guid", append([]string{"explain", "--vm-id", "not-a-guid", "--subscription", subA}, srv.conn()...), exitUsage, `--vm-id "not-a-guid": want a GUID`},
		{"explain-sub-not-guid", append([]string{"explain", "--vm-id", subA, "--subscription", "sub-a"}, srv.conn()...), exitUsage, `--subscription "sub-a": want a GUID`},
		{"audit-bad-limit", append([]string{"audit", "--limit", "0"}, srv.conn()...), exitUsage, `--limit "0": want a whole number from 1 to 1000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := lpsctl(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("lpsctl %v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut, tt.code, tt.stderr)
			}
		})
	}
	if entries, _ := srv.store.Audit(t.Context(), 0, 10); len(entries) != 0 {
		t.Errorf("failed commands left %d audit entries", len(entries))
	}
}

// TestEnvironmentDefaults cannot run in parallel: it sets the process
// environment.
func TestEnvironmentDefaults(t *testing.T) {
	srv := startServer(t)
	t.Setenv(envServer, srv.addr)
	t.Setenv(envTokenFile, srv.token)
	out := mustRun(t, "status", "--ca", srv.ca, "--server-name", "localhost")
	if !strings.Contains(out, "no releases") {
		t.Errorf("status from environment defaults:\n%s", out)
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"status", "-h"}, {"rollout", "set", "--help"}} {
		if _, _, code := lpsctl(t, args...); code != exitOK {
			t.Errorf("lpsctl %v: exit %d, want 0", args, code)
		}
	}
	if out := mustRun(t, "version"); out != version+"\n" {
		t.Errorf("version printed %q", out)
	}
}

func TestExitCodeTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for code, name := range map[int]string{exitOK: "0", exitError: "1", exitUsage: "2", exitRefused: "3", exitAuth: "4", exitNotFound: "5", exitConflict: "6"} {
		if !bytes.Contains(doc, []byte("\n\t"+name+"  ")) {
			t.Errorf("doc.go exit code table has no row for %d", code)
		}
	}
}

// sum returns the hex sha256 of s.
func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// verifyEnvelope checks an envelope file against a public key file.
func verifyEnvelope(t *testing.T, envFile, pubFile string) release.Release {
	t.Helper()
	pub, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := release.ParseKeySet(pub)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ks.Verify(env, time.Now())
	if err != nil {
		t.Fatalf("verify %s with %s: %v", envFile, pubFile, err)
	}
	return r
}

func TestListFlag(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{"a, b,,c": {"a", "b", "c"}, "": nil} {
		var l listFlag
		if err := l.Set(in); err != nil || !l.set || !cmp.Equal(l.vals, want, cmpopts.EquateEmpty()) {
			t.Errorf("Set(%q) = %v (set %v, err %v), want %v", in, l.vals, l.set, err, want)
		}
	}
	// Blank lists are refused: only "" means all (an unset variable in a
	// script must not widen a scope to every node).
	for _, in := range []string{" ", ",", " , "} {
		var l listFlag
		if err := l.Set(in); err == nil {
			t.Errorf("Set(%q) = %v, want an error", in, l.vals)
		}
	}
	// Repeats add up.
	var l listFlag
	for _, in := range []string{"a", "b,c"} {
		if err := l.Set(in); err != nil {
			t.Fatal(err)
		}
	}
	if !cmp.Equal(l.vals, []string{"a", "b", "c"}) {
		t.Errorf("repeated Set = %v, want a b c", l.vals)
	}
}

// TestWhy: an automatic change's audit line carries its verdict, quoted;
// an operator's, or evidence that does not decode, adds nothing.
func TestWhy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`{"verdict":{"verdict":"regressing","rule":"ceiling","detail":"failure rate 50.0% (10/20)"}}`, " (regressing: failure rate 50.0% (10/20))"},
		{`{"verdict":{"verdict":"regressing","detail":"bad\u001b[2J"}}`, ` (regressing: "bad\x1b[2J")`},
		{"", ""},
		{"{not json", ""},
	} {
		if got := why(tt.in); got != tt.want {
			t.Errorf("why(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
