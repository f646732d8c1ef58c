package tiles

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/translog"
)

// ExportResult is what Export wrote.
type ExportResult struct {
	// Checkpoint is the exported checkpoint.
	Checkpoint translog.Checkpoint
	// Previous is the checkpoint the directory held before, if any, which
	// Checkpoint was proven to extend; nil on the first export.
	Previous *translog.Checkpoint
	// Tiles and Bundles count the hash tiles and entry bundles written.
	Tiles, Bundles int
}

// Export writes the log c reads into dir as static C2SP tlog-tiles files
// (checkpoint, tile/<L>/…, tile/entries/…) that any web server can serve
// and OpenDir reads. Every tile and bundle is authenticated against the
// checkpoint before it is written, and the checkpoint is written last, so
// the directory's checkpoint only ever names files already there. When dir
// already holds an export, the new checkpoint must extend it (a
// *ForkError or *StaleError otherwise, and nothing is written) and only the
// tiles past it are written. Each file is replaced atomically and durably.
// now is when the checkpoint's cosignatures are checked (translog.Open).
func Export(ctx context.Context, c *Client, dir string, now time.Time) (ExportResult, error) {
	cp, _, err := c.Checkpoint(ctx, now)
	if err != nil {
		return ExportResult{}, err
	}
	res := ExportResult{Checkpoint: cp}
	from := int64(0)
	prev, ok, err := ReadState(filepath.Join(dir, CheckpointPath), c.policy.Log)
	if err != nil {
		return res, fmt.Errorf("export to %s: %w", dir, err)
	}
	if ok {
		if err := c.CheckConsistent(ctx, prev, cp); err != nil {
			return res, err
		}
		res.Previous, from = &prev, prev.Size
	}
	for _, t := range tlog.NewTiles(TileHeight, from, cp.Size) {
		data, err := c.TileData(ctx, cp, t)
		if err != nil {
			return res, err
		}
		if err := writeFile(dir, TilePath(t), data); err != nil {
			return res, err
		}
		res.Tiles++
	}
	for n := from >> TileHeight; n<<TileHeight < cp.Size; n++ {
		recs, err := c.Bundle(ctx, cp, n)
		if err != nil {
			return res, err
		}
		data, err := EncodeBundle(recs)
		if err != nil {
			return res, err
		}
		t := tlog.Tile{H: TileHeight, L: levelEntries, N: n, W: len(recs)}
		if err := writeFile(dir, TilePath(t), data); err != nil {
			return res, err
		}
		res.Bundles++
	}
	if err := writeFile(dir, CheckpointPath, cp.Note); err != nil {
		return res, err
	}
	return res, nil
}

func writeFile(dir, path string, data []byte) error {
	name := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(name, data, 0o644); err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	return nil
}
