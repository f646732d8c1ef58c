package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"nodehotfix/internal/store"
)

var _ store.History = (*Store)(nil)

// PutPoints implements store.History under one lock.
func (s *Store) PutPoints(ctx context.Context, ps []store.Point) error {
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("put history points: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("put history points: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put history points: %w", err)
	}
	if s.points == nil {
		s.points = make(map[string]map[int64][]byte)
	}
	for _, p := range ps {
		m := s.points[p.Version]
		if m == nil {
			m = make(map[int64][]byte)
			s.points[p.Version] = m
		}
		m[store.PointMinute(p.Time)] = slices.Clone(p.Data)
	}
	return nil
}

// Points implements store.History.
func (s *Store) Points(ctx context.Context, version string, limit int) ([]store.Point, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("list history points: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list history points: %w", err)
	}
	m := s.points[version]
	minutes := slices.Sorted(maps.Keys(m))
	minutes = minutes[max(0, len(minutes)-store.PointsLimit(limit)):]
	out := make([]store.Point, len(minutes))
	for i, k := range minutes {
		out[i] = store.Point{Version: version, Time: time.Unix(k*60, 0).UTC(), Data: slices.Clone(m[k])}
	}
	return out, nil
}

// DeletePoints implements store.History.
func (s *Store) DeletePoints(ctx context.Context, version string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("delete history points: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("delete history points: %w", err)
	}
	n := len(s.points[version])
	delete(s.points, version)
	return n, nil
}
