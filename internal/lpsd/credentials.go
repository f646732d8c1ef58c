package lpsd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/lps/admin"
)

// The credentials lpsd loads at start and again on every SIGHUP; the values
// of lpsd_reload_failures_total's what label.
const (
	credNode   = "node-certificate"  // --tls-cert, --tls-key
	credAdmin  = "admin-certificate" // --admin-tls-cert, --admin-tls-key (default the node's)
	credTokens = "admin-tokens"      // --admin-token-file
)

// credentialNames are the credentials in the order they load and are
// reported.
var credentialNames = []string{credNode, credAdmin, credTokens}

// maxTokenFile caps --admin-token-file (the parser takes 64 KiB of it).
const maxTokenFile = 1 << 20

// credentialSet is one reading of the credential files.
type credentialSet struct {
	node, admin tls.Certificate
	// tokens is nil without --admin-token-file.
	tokens []admin.Token
	// failed says why each credential that did not load failed, keyed by
	// credNode, credAdmin or credTokens; its value is then the zero value.
	failed map[string]error
}

// err returns the first failure, in load order, or nil.
func (c credentialSet) err() error {
	for _, name := range credentialNames {
		if err := c.failed[name]; err != nil {
			return err
		}
	}
	return nil
}

// loadCredentials reads the certificates and the admin token file that o
// names, the same way at start and on SIGHUP: a certificate outside its
// validity period at now is refused (one later in its chain file is warned
// about). A token file whose
// last line lacks its newline, which a file caught mid-write does, is
// refused on a reload, where the tokens in use stay; at start it is warned
// about and loads, since there is nothing older to keep and a file written
// without one (a Secret from --from-literal) must not stop lpsd after an
// upgrade. A key or token file that others could read or rewrite, itself or
// through a symlink, is warned about on log and loads anyway. Whether the
// node certificate covers the server name is lps.Server's check.
func loadCredentials(o options, now time.Time, reload bool, log *slog.Logger) credentialSet {
	c := credentialSet{failed: make(map[string]error)}
	var err error
	var warnings []string
	if c.node, warnings, err = loadCertificate(o.tlsCert, o.tlsKey, now); err != nil {
		c.failed[credNode] = fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	for _, w := range warnings {
		log.Warn("--tls-cert: " + w)
	}
	checkSecretFile(log, "--tls-key", o.tlsKey)
	switch {
	case o.adminCert != "" || o.adminKey != "":
		if c.admin, warnings, err = loadCertificate(o.adminCert, o.adminKey, now); err != nil {
			c.failed[credAdmin] = fmt.Errorf("--admin-tls-cert/--admin-tls-key: %w", err)
		}
		for _, w := range warnings {
			log.Warn("--admin-tls-cert: " + w)
		}
		checkSecretFile(log, "--admin-tls-key", o.adminKey)
	case c.failed[credNode] != nil:
		c.failed[credAdmin] = c.failed[credNode]
	default:
		c.admin = c.node
	}
	if o.adminTokens != "" {
		var whole bool
		c.tokens, whole, err = loadTokens(o.adminTokens)
		switch {
		case err != nil:
			c.failed[credTokens] = err
		case !whole && reload:
			c.tokens, c.failed[credTokens] = nil, fmt.Errorf("--admin-token-file %s: the last line does not end in a newline, so the file may be caught mid-write; keeping the tokens in use: write it whole (to a temporary file, then rename it over) ending in a newline", o.adminTokens)
		case !whole:
			log.Warn("--admin-token-file: the last line does not end in a newline; a reload of such a file is refused as caught mid-write, so end it in one", "path", o.adminTokens)
		}
		for _, t := range c.tokens {
			if t.Expired(now) {
				log.Warn("--admin-token-file: a token has expired and is refused; remove its line or give it a later expiry", "name", t.Name, "expired", t.Expires.UTC().Format(time.RFC3339))
			}
		}
		checkSecretFile(log, "--admin-token-file", o.adminTokens)
	}
	return c
}

// notYetValidSkew is how far ahead of this machine's clock a certificate's
// start may be: issuers backdate by about that, and clocks drift.
const notYetValidSkew = 5 * time.Minute

// loadCertificate loads a key pair and refuses it when its leaf is outside
// its validity period at now (nodes and lpsctl would refuse the handshake),
// allowing notYetValidSkew for a start just ahead. A certificate later in
// the chain file that is outside its period is a warning: clients may
// build their path around it.
func loadCertificate(certFile, keyFile string, now time.Time) (tls.Certificate, []string, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	var warnings []string
	for i, der := range c.Certificate {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("%s: certificate %d of the chain: %w", certFile, i+1, err)
		}
		if i == 0 && c.Leaf == nil {
			c.Leaf = cert
		}
		var problem string
		switch {
		case now.After(cert.NotAfter):
			problem = fmt.Sprintf("expired at %s: renew it", cert.NotAfter.UTC().Format(time.RFC3339))
		case now.Add(notYetValidSkew).Before(cert.NotBefore):
			problem = fmt.Sprintf("is not valid until %s: check the clock, or issue it with an earlier start", cert.NotBefore.UTC().Format(time.RFC3339))
		default:
			continue
		}
		if i == 0 {
			return tls.Certificate{}, nil, fmt.Errorf("%s: the certificate %s", certFile, problem)
		}
		warnings = append(warnings, fmt.Sprintf("%s: certificate %d of the chain (%q) %s", certFile, i+1, cert.Subject.CommonName, problem))
	}
	return c, warnings, nil
}

// loadTokens reads and parses the admin token file, and says whether it
// ends in a newline. An editor or a shell redirect writes in place: a
// reload can see the file cut anywhere, the last token cut short but
// well-formed, and only the missing newline tells.
func loadTokens(path string) (tokens []admin.Token, whole bool, err error) {
	data, err := capfile.Read(path, maxTokenFile)
	if err != nil {
		return nil, false, fmt.Errorf("--admin-token-file: %w", err)
	}
	tokens, err = admin.ParseTokens(data)
	if err != nil {
		return nil, false, fmt.Errorf("--admin-token-file %s: %w", path, err)
	}
	return tokens, len(data) > 0 && data[len(data)-1] == '\n', nil
}

// checkSecretFile warns when the file at path (a symlink's target) is
// readable by others than its owner, or owned by someone other than root or
// lpsd's own user, who could rewrite it.
func checkSecretFile(log *slog.Logger, flag, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	attrs := []any{"flag", flag, "path", path}
	if target, err := filepath.EvalSymlinks(path); err == nil && target != path {
		attrs = append(attrs, "target", target)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		log.Warn("secret file readable by its group or others; chmod 600 it", append(attrs, "mode", fi.Mode().Perm().String())...)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		log.Warn("secret file owned by another user, who can rewrite it; chown it to root or lpsd's user", append(attrs, "uid", st.Uid, "lpsdUID", os.Geteuid())...)
	}
}

// reloadMetrics count the credential loads.
type reloadMetrics struct {
	failures    *prometheus.CounterVec
	successful  prometheus.Gauge
	lastSuccess prometheus.Gauge
	notAfter    *prometheus.GaugeVec
	tokenExpiry *prometheus.GaugeVec
}

func newReloadMetrics(register func(prometheus.Collector)) *reloadMetrics {
	m := &reloadMetrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lpsd_reload_failures_total",
			Help: "SIGHUP reloads that kept a credential's current value because its files failed to load (unreadable, expired or not yet valid, a token file caught mid-write), by credential: node-certificate, admin-certificate, admin-tokens.",
		}, []string{"what"}),
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_reload_successful",
			Help: "1 when the last load of the credentials (at start or on SIGHUP) loaded every one, else 0.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lpsd_reload_last_success_timestamp_seconds",
			Help: "When the credentials last all loaded (at start or on SIGHUP), in Unix seconds.",
		}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lpsd_certificate_not_after_timestamp_seconds",
			Help: "When the certificate in use expires, in Unix seconds, by listener (node, admin). Alert on it minus time(); renew the files and send SIGHUP.",
		}, []string{"listener"}),
		tokenExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lpsd_admin_token_expiry_timestamp_seconds",
			Help: "When each admin token in use that has an expiry (the fourth field of its --admin-token-file line) is refused from, in Unix seconds, by its name; tokens without one are not listed. Alert on it minus time(); give the line a later expiry (or a new token) and send SIGHUP.",
		}, []string{"name"}),
	}
	for _, name := range credentialNames {
		m.failures.WithLabelValues(name)
	}
	for _, c := range []prometheus.Collector{m.failures, m.successful, m.lastSuccess, m.notAfter, m.tokenExpiry} {
		register(c)
	}
	return m
}

// loaded records a load at now: failed, the credentials that did not load
// (each counted when reload is set), and inUse, the certificates swapped in
// by listener (node, admin).
func (m *reloadMetrics) loaded(now time.Time, failed []string, reload bool, inUse map[string]tls.Certificate) {
	if reload {
		for _, name := range failed {
			m.failures.WithLabelValues(name).Inc()
		}
	}
	m.successful.Set(0)
	if len(failed) == 0 {
		m.successful.Set(1)
		m.lastSuccess.Set(float64(now.Unix()))
	}
	for listener, c := range inUse {
		m.notAfter.WithLabelValues(listener).Set(float64(c.Leaf.NotAfter.Unix()))
	}
}

// tokensInUse records the expiries of the admin tokens swapped in, by name,
// forgetting those of the tokens they replaced.
func (m *reloadMetrics) tokensInUse(tokens []admin.Token) {
	m.tokenExpiry.Reset()
	for _, t := range tokens {
		if !t.Expires.IsZero() {
			m.tokenExpiry.WithLabelValues(t.Name).Set(float64(t.Expires.Unix()))
		}
	}
}
