package lpsd

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
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/test/harness"
)

// mintPair writes a self-signed certificate for the service name, valid
// from notBefore to notAfter, and its key into dir as name.crt and
// name.key (0600), and returns their paths.
func mintPair(t *testing.T, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		DNSNames:  []string{harness.ServiceName, "localhost"},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestLoadCredentials: the one loader of start and SIGHUP refuses
// certificates outside their validity period and token files caught
// mid-write, each credential on its own, and warns about secret files
// others can read or rewrite (through a symlink too) while loading them.
func TestLoadCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	goodCert, goodKey := mintPair(t, dir, "good", now.Add(-time.Hour), now.Add(24*time.Hour))
	expiredCert, expiredKey := mintPair(t, dir, "expired", now.Add(-48*time.Hour), now.Add(-time.Hour))
	futureCert, futureKey := mintPair(t, dir, "future", now.Add(time.Hour), now.Add(48*time.Hour))
	soonCert, soonKey := mintPair(t, dir, "soon", now.Add(time.Minute), now.Add(48*time.Hour))
	// A valid leaf whose chain file also carries an expired certificate.
	chainCert := filepath.Join(dir, "chain.crt")
	writeFile(t, chainCert, append(mustRead(t, goodCert), mustRead(t, expiredCert)...), 0o600)
	token := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, []byte(content), mode)
		return path
	}
	const ops = "ops:0123456789abcdef0123\n"
	good := token("tokens", ops, 0o600)
	loose := token("loose-tokens", ops, 0o644)
	link := filepath.Join(dir, "linked-tokens")
	if err := os.Symlink(loose, link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		o    options
		// fail maps each credential that must fail to a part of its error.
		fail map[string]string
		// warn is a part of a warning the load must log; empty: none.
		warn string
		// start loads as at start; otherwise as on a reload.
		start bool
	}{
		{name: "good", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: good}},
		{name: "node-expired", o: options{tlsCert: expiredCert, tlsKey: expiredKey, adminTokens: good},
			fail: map[string]string{credNode: "expired at", credAdmin: "expired at"}},
		{name: "node-not-yet-valid", o: options{tlsCert: futureCert, tlsKey: futureKey},
			fail: map[string]string{credNode: "not valid until", credAdmin: "not valid until"}},
		{name: "admin-expired", o: options{tlsCert: goodCert, tlsKey: goodKey, adminCert: expiredCert, adminKey: expiredKey},
			fail: map[string]string{credAdmin: "--admin-tls-cert/--admin-tls-key: " + expiredCert + ": the certificate expired at"}},
		// A client may build its path around a stale certificate later in
		// the file: a warning, not a refusal.
		{name: "chain-expired", o: options{tlsCert: chainCert, tlsKey: goodKey},
			warn: `certificate 2 of the chain (\"expired\") expired at`},
		// Issuers backdate a little and clocks drift: a start a minute
		// ahead loads.
		{name: "node-starts-in-a-minute", o: options{tlsCert: soonCert, tlsKey: soonKey}},
		{name: "key-mismatch", o: options{tlsCert: goodCert, tlsKey: expiredKey},
			fail: map[string]string{credNode: "--tls-cert/--tls-key: ", credAdmin: "--tls-cert"}},
		{name: "tokens-no-final-newline", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("cut-at-end", strings.TrimSuffix(ops, "\n"), 0o600)},
			fail: map[string]string{credTokens: "may be caught mid-write"}},
		// At start there is nothing older to keep: such a file (a Secret
		// from --from-literal) loads, with a warning.
		{name: "tokens-no-final-newline-at-start", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("no-newline", strings.TrimSuffix(ops, "\n"), 0o600)},
			start: true, warn: "does not end in a newline"},
		// The second token cut short is still well-formed: only the
		// missing newline shows the file is not whole.
		{name: "tokens-partial-token", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("cut-mid-token", ops+"new:fedcba9876543210", 0o600)},
			fail: map[string]string{credTokens: "may be caught mid-write"}},
		{name: "tokens-empty", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("empty", "", 0o600)},
			fail: map[string]string{credTokens: "no tokens"}},
		{name: "tokens-missing", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: filepath.Join(dir, "nope")},
			fail: map[string]string{credTokens: "--admin-token-file: "}},
		// An expiry that does not parse is refused at start and on a
		// reload alike (where the tokens in use stay), naming the line.
		{name: "tokens-malformed-expiry", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("bad-expiry", "ops:operator:0123456789abcdef0123:2026-13-01\n", 0o600)},
			fail: map[string]string{credTokens: "line 1: expiry: want RFC 3339"}},
		{name: "tokens-malformed-expiry-at-start", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("bad-expiry-start", "ops:operator:0123456789abcdef0123:tomorrow\n", 0o600)},
			start: true, fail: map[string]string{credTokens: "line 1: expiry: want RFC 3339"}},
		// An expiry without its role: the token would be read as a role,
		// and is never echoed.
		{name: "tokens-expiry-without-role", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("no-role", "ops:0123456789abcdef0123:2030-01-01\n", 0o600)},
			fail: map[string]string{credTokens: "line 1: the second field is not a role"}},
		// A token already past its expiry loads (it is refused on use),
		// with a warning naming it.
		{name: "tokens-expired", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: token("expired-token", "ops:reader:0123456789abcdef0123:2020-01-01\n", 0o600)},
			warn: "a token has expired and is refused"},
		{name: "tokens-group-readable", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: loose}, warn: "readable by its group or others"},
		{name: "tokens-symlink-to-loose-file", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: link}, warn: "target=" + loose},
	}
	if os.Geteuid() == 0 {
		owned := token("owned-tokens", ops, 0o600)
		if err := os.Chown(owned, 1234, 1234); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct {
			name  string
			o     options
			fail  map[string]string
			warn  string
			start bool
		}{name: "tokens-other-owner", o: options{tlsCert: goodCert, tlsKey: goodKey, adminTokens: owned}, warn: "owned by another user"})
	} else {
		t.Log("not root: the other-owner case is not run")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log bytes.Buffer
			c := loadCredentials(tt.o, now, !tt.start, slog.New(slog.NewTextHandler(&log, nil)))
			for _, name := range credentialNames {
				err, want := c.failed[name], tt.fail[name]
				switch {
				case want == "" && err != nil:
					t.Errorf("%s: %v, want it loaded", name, err)
				case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
					t.Errorf("%s: %v, want an error containing %q", name, err, want)
				}
			}
			if len(tt.fail) == 0 && (c.node.Leaf == nil || len(c.admin.Certificate) == 0 || (tt.o.adminTokens != "" && len(c.tokens) != 1)) {
				t.Errorf("loaded %+v, want both certificates and one token", c)
			}
			if got := log.String(); tt.warn == "" && got != "" || !strings.Contains(got, tt.warn) {
				t.Errorf("log = %q, want a warning containing %q", got, tt.warn)
			}
			for _, err := range c.failed {
				if strings.Contains(err.Error(), "0123456789abcdef0123") {
					t.Errorf("error %q reveals the token", err)
				}
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRunRefusesCertificateOutsideItsValidity: an expired or not yet valid
// node or admin certificate is a startup error naming the file.
func TestRunRefusesCertificateOutsideItsValidity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	goodCert, goodKey := mintPair(t, dir, "good", now.Add(-time.Hour), now.Add(24*time.Hour))
	expiredCert, expiredKey := mintPair(t, dir, "expired", now.Add(-48*time.Hour), now.Add(-time.Hour))
	futureCert, futureKey := mintPair(t, dir, "future", now.Add(time.Hour), now.Add(48*time.Hour))
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, []byte("ops:0123456789abcdef0123\n"), 0o600)
	for name, tt := range map[string]struct {
		args []string
		want string
	}{
		"node-expired":       {[]string{"--tls-cert", expiredCert, "--tls-key", expiredKey}, "--tls-cert/--tls-key: " + expiredCert + ": the certificate expired at"},
		"node-not-yet-valid": {[]string{"--tls-cert", futureCert, "--tls-key", futureKey}, "is not valid until"},
		"admin-expired":      {[]string{"--tls-cert", goodCert, "--tls-key", goodKey, "--admin-tls-cert", expiredCert, "--admin-tls-key", expiredKey}, "--admin-tls-cert/--admin-tls-key: " + expiredCert},
	} {
		var errOut bytes.Buffer
		args := append(tt.args, "--admin-token-file", tokens, "--store", "mem:", "--drain-delay", "0s",
			"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
		// Should lpsd start after all, it stops here rather than serve on.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		code := run(ctx, args, io.Discard, &errOut)
		cancel()
		if code != 1 || strings.Count(errOut.String(), tt.want) != 1 {
			t.Errorf("%s: run = %d, stderr %q; want 1 mentioning %q once", name, code, errOut.String(), tt.want)
		}
	}
}

// TestRunReloadRefusesBadCredentials: on SIGHUP an expired or not yet valid
// certificate, and a token file caught mid-write, keep the values in force,
// each counted in lpsd_reload_failures_total; a token file made readable by
// others through a symlink is warned about on reload as at start. The next
// good reload swaps everything in and the gauges follow.
func TestRunReloadRefusesBadCredentials(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cert, key := filepath.Join(dir, "lps.crt"), filepath.Join(dir, "lps.key")
	install := func(name string, notBefore, notAfter time.Time) {
		c, k := mintPair(t, dir, name, notBefore, notAfter)
		writeFile(t, cert, mustRead(t, c), 0o600)
		writeFile(t, key, mustRead(t, k), 0o600)
	}
	install("first", now.Add(-time.Hour), now.Add(24*time.Hour))
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, []byte("old:0123456789abcdef0123\n"), 0o600)
	r := start(t, "--tls-cert", cert, "--tls-key", key, "--admin-token-file", tokens, "--store", "mem:", "--drain-delay", "0s")
	leaf := func() []byte {
		conn, err := tls.Dial("tcp", r.addrs.GRPC, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	if got := r.metric(t, "lpsd_reload_successful"); got != 1 {
		t.Errorf("lpsd_reload_successful at start = %v, want 1", got)
	}
	started := r.metric(t, "lpsd_reload_last_success_timestamp_seconds")
	before := leaf()
	hup := func() { syscall.Kill(os.Getpid(), syscall.SIGHUP) }

	install("expired", now.Add(-48*time.Hour), now.Add(-time.Hour))
	hup()
	r.waitMetric(t, `lpsd_reload_failures_total{what="node-certificate"}`, 1)
	install("future", now.Add(time.Hour), now.Add(48*time.Hour))
	hup()
	r.waitMetric(t, `lpsd_reload_failures_total{what="node-certificate"}`, 2)
	if !bytes.Equal(leaf(), before) {
		t.Error("the node listener presents another certificate after failed reloads")
	}
	if got := r.metric(t, `lpsd_reload_failures_total{what="admin-certificate"}`); got != 2 {
		t.Errorf("admin-certificate failures = %v, want 2 (it is the node certificate)", got)
	}
	if got := r.metric(t, "lpsd_reload_successful"); got != 0 {
		t.Errorf("lpsd_reload_successful after a failed reload = %v, want 0", got)
	}

	// The new line is cut short: "new" must not be let in, nor "old" out.
	install("second", now.Add(-time.Hour), now.Add(48*time.Hour))
	writeFile(t, tokens, []byte("new:fedcba9876543210fedc\nnext:0011223344556677"), 0o600)
	hup()
	r.waitMetric(t, `lpsd_reload_failures_total{what="admin-tokens"}`, 1)
	if err := r.status(t, "0123456789abcdef0123"); err != nil {
		t.Errorf("the token in force after a mid-write reload: %v", err)
	}
	if err := r.status(t, "fedcba9876543210fedc"); err == nil {
		t.Error("a token of the file caught mid-write was accepted")
	}
	if bytes.Equal(leaf(), before) {
		t.Error("the new certificate was not swapped in beside the failed token file")
	}

	loose := filepath.Join(dir, "loose-tokens")
	writeFile(t, loose, []byte("new:fedcba9876543210fedc\n"), 0o644)
	if err := os.Remove(tokens); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(loose, tokens); err != nil {
		t.Fatal(err)
	}
	hup()
	r.waitMetric(t, "lpsd_reload_successful", 1)
	if err := r.status(t, "fedcba9876543210fedc"); err != nil {
		t.Errorf("the new token after a good reload: %v", err)
	}
	if !strings.Contains(r.log.String(), `"msg":"secret file readable by its group or others; chmod 600 it","flag":"--admin-token-file","path":"`+tokens+`","target":"`+loose+`"`) {
		t.Errorf("the reload did not warn about the group-readable token file behind the symlink:\n%s", r.log.String())
	}
	if got := r.metric(t, "lpsd_reload_last_success_timestamp_seconds"); got < started {
		t.Errorf("lpsd_reload_last_success_timestamp_seconds = %v, want at least %v", got, started)
	}
	want := float64(now.Add(48 * time.Hour).Unix())
	for _, listener := range []string{"node", "admin"} {
		if got := r.metric(t, `lpsd_certificate_not_after_timestamp_seconds{listener="`+listener+`"}`); got != want {
			t.Errorf("%s certificate's not-after = %v, want %v", listener, got, want)
		}
	}
	for what, n := range map[string]float64{"node-certificate": 2, "admin-certificate": 2, "admin-tokens": 1} {
		if got := r.metric(t, `lpsd_reload_failures_total{what="`+what+`"}`); got != n {
			t.Errorf("%s failures = %v, want %v", what, got, n)
		}
	}
}

// TestRunAdminTokenExpiry: a token past its expiry is refused on every
// call with a message naming it and when it expired, never the token; each
// token's expiry is a metric by name; a reload with an expiry that does not
// parse keeps the tokens in use (and their metric), and a good one swaps in
// the new expiries.
func TestRunAdminTokenExpiry(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cert, key := mintPair(t, dir, "lps", now.Add(-time.Hour), now.Add(24*time.Hour))
	const live, dead = "0123456789abcdef0123", "fedcba9876543210fedc"
	later := now.Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, []byte("ops:operator:"+live+":"+later.Format(time.RFC3339)+"\nold:reader:"+dead+":2020-01-01\n"), 0o600)
	r := start(t, "--tls-cert", cert, "--tls-key", key, "--admin-token-file", tokens, "--store", "mem:", "--drain-delay", "0s")

	if err := r.status(t, live); err != nil {
		t.Errorf("a token before its expiry: %v", err)
	}
	err := r.status(t, dead)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), `admin token "old" expired at 2020-01-01T00:00:00Z`) || strings.Contains(err.Error(), dead) {
		t.Errorf("an expired token: %v; want Unauthenticated naming token \"old\" and its expiry, not the token", err)
	}
	if got := r.metric(t, `lpsd_admin_token_expiry_timestamp_seconds{name="ops"}`); got != float64(later.Unix()) {
		t.Errorf("ops's expiry metric = %v, want %v", got, later.Unix())
	}
	if got := r.metric(t, `lpsd_admin_token_expiry_timestamp_seconds{name="old"}`); got != float64(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Unix()) {
		t.Errorf("old's expiry metric = %v", got)
	}
	hup := func() { syscall.Kill(os.Getpid(), syscall.SIGHUP) }

	writeFile(t, tokens, []byte("ops:operator:"+live+":someday\n"), 0o600)
	hup()
	r.waitMetric(t, `lpsd_reload_failures_total{what="admin-tokens"}`, 1)
	if err := r.status(t, live); err != nil {
		t.Errorf("the token in use after a reload refused for its expiry: %v", err)
	}
	if got := r.metric(t, `lpsd_admin_token_expiry_timestamp_seconds{name="ops"}`); got != float64(later.Unix()) {
		t.Errorf("ops's expiry metric after a refused reload = %v, want it kept", got)
	}

	writeFile(t, tokens, []byte("ops:operator:"+live+":2021-06-01T12:00:00+02:00\nnew:"+dead+"\n"), 0o600)
	hup()
	r.waitMetric(t, "lpsd_reload_successful", 1)
	if err := r.status(t, live); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), `admin token "ops" expired at 2021-06-01T10:00:00Z`) {
		t.Errorf("a token a reload gave a past expiry: %v", err)
	}
	if err := r.status(t, dead); err != nil {
		t.Errorf("a token without an expiry: %v", err)
	}
	if _, ok := r.scrape(t, `lpsd_admin_token_expiry_timestamp_seconds{name="old"}`); ok {
		t.Error("the metric keeps the expiry of a token the reload removed")
	}
	if _, ok := r.scrape(t, `lpsd_admin_token_expiry_timestamp_seconds{name="new"}`); ok {
		t.Error("the metric lists a token without an expiry")
	}
}

// metric returns the value of one series on lpsd's /metrics, or fails.
func (r *running) metric(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := r.scrape(t, series)
	if !ok {
		t.Fatalf("/metrics has no %s", series)
	}
	return v
}

func (r *running) scrape(t *testing.T, series string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + r.addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// waitMetric waits, at most 15 s, for a series to reach want.
func (r *running) waitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v, _ := r.scrape(t, series); v == want {
			return
		}
		if time.Now().After(deadline) {
			v, _ := r.scrape(t, series)
			t.Fatalf("%s = %v, never %v:\n%s", series, v, want, r.log.String())
		}
	}
}
