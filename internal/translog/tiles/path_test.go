package tiles

import (
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

func TestTilePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tile tlog.Tile
		path string
	}{
		{tlog.Tile{H: 8, L: 0, N: 0, W: 256}, "tile/0/000"},
		{tlog.Tile{H: 8, L: 0, N: 5, W: 88}, "tile/0/005.p/88"},
		{tlog.Tile{H: 8, L: 2, N: 1000, W: 256}, "tile/2/x001/000"},
		{tlog.Tile{H: 8, L: 0, N: 1234067, W: 256}, "tile/0/x001/x234/067"},
		{tlog.Tile{H: 8, L: -1, N: 1234067, W: 1}, "tile/entries/x001/x234/067.p/1"},
	} {
		if got := TilePath(tc.tile); got != tc.path {
			t.Errorf("TilePath(%+v) = %q, want %q", tc.tile, got, tc.path)
		}
		got, err := parseTilePath(tc.path)
		if err != nil || got != tc.tile {
			t.Errorf("parseTilePath(%q) = %+v, %v; want %+v", tc.path, got, err, tc.tile)
		}
	}
	for _, bad := range []string{
		"tile/0/0", "tile/0/0000", "tile/0/x000/001", "tile/0/001/002", "tile/0/x001",
		"tile/0/000.p/0", "tile/0/000.p/256", "tile/0/000.p/07", "tile/0/000.p", "tile/00/000",
		"tile/8/000", "tile/-1/000", "tile/data/000", "tile/0/", "tile/0", "tile/0/x001/x002/x003/x004/x005/x006/007",
		"tile/0/+01", "tile/entries/000.p/x",
	} {
		if tile, err := parseTilePath(bad); err == nil {
			t.Errorf("parseTilePath(%q) = %+v, want an error", bad, tile)
		}
	}
}

func FuzzParseTilePath(f *testing.F) {
	for _, s := range []string{"tile/0/000", "tile/entries/x001/234.p/7", "tile/3/x999/x000/000.p/255"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		tile, err := parseTilePath(p)
		if err != nil {
			return
		}
		// One tile, one path: whatever parses is the canonical spelling.
		if got := TilePath(tile); got != p {
			t.Errorf("TilePath(parseTilePath(%q)) = %q", p, got)
		}
	})
}

func TestTileFits(t *testing.T) {
	t.Parallel()
	const size = 600 // two full tiles and 88 at level 0, two hashes at level 1
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"tile/0/000", true},
		{"tile/0/001", true},
		{"tile/0/002", false},
		{"tile/0/002.p/88", true},
		{"tile/0/002.p/5", true},
		{"tile/0/002.p/89", false},
		{"tile/0/003.p/1", false},
		{"tile/1/000.p/2", true},
		{"tile/1/000.p/3", false},
		{"tile/1/000", false},
		{"tile/2/000.p/1", false},
		{"tile/7/000.p/1", false},
		{"tile/entries/002.p/88", true},
		{"tile/entries/002", false},
		{"tile/0/x999/x999/x999/x999/x999/999", false},
	} {
		tile, err := parseTilePath(tc.path)
		if err != nil {
			t.Fatalf("parseTilePath(%q): %v", tc.path, err)
		}
		if got := tileFits(tile, size); got != tc.want {
			t.Errorf("tileFits(%q, %d) = %v, want %v", tc.path, size, got, tc.want)
		}
	}
}
