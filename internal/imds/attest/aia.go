package attest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

const (
	// aiaFetchTimeout bounds one intermediate fetch, redirects included; the
	// caller's ctx may cut it shorter.
	aiaFetchTimeout = 5 * time.Second
	// maxAIABytes caps an intermediate response: one certificate is ~2 KiB.
	maxAIABytes = 64 << 10
	// maxAIARedirects is how many redirects a fetch may follow, each to an
	// allowlisted host.
	maxAIARedirects = 3
	// maxConcurrentFetches bounds the outbound fetches documents can trigger.
	maxConcurrentFetches = 2
	// maxCachedIntermediates bounds the cache; only intermediates that
	// completed a chain to a pinned root get in, so it stays tiny.
	maxCachedIntermediates = 32
)

// intermediates is the untrusted pool offered to chain building: configured
// certificates plus intermediates fetched from AIA URLs, cached by URL once
// they completed a verified chain. Safe for concurrent use.
type intermediates struct {
	configured []*x509.Certificate
	hosts      map[string]bool // allowed AIA hosts, host or host:port, lower case
	client     *http.Client    // nil: fetching disabled
	sem        chan struct{}

	mu    sync.Mutex
	byURL map[string]*x509.Certificate
	order []string       // URLs in insertion order, for eviction
	pool  *x509.CertPool // configured ∪ byURL; replaced, never mutated, once published
}

func newIntermediates(configured []*x509.Certificate, hosts []string, rt http.RoundTripper, fetch bool) *intermediates {
	in := &intermediates{
		configured: configured,
		hosts:      make(map[string]bool, len(hosts)),
		sem:        make(chan struct{}, maxConcurrentFetches),
		byURL:      make(map[string]*x509.Certificate),
	}
	for _, h := range hosts {
		in.hosts[strings.ToLower(h)] = true
	}
	if fetch {
		if rt == nil {
			rt = defaultTransport()
		}
		in.client = &http.Client{
			Transport: rt,
			Timeout:   aiaFetchTimeout,
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) > maxAIARedirects {
					return errors.New("too many redirects")
				}
				if !in.allowed(req.URL) {
					return fmt.Errorf("redirect to %s: host not allowed", req.URL.Redacted())
				}
				return nil
			},
		}
	}
	in.rebuildPool()
	return in
}

// defaultTransport is used when Config.AIATransport is nil. It ignores proxy
// environment variables: only cmd/ reads the environment, and it can inject
// a transport with a proxy.
func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: aiaFetchTimeout}).DialContext,
		TLSHandshakeTimeout:   aiaFetchTimeout,
		ResponseHeaderTimeout: aiaFetchTimeout,
		DisableCompression:    true,
		MaxIdleConns:          2,
		IdleConnTimeout:       time.Minute,
	}
}

// current returns the pool to verify with. Callers must not modify it.
func (in *intermediates) current() *x509.CertPool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pool
}

// rebuildPool publishes a new pool; in.mu must be held or in not yet shared.
func (in *intermediates) rebuildPool() {
	pool := x509.NewCertPool()
	for _, c := range in.configured {
		pool.AddCert(c)
	}
	for _, u := range in.order {
		pool.AddCert(in.byURL[u])
	}
	in.pool = pool
}

// cached returns the intermediate cached for rawURL if it is valid at now.
func (in *intermediates) cached(rawURL string, now time.Time) *x509.Certificate {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.byURL[rawURL]
	if c == nil || now.Before(c.NotBefore) || now.After(c.NotAfter) {
		return nil
	}
	return c
}

// add caches c, which completed a verified chain, under rawURL.
func (in *intermediates) add(rawURL string, c *x509.Certificate) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.byURL[rawURL]; !ok {
		if len(in.order) >= maxCachedIntermediates {
			delete(in.byURL, in.order[0])
			in.order = in.order[1:]
		}
		in.order = append(in.order, rawURL)
	}
	in.byURL[rawURL] = c
	in.rebuildPool()
}

// issuerURL returns the first of leaf's AIA CA Issuers URLs that is on an
// allowed host, or "" if fetching is disabled or no URL is allowed.
func (in *intermediates) issuerURL(leaf *x509.Certificate) string {
	if in.client == nil {
		return ""
	}
	for _, raw := range leaf.IssuingCertificateURL {
		if u, err := url.Parse(raw); err == nil && in.allowed(u) {
			return raw
		}
	}
	return ""
}

// allowed reports whether u may be fetched: http or https, no user info, and
// a host (with its port, if any) on the allowlist.
func (in *intermediates) allowed(u *url.URL) bool {
	return (u.Scheme == "http" || u.Scheme == "https") && u.User == nil && in.hosts[strings.ToLower(u.Host)]
}

// fetch returns the certificate at rawURL, from the cache if another request
// fetched it meanwhile. Concurrent fetches are bounded; waiting respects ctx.
func (in *intermediates) fetch(ctx context.Context, rawURL string, now time.Time) (*x509.Certificate, error) {
	select {
	case in.sem <- struct{}{}:
		defer func() { <-in.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c := in.cached(rawURL, now); c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, aiaFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := in.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: status %d", req.URL.Redacted(), resp.StatusCode)
	}
	if resp.ContentLength > maxAIABytes {
		return nil, fmt.Errorf("get %s: body of %d bytes exceeds %d", req.URL.Redacted(), resp.ContentLength, maxAIABytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAIABytes+1))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", req.URL.Redacted(), err)
	}
	if len(body) > maxAIABytes {
		return nil, fmt.Errorf("get %s: body exceeds %d bytes", req.URL.Redacted(), maxAIABytes)
	}
	c, err := parseIntermediate(body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", req.URL.Redacted(), err)
	}
	return c, nil
}

// parseIntermediate parses one CA certificate in DER or PEM.
func parseIntermediate(body []byte) (*x509.Certificate, error) {
	var certs []*x509.Certificate
	var err error
	if strings.HasPrefix(strings.TrimSpace(string(body[:min(len(body), 64)])), "-----BEGIN") {
		certs, err = ParseCertificatesPEM(body)
	} else {
		var c *x509.Certificate
		c, err = x509.ParseCertificate(body)
		certs = []*x509.Certificate{c}
	}
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%d certificates, want 1", len(certs))
	}
	if !certs[0].BasicConstraintsValid || !certs[0].IsCA {
		return nil, errors.New("not a CA certificate")
	}
	return certs[0], nil
}
