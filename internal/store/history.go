package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// History is an optional capability of a Store, checked by type assertion:
// each release's assessment over time, one point per minute at most, as the
// deciding replica's autopilot recorded it (internal/history). It is what
// a release's charts are drawn from: the same on every replica, after
// restarts, and after the reports it was counted from are pruned, a
// release revoked or expired. Every backend here has it.
//
// A point's Data is the history package's encoding; the store keeps it as
// bytes and never decodes it, so a point written by a newer lpsd is kept
// as it is for the reader that can read it.
type History interface {
	// PutPoints stores ps in one atomic write (etcdstore: one per 128
	// points, etcd's default --max-txn-ops, so a failure may leave the
	// first chunks stored), each keyed by (Version, Time's minute): a
	// point replaces the one stored for its minute, so the last look of a
	// minute is what it keeps. A point with an empty
	// or "/"-holding Version, or empty or oversized Data, is refused with
	// ErrInvalidPoint (wrapped) and nothing of the call is stored. Points
	// are not releases: no revision moves and Watch is not signalled.
	// ErrClosed after Close.
	PutPoints(ctx context.Context, ps []Point) error

	// Points returns release version's newest points, at most limit
	// (limit ≤ 0 or above MaxPointsRead: MaxPointsRead), oldest first.
	// ErrClosed after Close.
	Points(ctx context.Context, version string, limit int) ([]Point, error)

	// DeletePoints deletes every point of release version and returns how
	// many it deleted. ErrClosed after Close.
	DeletePoints(ctx context.Context, version string) (int, error)
}

// Point is one release's assessment at one minute.
type Point struct {
	Version string
	// Time is the minute the point is of (UTC, truncated to the minute
	// when stored).
	Time time.Time
	// Data is the point's encoding (internal/history), at most
	// MaxPointSize bytes.
	Data []byte
}

// Bounds on points.
const (
	// MaxPointSize bounds one point's Data: a point holds a few dozen
	// counts and names.
	MaxPointSize = 4 << 10
	// MaxPointsRead bounds one Points call, and the points
	// internal/history returns with the earlier looks they carry: about a
	// week of a release whose assessment changes every minute, less when
	// it moves several times a minute; the chart draws at most a few
	// hundred of them.
	MaxPointsRead = 10_000
)

// ErrInvalidPoint: a point's key (Version) or Data cannot be stored.
var ErrInvalidPoint = errors.New("invalid history point")

// Validate returns an error wrapping ErrInvalidPoint unless p can be
// stored: a Version free of "/", which backends join keys with, and Data
// of 1 to MaxPointSize bytes.
func (p Point) Validate() error {
	switch {
	case p.Version == "" || strings.Contains(p.Version, "/"):
		return fmt.Errorf("history point version %q: empty or contains \"/\": %w", p.Version, ErrInvalidPoint)
	case len(p.Data) == 0 || len(p.Data) > MaxPointSize:
		return fmt.Errorf("history point of %s at %v: %d bytes of data, want 1 to %d: %w", p.Version, p.Time, len(p.Data), MaxPointSize, ErrInvalidPoint)
	}
	return nil
}

// PointMinute is the minute (Unix minutes) a point of time t is keyed by;
// a time before 1970 is the minute 0.
func PointMinute(t time.Time) int64 { return max(t.Unix(), 0) / 60 }

// PointsLimit is the number of points a Points call with limit returns
// at most.
func PointsLimit(limit int) int {
	if limit <= 0 || limit > MaxPointsRead {
		return MaxPointsRead
	}
	return limit
}

// HistoryRetention is how long a release's points are kept after its life
// ends (revoked, or its envelope expired): an incident review reads them
// then.
const HistoryRetention = 90 * 24 * time.Hour
