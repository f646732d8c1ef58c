package tiles

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// TileHeight is the height of every tile: C2SP tlog-tiles fixes it at 8,
// so a full tile holds 256 hashes and a full entry bundle 256 entries.
const TileHeight = 8

// TileWidth is the number of hashes of a full tile, or entries of a full
// entry bundle.
const TileWidth = 1 << TileHeight

// maxLevel is the highest tile level a tree of int64 size can have.
const maxLevel = 63 / TileHeight

// maxGroups bounds the 3-digit groups of a tile number (10^18 tiles).
const maxGroups = 6

// levelEntries marks an entry bundle in a tlog.Tile; tlog uses -1 for data
// tiles too.
const levelEntries = -1

// CheckpointPath is the path of the checkpoint under a tiles root.
const CheckpointPath = "checkpoint"

// TilePath returns the C2SP tlog-tiles path of t relative to the root:
// "tile/<L>/<N>[.p/<W>]", or "tile/entries/<N>[.p/<W>]" when t.L is -1. N
// is written in 3-digit groups, all but the last prefixed with "x"; unlike
// the Go checksum database's paths there is no height element.
func TilePath(t tlog.Tile) string {
	level := "entries"
	if t.L != levelEntries {
		level = strconv.Itoa(t.L)
	}
	p := "tile/" + level + "/" + encodeN(t.N)
	if t.W < TileWidth {
		p += ".p/" + strconv.Itoa(t.W)
	}
	return p
}

func encodeN(n int64) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n /= 1000; n > 0; n /= 1000 {
		s = fmt.Sprintf("x%03d/%s", n%1000, s)
	}
	return s
}

var errBadPath = errors.New("not a tile path")

// parseTilePath parses a canonical tile path as TilePath writes it; t.H is TileHeight and t.L is -1 for an
// entry bundle. Non-canonical spellings (leading zero groups, "x" on the
// last group, a width of 0 or 256) are errBadPath, so one tile has one URL.
func parseTilePath(p string) (tlog.Tile, error) {
	p, ok := strings.CutPrefix(p, "tile/")
	if !ok {
		return tlog.Tile{}, errBadPath
	}
	level, rest, ok := strings.Cut(p, "/")
	if !ok {
		return tlog.Tile{}, errBadPath
	}
	t := tlog.Tile{H: TileHeight, W: TileWidth}
	if level == "entries" {
		t.L = levelEntries
	} else {
		l, ok := canonicalInt(level, maxLevel)
		if !ok {
			return tlog.Tile{}, errBadPath
		}
		t.L = int(l)
	}
	elems := strings.Split(rest, "/")
	if n := len(elems); n >= 2 && strings.HasSuffix(elems[n-2], ".p") {
		w, ok := canonicalInt(elems[n-1], TileWidth-1)
		if !ok || w == 0 {
			return tlog.Tile{}, errBadPath
		}
		t.W = int(w)
		elems[n-2] = strings.TrimSuffix(elems[n-2], ".p")
		elems = elems[:n-1]
	}
	if len(elems) > maxGroups {
		return tlog.Tile{}, errBadPath
	}
	for i, e := range elems {
		last := i == len(elems)-1
		if !last {
			if !strings.HasPrefix(e, "x") {
				return tlog.Tile{}, errBadPath
			}
			e = e[1:]
		}
		if len(e) != 3 || !isDigits(e) || (i == 0 && !last && e == "000") {
			return tlog.Tile{}, errBadPath
		}
		d, _ := strconv.Atoi(e)
		t.N = t.N*1000 + int64(d)
	}
	return t, nil
}

// canonicalInt parses a decimal number from 0 to max without sign or
// leading zeros.
func canonicalInt(s string, max int64) (int64, bool) {
	if s == "" || len(s) > 19 || !isDigits(s) || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > max {
		return 0, false
	}
	return n, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// tileFits reports whether tree size allows tile t: every hash (or entry) it
// holds exists in a tree of that size. A partial tile narrower than the
// current edge is allowed, since a reader holding an older checkpoint needs
// it; its hashes never change.
func tileFits(t tlog.Tile, size int64) bool {
	level := 0
	if t.L > 0 {
		level = t.L * TileHeight
	}
	width := size >> level // hashes (or entries) at this level
	if t.N > width>>TileHeight {
		return false
	}
	return t.N<<TileHeight+int64(t.W) <= width
}
