package fetch

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	dialTimeout           = 10 * time.Second
	tlsHandshakeTimeout   = 10 * time.Second
	responseHeaderTimeout = 10 * time.Second
	// idleConnTimeout only matters between the hops of one download; a
	// provisioning node downloads one artifact and exits.
	idleConnTimeout = 30 * time.Second
	// defaultStallTimeout is generous for a healthy CDN, which delivers
	// bytes continuously, and far under the hotfix phase's overall budget.
	defaultStallTimeout = 30 * time.Second
	maxRedirects        = 5
	// maxHeaderBytes bounds response headers; an artifact response needs a
	// few hundred bytes of them.
	maxHeaderBytes = 64 << 10
)

// Config holds the optional settings of a Client. The zero Config trusts the
// system roots and uses the default stall timeout.
type Config struct {
	// ExtraRootsPEM is PEM text of CA certificates trusted in addition to
	// the system roots, e.g. the content of --artifact-ca. Nil: system roots
	// only. Non-nil text without a certificate is an error.
	ExtraRootsPEM []byte
	// StallTimeout aborts a download when no body byte has arrived for this
	// long. Zero: 30 s.
	StallTimeout time.Duration
}

// Client downloads artifacts over https. It is safe for concurrent use.
type Client struct {
	http  *http.Client
	stall time.Duration
}

// New returns a Client that speaks only https, ignores proxy settings, never
// negotiates compression and re-checks the URL policy on every redirect hop.
func New(cfg Config) (*Client, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("load system roots: %w", err)
	}
	if cfg.ExtraRootsPEM != nil {
		if err := appendRoots(roots, cfg.ExtraRootsPEM); err != nil {
			return nil, err
		}
	}
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		// No proxy: environment variables must not redirect the download.
		Proxy:                  nil,
		DialContext:            d.DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		ResponseHeaderTimeout:  responseHeaderTimeout,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
		// Transparent gzip would inflate bytes before they are counted and
		// hashed; the artifact is verified as served.
		DisableCompression: true,
		ForceAttemptHTTP2:  true,
	}
	stall := cfg.StallTimeout
	if stall == 0 {
		stall = defaultStallTimeout
	}
	return &Client{
		http:  &http.Client{Transport: tr, CheckRedirect: checkRedirect},
		stall: stall,
	}, nil
}

// appendRoots adds every certificate in pemText to pool. Unlike
// CertPool.AppendCertsFromPEM it rejects a malformed certificate instead of
// skipping it, so a broken --artifact-ca file is noticed.
func appendRoots(pool *x509.CertPool, pemText []byte) error {
	n := 0
	for rest := pemText; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("parse extra root %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return errors.New("parse extra roots: no PEM certificate found")
	}
	return nil
}

// checkRedirect applies the URL policy to every hop before it is requested.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return &VerifyError{Reason: ReasonRedirect, Detail: fmt.Sprintf("more than %d redirects", maxRedirects)}
	}
	if err := checkURL(req.URL); err != nil {
		return &VerifyError{Reason: ReasonRedirect, Detail: fmt.Sprintf("to %s: %s", redact(req.URL), err)}
	}
	return nil
}

// checkURL is the URL policy: https with a host and no user info.
func checkURL(u *url.URL) error {
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("scheme %q is not https", u.Scheme)
	case u.User != nil:
		return errors.New("user info is not allowed")
	case u.Host == "":
		return errors.New("no host")
	}
	return nil
}

// Redact returns the URL raw without user info, query or fragment, for logs
// and operator text: artifact URLs may carry an access token in the query.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Cut at the first query or fragment marker all the same.
		if i := strings.IndexAny(raw, "?#"); i >= 0 {
			return raw[:i]
		}
		return raw
	}
	return redact(u)
}

// redact returns u without user info, query or fragment: artifact URLs may
// carry an access token in the query, and errors end up in logs.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}
