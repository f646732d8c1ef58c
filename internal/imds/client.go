// Package imds fetches the VM's attested identity document from the cloud's
// instance metadata service.
package imds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultURL is the metadata service's link-local address.
const DefaultURL = "http://169.254.169.254"

// APIVersion is the attested-document API version the reference requests.
const APIVersion = "2025-04-07"

const (
	// MaxBodySize caps a response: a real attested document is a few KiB.
	MaxBodySize = 64 << 10
	// attempts is the reference's total attempt count.
	attempts = 2
	// attemptTimeout bounds each request, connect to last byte.
	attemptTimeout = 2 * time.Second
	// dialTimeout and headerTimeout fail a dead or black-holed metadata
	// service fast: it is link-local and answers in milliseconds when up.
	dialTimeout   = time.Second
	headerTimeout = time.Second
	// retryDelay spaces the two attempts a little (jittered), so a 429 or a
	// restarting service gets a moment without eating the budget.
	retryDelay = 100 * time.Millisecond
)

// Client requests attested documents. Its zero value is not usable; build one
// with NewClient.
type Client struct {
	baseURL string
	http    *http.Client
}

// NewClient returns a client for the metadata service at baseURL (DefaultURL
// on a VM). Its transport never uses a proxy: the metadata service must be
// reached directly, and Go's environment proxy settings would otherwise send
// 169.254.169.254 traffic to HTTP_PROXY.
func NewClient(baseURL string) *Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: dialTimeout}).DialContext,
		ResponseHeaderTimeout: headerTimeout,
		DisableCompression:    true,
		MaxIdleConns:          1,
		IdleConnTimeout:       time.Second,
	}
	return &Client{
		baseURL: strings.TrimRight(baseURL, "/"),
		http: &http.Client{
			Transport: tr,
			Timeout:   attemptTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("metadata service redirected; refusing to follow")
			},
		},
	}
}

// StatusError is an HTTP status other than 200 from the metadata service.
type StatusError struct{ Code int }

func (e *StatusError) Error() string { return fmt.Sprintf("imds returned status %d", e.Code) }

// AttestedSignature returns the attested document's "signature": the base64
// PKCS#7 blob the live-patching service authenticates. It makes at most two
// attempts, retrying only transport errors and statuses the service documents
// as transient (410, 429, 5xx), and gives up when ctx is done.
func (c *Client) AttestedSignature(ctx context.Context) (string, error) {
	var lastErr error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			d := retryDelay/2 + rand.N(retryDelay)
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("fetch attested document: %w (last error: %w)", ctx.Err(), lastErr)
			case <-time.After(d):
			}
		}
		sig, err := c.fetch(ctx)
		if err == nil {
			return sig, nil
		}
		lastErr = err
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return "", fmt.Errorf("fetch attested document: %w", lastErr)
}

func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusGone || se.Code == http.StatusTooManyRequests || se.Code >= 500
	}
	var ce *contentError
	return !errors.As(err, &ce)
}

// contentError is a well-formed HTTP exchange with an unusable body; asking
// again would get the same answer.
type contentError struct{ msg string }

func (e *contentError) Error() string { return e.msg }

func (c *Client) fetch(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	url := c.baseURL + "/metadata/attested/document?api-version=" + APIVersion
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Metadata", "true")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodySize+1))
	if err != nil {
		return "", fmt.Errorf("read imds response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", &StatusError{Code: resp.StatusCode}
	}
	if len(body) > MaxBodySize {
		return "", &contentError{fmt.Sprintf("imds response exceeds %d bytes", MaxBodySize)}
	}
	var doc struct {
		Encoding  string `json:"encoding"`
		Signature string `json:"signature"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", &contentError{fmt.Sprintf("parse imds attested document: %v", err)}
	}
	if doc.Signature == "" {
		return "", &contentError{"imds attested document had empty signature"}
	}
	return doc.Signature, nil
}
