package tiles

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"

	"golang.org/x/mod/sumdb/tlog"
)

// Source is a log as Handler reads it; internal/store's log methods
// satisfy it. Implementations must be safe for concurrent use.
type Source interface {
	// LogSize returns the number of records in the log.
	LogSize(ctx context.Context) (int64, error)
	// LogHashes returns the stored hashes at the given
	// tlog.StoredHashIndex indexes, as tlog.HashReader does.
	LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error)
	// LogRecords returns records [start, end) in order.
	LogRecords(ctx context.Context, start, end int64) ([][]byte, error)
	// Checkpoint returns the latest cosigned checkpoint note and its tree
	// size; a nil note with a nil error means there is none yet.
	Checkpoint(ctx context.Context) (size int64, note []byte, err error)
}

// Cache-Control values: a full tile never changes; a partial one and the
// checkpoint are replaced as the log grows, so caches may keep them only
// briefly.
const (
	cacheImmutable  = "public, max-age=31536000, immutable"
	cachePartial    = "public, max-age=60"
	cacheCheckpoint = "public, max-age=5"
)

// MaxEntrySize is the largest record an entry bundle can hold: its length
// prefix is a uint16.
const MaxEntrySize = 1<<16 - 1

// Handler returns an http.Handler serving src read-only as C2SP tlog-tiles
// at its root: GET (or HEAD) /checkpoint, /tile/<L>/<N>[.p/<W>] and
// /tile/entries/<N>[.p/<W>]. A tile that the log's current size does not
// allow, or a path that is not a canonical tile path, is 404; each request
// reads at most one tile's 256 hashes or records. Mount it under a prefix
// with http.StripPrefix.
func Handler(src Source) http.Handler {
	h := &handler{src: src}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /"+CheckpointPath, h.checkpoint)
	mux.HandleFunc("GET /tile/", h.tile)
	return mux
}

type handler struct{ src Source }

func (h *handler) checkpoint(w http.ResponseWriter, r *http.Request) {
	_, note, err := h.src.Checkpoint(r.Context())
	if err != nil {
		http.Error(w, "reading the checkpoint failed", http.StatusInternalServerError)
		return
	}
	if note == nil {
		http.Error(w, "no checkpoint yet", http.StatusNotFound)
		return
	}
	w.Header().Set("Cache-Control", cacheCheckpoint)
	write(w, "text/plain; charset=utf-8", note)
}

func (h *handler) tile(w http.ResponseWriter, r *http.Request) {
	t, err := parseTilePath(r.URL.Path[1:])
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	size, err := h.src.LogSize(ctx)
	if err != nil {
		http.Error(w, "reading the log size failed", http.StatusInternalServerError)
		return
	}
	if !tileFits(t, size) {
		http.NotFound(w, r)
		return
	}
	var data []byte
	if t.L == levelEntries {
		data, err = h.entries(ctx, t)
	} else {
		data, err = tlog.ReadTileData(t, hashReader{ctx, h.src})
	}
	if err != nil {
		http.Error(w, "reading the tile failed", http.StatusInternalServerError)
		return
	}
	cache := cachePartial
	if t.W == TileWidth {
		cache = cacheImmutable
	}
	w.Header().Set("Cache-Control", cache)
	write(w, "application/octet-stream", data)
}

// entries returns the entry bundle t.
func (h *handler) entries(ctx context.Context, t tlog.Tile) ([]byte, error) {
	start := t.N << TileHeight
	recs, err := h.src.LogRecords(ctx, start, start+int64(t.W))
	if err != nil {
		return nil, err
	}
	if len(recs) != t.W {
		return nil, fmt.Errorf("read records %d+%d: got %d", start, t.W, len(recs))
	}
	return EncodeBundle(recs)
}

func write(w http.ResponseWriter, contentType string, data []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data) //nolint:errcheck // the client went away
}

// hashReader adapts a Source to tlog.HashReader for one request; tlog's
// interface has no ctx, so it carries the request's.
type hashReader struct {
	ctx context.Context
	src Source
}

func (r hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	return r.src.LogHashes(r.ctx, indexes)
}

// EncodeBundle returns an entry bundle of records: each a big-endian
// uint16 length, then its bytes. A record over MaxEntrySize is an error.
func EncodeBundle(records [][]byte) ([]byte, error) {
	n := 0
	for i, rec := range records {
		if len(rec) > MaxEntrySize {
			return nil, fmt.Errorf("entry %d: %d bytes, over %d", i, len(rec), MaxEntrySize)
		}
		n += 2 + len(rec)
	}
	out := make([]byte, 0, n)
	for _, rec := range records {
		out = binary.BigEndian.AppendUint16(out, uint16(len(rec)))
		out = append(out, rec...)
	}
	return out, nil
}

// DecodeBundle splits an entry bundle into its entries. It fails on a
// truncated entry; the caller checks the count.
func DecodeBundle(data []byte) ([][]byte, error) {
	var recs [][]byte
	for i := 0; len(data) > 0; i++ {
		if len(data) < 2 {
			return nil, fmt.Errorf("entry %d: truncated length", i)
		}
		n := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+n {
			return nil, fmt.Errorf("entry %d: %d bytes, %d left", i, n, len(data)-2)
		}
		recs = append(recs, data[2:2+n:2+n])
		data = data[2+n:]
	}
	return recs, nil
}
