package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// copyBufferSize is the only buffer a download uses for body bytes, so
// memory does not grow with the artifact.
const copyBufferSize = 32 << 10

// ErrStalled is returned (wrapped) when no body byte arrived within the
// Client's stall timeout.
var ErrStalled = errors.New("download stalled")

// Reason says which check a VerifyError failed.
type Reason string

// Reasons of a VerifyError.
const (
	// ReasonURL: the URL is not https, has user info or has no host.
	ReasonURL Reason = "url"
	// ReasonRedirect: a redirect hop broke the URL policy, or there were
	// too many hops.
	ReasonRedirect Reason = "redirect"
	// ReasonEncoding: the response has a Content-Encoding other than
	// identity.
	ReasonEncoding Reason = "encoding"
	// ReasonSize: Content-Length or the number of body bytes differs from
	// the signed size.
	ReasonSize Reason = "size"
	// ReasonDigest: the body's sha256 differs from the signed digest.
	ReasonDigest Reason = "sha256"
)

// VerifyError reports a response, or a URL, that contradicts the signed
// release or the URL policy, as opposed to a transport failure.
type VerifyError struct {
	// Reason is the check that failed, for telemetry and branching.
	Reason Reason
	// Detail says what was seen; it never contains a URL query.
	Detail string
}

func (e *VerifyError) Error() string { return "verify " + string(e.Reason) + ": " + e.Detail }

// Want is what the signed release says the artifact is.
type Want struct {
	// SHA256 is the hex sha256 of the artifact.
	SHA256 string
	// Size is the exact length of the artifact in bytes; it must be > 0.
	Size int64
}

// Download GETs rawURL and streams the body into dst, returning nil only if
// dst received exactly want.Size bytes whose sha256 is want.SHA256. Policy
// and integrity failures are a *VerifyError; a body that stops arriving
// wraps ErrStalled; ctx expiry wraps ctx's error; anything else is a
// transport error. There is no retry, and ctx bounds the whole download,
// body included, so the caller sets its deadline. dst never receives more
// than want.Size bytes, but on error it may hold a prefix: the caller owns
// dst and must discard it.
func (c *Client) Download(ctx context.Context, rawURL string, want Want, dst io.Writer) error {
	digest, err := hex.DecodeString(want.SHA256)
	if err != nil || len(digest) != sha256.Size {
		return fmt.Errorf("download: invalid want sha256 %q", want.SHA256)
	}
	if want.Size <= 0 {
		return fmt.Errorf("download: invalid want size %d", want.Size)
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	if err := c.download(ctx, u, want, digest, dst); err != nil {
		return fmt.Errorf("download %s: %w", redact(u), err)
	}
	return nil
}

// Get is Download for a file of unknown digest and size, which the caller
// verifies itself (a signed index, say): at most max bytes reach dst, and a
// longer body is a *VerifyError (ReasonSize). Everything else is as for
// Download.
func (c *Client) Get(ctx context.Context, rawURL string, max int64, dst io.Writer) error {
	if max <= 0 {
		return fmt.Errorf("get: invalid max size %d", max)
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return err
	}
	if err := c.download(ctx, u, Want{Size: max}, nil, dst); err != nil {
		return fmt.Errorf("get %s: %w", redact(u), err)
	}
	return nil
}

// parseURL parses rawURL and applies the URL policy.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse errors quote the whole URL, query token included.
		return nil, &VerifyError{Reason: ReasonURL, Detail: "unparsable URL"}
	}
	if err := checkURL(u); err != nil {
		return nil, &VerifyError{Reason: ReasonURL, Detail: fmt.Sprintf("%s: %s", redact(u), err)}
	}
	return u, nil
}

// download streams u's body into dst. With digest, want.Size and digest
// are exactly what the body must be; without (Get), want.Size is a cap.
func (c *Client) download(ctx context.Context, u *url.URL, want Want, digest []byte, dst io.Writer) error {
	exact := digest != nil
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	// Explicit, because an absent Accept-Encoding lets a server pick any.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.http.Do(req)
	if err != nil {
		return requestError(ctx, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unexpected status %s", resp.Status)
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return &VerifyError{Reason: ReasonEncoding, Detail: fmt.Sprintf("content-encoding %q", ce)}
	}
	if resp.ContentLength >= 0 && (resp.ContentLength > want.Size || exact && resp.ContentLength != want.Size) {
		return &VerifyError{Reason: ReasonSize, Detail: fmt.Sprintf("content-length %d, want %d", resp.ContentLength, want.Size)}
	}

	stall := time.AfterFunc(c.stall, func() { cancel(ErrStalled) })
	defer stall.Stop()
	body := io.LimitReader(&progressReader{r: resp.Body, t: stall, d: c.stall}, want.Size+1)

	h := sha256.New()
	buf := make([]byte, copyBufferSize)
	var n int64
	for {
		m, rerr := body.Read(buf)
		if m > 0 {
			n += int64(m)
			if n > want.Size {
				return &VerifyError{Reason: ReasonSize, Detail: fmt.Sprintf("body longer than %d bytes", want.Size)}
			}
			h.Write(buf[:m])
			if _, err := dst.Write(buf[:m]); err != nil {
				return fmt.Errorf("write body: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if cause := context.Cause(ctx); cause != nil {
				return fmt.Errorf("read body after %d bytes: %w", n, cause)
			}
			return fmt.Errorf("read body after %d bytes: %w", n, rerr)
		}
	}
	if !exact {
		return nil
	}
	if n != want.Size {
		return &VerifyError{Reason: ReasonSize, Detail: fmt.Sprintf("body has %d bytes, want %d", n, want.Size)}
	}
	if got := h.Sum(nil); !bytes.Equal(got, digest) {
		return &VerifyError{Reason: ReasonDigest, Detail: fmt.Sprintf("got %x, want %x", got, digest)}
	}
	return nil
}

// requestError unwraps the *url.Error of a failed Do, whose message repeats
// the full URL (query token included), and prefers ctx's cause, which says
// why the request was cut.
func requestError(ctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ve *VerifyError
	if errors.As(err, &ve) {
		return ve
	}
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("get: %w", cause)
	}
	return fmt.Errorf("get: %w", err)
}

// progressReader pushes the stall deadline back whenever bytes arrive.
type progressReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.t.Reset(p.d)
	}
	return n, err
}
