package tiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Fetcher reads the files of a tiles root.
type Fetcher interface {
	// Fetch returns the file at path, slash-separated and relative to the
	// root ("checkpoint", "tile/0/x001/234"). It returns ErrNotFound when
	// there is none, and a *VerifyError with ReasonTooLarge when it is over
	// limit bytes.
	Fetch(ctx context.Context, path string, limit int64) ([]byte, error)
}

// fetchTimeout bounds one request, headers to last byte: the largest file
// is one entry bundle (MaxBundleSize).
const fetchTimeout = 30 * time.Second

// HTTPFetcher reads a tiles root over http or https.
type HTTPFetcher struct {
	root   string // ends in "/"
	client *http.Client
}

// NewHTTPFetcher returns a Fetcher for the tiles root at rawURL, an http or
// https URL. hc nil means a client of its own with a 30s timeout.
func NewHTTPFetcher(rawURL string, hc *http.Client) (*HTTPFetcher, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("tiles URL %q: want http(s)://host/path", rawURL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: fetchTimeout}
	}
	root := u.String()
	if !strings.HasSuffix(root, "/") {
		root += "/"
	}
	return &HTTPFetcher{root: root, client: hc}, nil
}

// Fetch implements Fetcher.
func (f *HTTPFetcher) Fetch(ctx context.Context, path string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.root+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("fetch %s: %w", path, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("fetch %s: %s", path, resp.Status)
	case resp.ContentLength > limit:
		return nil, tooLarge(path, resp.ContentLength, limit)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, int64(len(data)), limit)
	}
	return data, nil
}

// DirFetcher reads a tiles root from a local directory, as Export writes
// it. Paths cannot leave the directory (os.Root).
type DirFetcher struct {
	root *os.Root
}

// OpenDir returns a Fetcher for the tiles root in dir; Close releases it.
func OpenDir(dir string) (*DirFetcher, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open tiles directory: %w", err)
	}
	return &DirFetcher{root: r}, nil
}

// Close closes the directory.
func (d *DirFetcher) Close() error { return d.root.Close() }

// Fetch implements Fetcher.
func (d *DirFetcher) Fetch(ctx context.Context, path string, limit int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := d.root.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, int64(len(data)), limit)
	}
	return data, nil
}

func tooLarge(path string, n, limit int64) error {
	return &VerifyError{Reason: ReasonTooLarge, Path: path, Err: fmt.Errorf("%d bytes, over %d", n, limit)}
}
