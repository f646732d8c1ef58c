package tiles

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/translog"
)

// MaxBundleSize bounds an entry bundle: 256 entries of the largest size.
const MaxBundleSize = TileWidth * (2 + MaxEntrySize)

// Client reads and verifies a log's tiles through a Fetcher, trusting only
// its Policy: the log key, and the witnesses it names. It is safe for
// concurrent use.
type Client struct {
	fetch  Fetcher
	policy translog.Policy

	mu sync.Mutex
	// cache holds authenticated tiles that every read of the tree fetches
	// again: the upper levels and the partial right edge.
	cache map[tlog.Tile][]byte
}

// NewClient returns a Client reading through f and verifying checkpoints
// with p (translog.Open): p.Log, the log's key, is required; p.Quorum 0
// checks no witness.
func NewClient(f Fetcher, p translog.Policy) *Client {
	return &Client{fetch: f, policy: p, cache: make(map[tlog.Tile][]byte)}
}

// Checkpoint fetches the log's checkpoint and verifies it with the
// Client's policy at time now (translog.Open), returning it with its
// verified cosignatures, newest first. A checkpoint that does not verify
// is a *VerifyError with ReasonCheckpoint wrapping translog's
// *VerifyError, whose Reason says why (unsigned, no-quorum, stale, …).
func (c *Client) Checkpoint(ctx context.Context, now time.Time) (translog.Checkpoint, []translog.Cosignature, error) {
	msg, err := c.fetch.Fetch(ctx, CheckpointPath, translog.MaxNoteSize)
	if err != nil {
		return translog.Checkpoint{}, nil, err
	}
	cp, cosigs, err := translog.Open(msg, c.policy, now)
	if err != nil {
		return translog.Checkpoint{}, nil, &VerifyError{Reason: ReasonCheckpoint, Path: CheckpointPath, Err: err}
	}
	return cp, cosigs, nil
}

// CheckConsistent verifies that cp extends kept, both already verified:
// same origin, and kept's tree is a prefix of cp's
// (translog.VerifyConsistency), proven with hashes from cp's authenticated
// tiles. It returns a *ForkError when the two conflict (same size and
// another hash, or no consistency proof), a *StaleError when cp is
// smaller, and a *VerifyError when the server's tiles do not match cp.
func (c *Client) CheckConsistent(ctx context.Context, kept, cp translog.Checkpoint) error {
	if kept.Origin != cp.Origin {
		return fmt.Errorf("kept checkpoint is of log %q, not %q", kept.Origin, cp.Origin)
	}
	var proof tlog.TreeProof
	if kept.Size > 0 && kept.Size < cp.Size {
		var err error
		if proof, err = tlog.ProveTree(cp.Size, kept.Size, c.hashReader(ctx, cp)); err != nil {
			return c.tileErr(err)
		}
	}
	err := translog.VerifyConsistency(kept, cp, proof)
	var ve *translog.VerifyError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ve):
		return err
	case ve.Reason == translog.ReasonRollback:
		return &StaleError{Kept: kept, Got: cp}
	case ve.Reason == translog.ReasonInconsistent && kept.Size == cp.Size:
		return &ForkError{Kept: kept, Got: cp, Reason: "same size, different root hash", Err: err}
	case ve.Reason == translog.ReasonInconsistent:
		return &ForkError{Kept: kept, Got: cp, Reason: "the kept tree is not a prefix of the served one", Err: err}
	}
	return err
}

// TreeProof returns the proof that cp's tree extends its first n records
// (tlog.ProveTree), from cp's authenticated tiles: what a restore that
// re-appends records up to n sends so lpsd can check they lead to cp.
func (c *Client) TreeProof(ctx context.Context, cp translog.Checkpoint, n int64) (tlog.TreeProof, error) {
	if n < 1 || n > cp.Size {
		return nil, fmt.Errorf("tree proof from %d: want 1 to the checkpoint's %d", n, cp.Size)
	}
	proof, err := tlog.ProveTree(cp.Size, n, c.hashReader(ctx, cp))
	if err != nil {
		return nil, c.tileErr(err)
	}
	return proof, nil
}

// Records calls fn with each record of cp's tree from index start on, in
// order, after checking it against the tree's leaf hash: fn never sees a
// record the log key does not vouch for. It stops at fn's first error and
// returns it. Errors from the server's data are *VerifyError.
func (c *Client) Records(ctx context.Context, cp translog.Checkpoint, start int64, fn func(index int64, record []byte) error) error {
	if start < 0 {
		start = 0
	}
	for n := start >> TileHeight; n<<TileHeight < cp.Size; n++ {
		recs, err := c.Bundle(ctx, cp, n)
		if err != nil {
			return err
		}
		for i, rec := range recs {
			index := n<<TileHeight + int64(i)
			if index < start {
				continue
			}
			if err := fn(index, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// Bundle returns the verified entries of entry bundle n of cp's tree: 256,
// or fewer in the last bundle.
func (c *Client) Bundle(ctx context.Context, cp translog.Checkpoint, n int64) ([][]byte, error) {
	first := n << TileHeight
	if n < 0 || first >= cp.Size {
		return nil, fmt.Errorf("entry bundle %d is not in a tree of %d", n, cp.Size)
	}
	w := int(min(TileWidth, cp.Size-first))
	t := tlog.Tile{H: TileHeight, L: levelEntries, N: n, W: w}
	indexes := make([]int64, w)
	for i := range indexes {
		indexes[i] = tlog.StoredHashIndex(0, first+int64(i))
	}
	leaves, err := c.hashReader(ctx, cp).ReadHashes(indexes)
	if err != nil {
		return nil, c.tileErr(err)
	}
	path, data, err := c.fetchWidth(ctx, t, MaxBundleSize)
	if err != nil {
		return nil, err
	}
	recs, err := DecodeBundle(data)
	if err != nil {
		return nil, &VerifyError{Reason: ReasonEntries, Path: path, Err: err}
	}
	// A full bundle stands in for a partial one that is gone; it must
	// hold 256 entries, of which the tree vouches for the first w.
	if want := widthOf(path, w); len(recs) != want {
		return nil, &VerifyError{Reason: ReasonEntries, Path: path, Err: fmt.Errorf("%d entries, want %d", len(recs), want)}
	}
	recs = recs[:w]
	for i, rec := range recs {
		if h := tlog.RecordHash(rec); h != leaves[i] {
			return nil, &VerifyError{Reason: ReasonEntries, Path: path,
				Err: fmt.Errorf("entry %d hashes to %s, the tree's leaf is %s", first+int64(i), h, leaves[i])}
		}
	}
	return recs, nil
}

// TileData returns hash tile t of cp's tree, authenticated against cp.
func (c *Client) TileData(ctx context.Context, cp translog.Checkpoint, t tlog.Tile) ([]byte, error) {
	data, err := tlog.ReadTileData(t, c.hashReader(ctx, cp))
	if err != nil {
		return nil, c.tileErr(err)
	}
	return data, nil
}

// fetchWidth fetches tile t (hash tile or entry bundle). A partial tile
// may be gone once the log has grown past it, so a missing one is read
// from its full tile instead; the path returned says which was read.
func (c *Client) fetchWidth(ctx context.Context, t tlog.Tile, limit int64) (string, []byte, error) {
	path := TilePath(t)
	data, err := c.fetch.Fetch(ctx, path, limit)
	if t.W < TileWidth && errors.Is(err, ErrNotFound) {
		full := t
		full.W = TileWidth
		path = TilePath(full)
		data, err = c.fetch.Fetch(ctx, path, limit)
	}
	return path, data, err
}

// widthOf returns the width of the tile at path: TileWidth for a full
// tile's path, else w.
func widthOf(path string, w int) int {
	if t, err := parseTilePath(path); err == nil && t.W == TileWidth {
		return TileWidth
	}
	return w
}

// fetchError marks errors of the Fetcher inside tlog's calls, so tileErr
// can tell them from tlog's own authentication failures.
type fetchError struct{ err error }

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// tileErr converts an error from a tlog.TileHashReader read: the fetcher's
// errors as they are, anything else (tiles that do not hash to the
// checkpoint) as a *VerifyError.
func (c *Client) tileErr(err error) error {
	var fe *fetchError
	if errors.As(err, &fe) {
		return fe.err
	}
	return &VerifyError{Reason: ReasonTile, Path: "tile/", Err: err}
}

func (c *Client) hashReader(ctx context.Context, cp translog.Checkpoint) tlog.HashReader {
	return tlog.TileHashReader(tlog.Tree{N: cp.Size, Hash: cp.Hash}, &tileReader{ctx: ctx, c: c})
}

// tileReader is a tlog.TileReader over the Client's fetcher for one call;
// tlog's interface has no ctx, so it carries the caller's.
type tileReader struct {
	ctx context.Context
	c   *Client
}

func (r *tileReader) Height() int { return TileHeight }

func (r *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		r.c.mu.Lock()
		data, ok := r.c.cache[t]
		r.c.mu.Unlock()
		if ok {
			out[i] = data
			continue
		}
		path, data, err := r.c.fetchWidth(r.ctx, t, TileWidth*tlog.HashSize)
		if err != nil {
			return nil, &fetchError{err}
		}
		want := widthOf(path, t.W) * tlog.HashSize
		if len(data) != want {
			return nil, &fetchError{&VerifyError{Reason: ReasonTile, Path: path, Err: fmt.Errorf("%d bytes, want %d", len(data), want)}}
		}
		out[i] = data[:t.W*tlog.HashSize]
	}
	return out, nil
}

// SaveTiles caches the tiles every read needs again; tlog calls it only
// with tiles it authenticated.
func (r *tileReader) SaveTiles(tiles []tlog.Tile, data [][]byte) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	for i, t := range tiles {
		if t.L > 0 || t.W < TileWidth {
			r.c.cache[t] = data[i]
		}
	}
}
